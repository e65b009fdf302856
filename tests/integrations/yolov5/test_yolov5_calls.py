"""The calls a patched train.py makes (yolo_det.integrations.yolov5), in process."""

from __future__ import annotations

import argparse
import json
import os

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from yolo_det import session as runtime
from yolo_det.core import seeding
from yolo_det.integrations.yolov5 import script as v5


@pytest.fixture(autouse=True)
def _fresh_stash(monkeypatch):
    monkeypatch.setattr(v5, "_hyp_keys", {})
    monkeypatch.setattr(v5, "_hyp_default", None)
    monkeypatch.setattr(v5, "_exit_hook", True)  # no atexit hooks from in-process tests
    monkeypatch.delenv("YOLO_DET_DETERMINISTIC", raising=False)
    monkeypatch.delenv("RANK", raising=False)


def _parser(with_seed: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="train.py")
    parser.add_argument("--epochs", type=int, default=1)
    if with_seed:
        parser.add_argument("--seed", type=int, default=0, help="Global training seed")
    return parser


def test_add_arguments_adds_the_flags_and_keeps_the_release_seed(capsys):
    old = v5.add_arguments(_parser(with_seed=False))
    opt = old.parse_args([])
    assert (opt.deterministic, opt.fingerprint, opt.seed) == (None, None, None)
    assert old.parse_args(["--deterministic", "strict", "--seed", "3"]).seed == 3

    new = v5.add_arguments(_parser(with_seed=True))
    assert new.parse_args([]).seed == 0  # the release's own --seed and default stay
    with pytest.raises(SystemExit) as info:
        new.parse_args(["--deterministic", "bogus"])
    assert info.value.code == 2
    assert "invalid choice: 'bogus' (choose from 'strict', 'warn', 'off')" in capsys.readouterr().err


def test_start_resolves_cli_over_hyp_and_records_the_source(tmp_path):
    hyp = {"lr0": 0.01, "deterministic": "off"}
    opt = argparse.Namespace(deterministic="strict", seed=0, save_dir=str(tmp_path))
    session = v5.start(opt, hyp, init_seed=1)
    assert (session.settings.mode, session.settings.source) == ("strict", "cli")
    assert hyp == {"lr0": 0.01}  # popped before YOLOv5 uses the dict
    assert session.seed == 1 and session.extra["yolov5"]["seed_from"] == "init_seeds"
    assert torch.are_deterministic_algorithms_enabled()

    opt.deterministic = None
    session = v5.start(opt, {"deterministic": False}, init_seed=1)  # YAML 1.1 reads `off` as false
    assert (session.settings.mode, session.settings.source) == ("off", "hyp")
    assert not torch.are_deterministic_algorithms_enabled()


def test_evolve_and_v5_style_loads_reach_start_through_the_stash():
    loaded = {"lr0": 0.01, "deterministic": "warn", "deterministic_allow": ["foo"]}
    assert v5.pop_hyp_keys(loaded) == {"deterministic": "warn", "deterministic_allow": ["foo"]}
    assert loaded == {"lr0": 0.01}
    session = v5.start(argparse.Namespace(), dict(loaded))  # evolve passes hyp.copy() without the keys
    assert (session.settings.mode, session.settings.source, session.settings.allow) == ("warn", "hyp", ("foo",))
    v5.pop_hyp_keys({"lr0": 0.02})  # a later load without the keys clears the stash
    assert v5.start(argparse.Namespace(), {}).settings.source == "default"


def test_resume_of_a_run_started_before_the_patch(monkeypatch):
    """--resume rebuilds opt from the old opt.yaml: no deterministic, fingerprint or seed attribute."""
    monkeypatch.setenv("YOLO_DET_DETERMINISTIC", "warn")
    opt = argparse.Namespace(hyp={"lr0": 0.01}, epochs=3, resume=True)
    session = v5.start(opt, opt.hyp, init_seed=0, reseed=True)
    assert (session.settings.mode, session.settings.source) == ("warn", "env")
    assert session.seed == 0 and session.extra["yolov5"]["seed_from"] == "init_seeds"


def test_reseed_only_where_the_release_has_no_seed(monkeypatch):
    torch.manual_seed(123)
    session = v5.start(argparse.Namespace(seed=5), {}, init_seed=1, reseed=True)
    assert session.seed == 5 and session.extra["yolov5"]["seed_from"] == "--seed"
    assert torch.initial_seed() == 5

    monkeypatch.setenv("RANK", "1")
    assert v5.start(argparse.Namespace(seed=5), {}, init_seed=2, reseed=True).seed == 7  # seed + 1 + RANK

    monkeypatch.delenv("RANK")
    torch.manual_seed(123)
    session = v5.start(argparse.Namespace(seed=5), {}, init_seed=6)  # v6.2+: init_seeds already used --seed
    assert session.seed == 6 and torch.initial_seed() == 123


def test_bad_hyp_value_exits_with_a_message_naming_the_file(capsys):
    with pytest.raises(SystemExit) as info:
        v5.start(argparse.Namespace(hyp="data/hyp.custom.yaml"), {"deterministic": "stric"})
    assert info.value.code == 2
    assert "data/hyp.custom.yaml: deterministic: 'stric' is not one of strict, warn, off" in capsys.readouterr().err


def test_fingerprint_flag_sets_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(v5.FINGERPRINT_ENV, raising=False)
    v5.start(argparse.Namespace(fingerprint=str(tmp_path / "fp.jsonl")), {})
    assert os.environ[v5.FINGERPRINT_ENV] == str(tmp_path / "fp.jsonl")


def test_finish_writes_determinism_json_into_save_dir(tmp_path, capsys):
    opt = argparse.Namespace(deterministic="warn", save_dir=tmp_path / "exp")
    v5.start(opt, {}, init_seed=0)
    path = v5.finish(opt)
    assert path == tmp_path / "exp" / "determinism.json"
    data = json.loads(path.read_text())
    assert (data["mode"], data["mode_source"]) == ("warn", "cli")
    assert data["yolov5"]["finished"] is True and data["yolov5"]["save_dir"] == str(tmp_path / "exp")
    assert "yolo-det: wrote" in capsys.readouterr().out
    assert runtime.current() is None and v5.finish(opt) is None


def test_finish_at_exit_covers_runs_that_stop_early(tmp_path):
    v5.start(argparse.Namespace(save_dir=str(tmp_path)), {})
    v5._finish_at_exit()
    data = json.loads((tmp_path / "determinism.json").read_text())
    assert data["yolov5"]["finished"] is False


def test_track_and_backward_without_a_session_are_no_ops():
    model = torch.nn.Linear(2, 1)
    assert v5.track(model) is model
    with v5.backward() as session:
        assert session is None


def test_backward_runs_in_the_session_mode():
    v5.start(argparse.Namespace(deterministic="off"), {"deterministic_backward": "strict"})
    assert not torch.are_deterministic_algorithms_enabled()
    with v5.backward():
        assert torch.are_deterministic_algorithms_enabled()
    assert not torch.are_deterministic_algorithms_enabled()


class _StartsInInit(DataLoader):
    """Like YOLOv5's InfiniteDataLoader: the iterator (and the worker seeds) exist after __init__."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.first = next(iter(self))


def _dataset():
    return TensorDataset(torch.arange(32.0))


def test_seeded_loaders_seed_only_loaders_built_inside(tmp_path):
    v5.start(argparse.Namespace(save_dir=str(tmp_path)), {})
    with v5.seeded_loaders(argparse.Namespace(seed=7)):
        inside = _StartsInInit(_dataset(), batch_size=4, shuffle=True)
    outside = DataLoader(_dataset(), batch_size=4, shuffle=True)
    assert inside.worker_init_fn is seeding.seed_worker and inside.generator is not None
    assert outside.worker_init_fn is None and outside.generator is None
    assert runtime.current().extra["yolov5"]["train_loader"] == {
        "seeded_by": "yolo-det", "seed": 7, "rank": 0, "worker_init_fn": "yolo_det.seed_worker",
        "loaders": ["_StartsInInit"],
        "streams": {"on": True, "seed": 7, "start_epoch": 0, "shuffle": True, "rank": 0, "world_size": 1,
                    "samples": 32}}

    def first_batch(seed):
        torch.manual_seed(999)  # the global RNG no longer decides the order
        with v5.seeded_loaders(argparse.Namespace(seed=seed)):
            return _StartsInInit(_dataset(), batch_size=4, shuffle=True).first[0].tolist()

    assert first_batch(7) == first_batch(7)
    assert first_batch(7) != first_batch(8)


def test_seeded_loaders_keep_explicit_arguments_and_restore_on_error():
    original = DataLoader.__init__
    generator = torch.Generator().manual_seed(1)

    def init_fn(worker_id):
        return None

    with pytest.raises(RuntimeError):
        with v5.seeded_loaders(argparse.Namespace()):
            loader = DataLoader(_dataset(), worker_init_fn=init_fn, generator=generator)
            raise RuntimeError("boom")
    assert loader.worker_init_fn is init_fn and loader.generator is generator
    assert DataLoader.__init__ is original


def test_bad_hyp_value_names_the_file_when_train_replaced_opt_hyp_by_a_dict(capsys, monkeypatch):
    """PyPI 7.0's train() sets opt.hyp = hyp.copy() before start(): the file comes from --hyp."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--hyp", type=str, default="data/hyps/hyp.scratch-low.yaml")
    v5.add_arguments(parser)
    for argv, name in ((["train.py", "--hyp", "my/hyp.yaml"], "my/hyp.yaml"),
                       (["train.py", "--hyp=other.yaml"], "other.yaml"),
                       (["train.py"], "data/hyps/hyp.scratch-low.yaml")):
        monkeypatch.setattr("sys.argv", argv)
        with pytest.raises(SystemExit):
            v5.start(argparse.Namespace(hyp={"lr0": 0.01}), {"deterministic": "stric"})
        assert f"{name}: deterministic: 'stric' is not one of" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        v5.start(argparse.Namespace(hyp={"lr0": 0.01}), {"deterministic_foo": "strict"})
    assert "data/hyps/hyp.scratch-low.yaml: unknown yolo-det key 'deterministic_foo'" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["folder", "unwritable"])
def test_an_unusable_fingerprint_path_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, where):
    path = tmp_path if where == "folder" else "/proc/yolo-det/fp.jsonl"
    monkeypatch.setenv(v5.FINGERPRINT_ENV, str(path))
    with pytest.raises(SystemExit) as info:
        v5.start(argparse.Namespace(), {})
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err
    assert f"cannot write the fingerprint log {path}" in err and "YOLO_DET_FINGERPRINT" in err


@pytest.mark.parametrize("where", ["hyp", "env"])
def test_a_virtual_world_size_is_refused_under_strict_and_reported_under_warn(where, monkeypatch, capsys):
    """The YOLOv5 patch has no virtual world size: a run asking for one must not look world-size invariant."""
    hyp = {"deterministic": "strict"}
    if where == "hyp":
        hyp["virtual_world_size"] = 4
    else:
        monkeypatch.setenv("YOLO_DET_VIRTUAL_WORLD_SIZE", "4")
    with pytest.raises(SystemExit) as info:
        v5.start(argparse.Namespace(), dict(hyp))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "virtual_world_size 4" in err and f"from {where}" in err and "not supported" in err
    session = v5.start(argparse.Namespace(), {**hyp, "deterministic": "warn"})
    assert session.settings.mode == "warn"
    assert "not supported" in capsys.readouterr().err
    assert any("virtual_world_size 4" in note for note in session.report.notes)
