"""Ultralytics YOLOv8/11 trainer: modes and their sources, strict during training, state restored,
seeded train loader, backward context, DDP hand-off, compile refusal, determinism.json, CLI.

Real Ultralytics training of yolov8n.yaml from random init on the synthetic dataset (CPU, 1 epoch).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("ultralytics")

from ultralytics import YOLO  # noqa: E402
from ultralytics.models.yolo.segment import SegmentationTrainer  # noqa: E402

import yolo_det  # noqa: E402
from yolo_det import session as runtime  # noqa: E402
from yolo_det.core import determinism  # noqa: E402
from yolo_det.cli import main as cli_main  # noqa: E402
from yolo_det.integrations.ultralytics import trainer as integ  # noqa: E402
from yolo_det.synthetic import make_dataset  # noqa: E402
from yolo_det.ultralytics import DeterminismMixin, DeterministicTrainer, ModeInputs  # noqa: E402

from conftest import PYTHON, run  # noqa: E402

ALERT_OP = "fake_op_backward_cuda"
STRICT = {"deterministic": True, "warn_only": False, "cudnn_deterministic": True, "cudnn_benchmark": False}


def train_args(dataset: Path, project: Path, name: str) -> dict:
    """The cheapest real training: 1 epoch, 128 px, batch 8, no plots, no per-epoch val, CPU, fp32."""
    return dict(data=str(dataset), epochs=1, imgsz=128, batch=8, workers=2, plots=False, val=False, amp=False,
                device="cpu", project=str(project), name=name, exist_ok=True, seed=0)


def strict_flags(state: dict) -> dict:
    return {key: state[key] for key in STRICT}


def make_trainer(dataset, tmp_path, **overrides) -> DeterministicTrainer:
    args = train_args(dataset, tmp_path, "t")
    args.update(model="yolov8n.yaml", **overrides)
    return DeterministicTrainer(overrides=args)


# -- where the mode comes from ---------------------------------------------------------------

@pytest.mark.parametrize(
    "explicit, arg, env, expected",
    [
        ({}, None, {}, ("warn", "default")),
        ({}, True, {}, ("warn", "hyp")),
        ({}, False, {}, ("off", "hyp")),
        ({}, False, {"YOLO_DET_DETERMINISTIC": "strict"}, ("strict", "env")),
        ({}, True, {"YOLO_DET_DETERMINISTIC": ""}, ("warn", "hyp")),
        ({"deterministic": "off"}, True, {"YOLO_DET_DETERMINISTIC": "strict"}, ("off", "cli")),
    ],
)
def test_mode_precedence_explicit_then_env_then_ultralytics_arg(explicit, arg, env, expected):
    settings = ModeInputs(explicit, arg).resolve(env)
    assert (settings.mode, settings.source) == expected


def test_overrides_lose_yolo_det_keys_and_ranks_inherit_the_parents_inputs():
    overrides = {"deterministic": "STRICT", "deterministic_allow": "a,b", "epochs": 3}
    inputs = ModeInputs.from_overrides(overrides, env={})
    assert inputs.explicit == {"deterministic": "strict", "deterministic_allow": "a,b"}
    assert overrides == {"deterministic": "STRICT", "epochs": 3}
    assert ModeInputs.from_overrides({"deterministic": False}, env={}).ultralytics_arg is False
    rank_env = {integ.ENV_INPUTS: inputs.to_json()}
    inherited = ModeInputs.from_overrides({"deterministic": True}, env=rank_env)
    assert inherited.resolve({}).mode == "strict" and inherited.resolve({}).allow == ("a", "b")


def test_bad_values_name_their_source():
    with pytest.raises(yolo_det.ConfigError, match="deterministic= 'stric' is not one of"):
        ModeInputs.from_overrides({"deterministic": "stric"}, env={})
    with pytest.raises(yolo_det.ConfigError, match="YOLO_DET_DETERMINISTIC"):
        ModeInputs({}, True).resolve({"YOLO_DET_DETERMINISTIC": "always"})


@pytest.mark.parametrize("env_mode, arg, mode, flags", [
    ("strict", False, "strict", STRICT),  # Ultralytics' init_seeds would leave determinism off / warn-only
    ("off", True, "off", {"deterministic": False, "warn_only": False, "cudnn_deterministic": False}),
])
def test_trainer_applies_the_resolved_mode_over_ultralytics_init_seeds(
        dataset, tmp_path, monkeypatch, restore_environ, env_mode, arg, mode, flags):
    monkeypatch.setenv("YOLO_DET_DETERMINISTIC", env_mode)
    trainer = make_trainer(dataset, tmp_path, deterministic=arg)
    assert (trainer.yolo_det.settings.mode, trainer.yolo_det.settings.source) == (mode, "env")
    assert trainer.args.deterministic is (mode != "off")  # args.yaml tells Ultralytics' view of the same mode
    now = determinism.snapshot().to_dict()
    assert {key: now[key] for key in flags} == flags


def test_fingerprints_start_only_in_a_process_that_trains(dataset, tmp_path, monkeypatch, restore_environ):
    """A DDP parent constructs the trainer but never trains: it must not open (and clobber) rank 0's log."""
    monkeypatch.setenv("YOLO_DET_FINGERPRINT", str(tmp_path / "fp.jsonl"))
    make_trainer(dataset, tmp_path, deterministic="warn")
    assert not (tmp_path / "fp.jsonl").exists()
    assert os.environ["YOLO_DET_FINGERPRINT"] == str(tmp_path / "fp.jsonl")


def test_compile_that_cannot_be_deterministic_is_refused_under_strict_before_anything_changes(dataset, tmp_path,
                                                                                              restore_environ):
    before = determinism.snapshot()
    with pytest.raises(yolo_det.ConfigError, match="compile='max-autotune' cannot run under deterministic=strict") as caught:
        make_trainer(dataset, tmp_path, deterministic="strict", compile="max-autotune")
    assert "picks kernels by timing" in str(caught.value)
    assert determinism.snapshot() == before and runtime.current() is None
    assert not (tmp_path / "t").exists()


def test_default_compile_is_accepted_under_strict(dataset, tmp_path, restore_environ):
    trainer = make_trainer(dataset, tmp_path, deterministic="strict", compile=True)
    assert trainer.yolo_det.extra["ultralytics"]["compile"] is True
    assert not trainer.yolo_det.report.notes


def test_compile_under_warn_names_what_it_cannot_check(dataset, tmp_path, restore_environ):
    trainer = make_trainer(dataset, tmp_path, deterministic="warn", compile="reduce-overhead")
    assert any("compile='reduce-overhead' with deterministic=warn" in note and "CUDA graphs" in note
               for note in trainer.yolo_det.report.notes)


def test_strict_registers_the_model_and_swaps_in_replacements(dataset, tmp_path, restore_environ):
    trainer = make_trainer(dataset, tmp_path, deterministic="strict")
    trainer.setup_model()
    trainer.model.add_module("probe", torch.nn.AdaptiveMaxPool2d(2))  # no deterministic CUDA backward
    trainer.set_model_attributes()  # where Ultralytics prepares the model, before compile, DDP, optimizer, EMA
    assert trainer.yolo_det.extra["model"] is trainer.model
    assert [r["module"] for r in trainer.yolo_det.replacements] == ["probe"]


# -- the train loader --------------------------------------------------------------------------

def first_epoch(trainer):
    loader = trainer.get_dataloader(trainer.data["train"], batch_size=4, rank=-1, mode="train")
    torch.manual_seed(12345)  # anything reseeding torch after the build must not matter
    try:
        assert loader.num_workers >= 1 and loader.worker_init_fn is yolo_det.seed_worker
        return [(tuple(b["im_file"]), b["img"].clone()) for b in loader]
    finally:
        getattr(loader, "close", lambda: None)()


def test_train_loader_order_and_worker_augmentation_follow_the_users_seed(dataset, tmp_path, restore_environ):
    trainer = make_trainer(dataset, tmp_path, deterministic="off")
    trainer.setup_model()  # the dataset takes its stride from the model
    trainer.args.workers = 2  # Ultralytics forces 0 workers on CPU; real servers use several
    torch.manual_seed(1)
    a = first_epoch(trainer)
    torch.manual_seed(2)
    b = first_epoch(trainer)
    trainer.args.seed = 1
    c = first_epoch(trainer)
    assert [files for files, _ in a] == [files for files, _ in b]
    assert all(torch.equal(x, y) for (_, x), (_, y) in zip(a, b))
    assert [files for files, _ in a] != [files for files, _ in c]


# -- backward context --------------------------------------------------------------------------

def test_backward_scaler_runs_backward_in_the_session_context():
    session = yolo_det.configure("strict", backward="warn")
    scaler = integ.BackwardScaler(torch.amp.GradScaler("cpu", enabled=False), session)
    x = torch.ones(3, requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(determinism.snapshot().warn_only))
    scaler.scale((x * 2).sum()).backward()
    assert seen == [True] and not determinism.snapshot().warn_only
    assert scaler.state_dict() == torch.amp.GradScaler("cpu", enabled=False).state_dict()
    assert session.backward_passes == 1


def add_alert_in_backward(model: YOLO, record: list) -> None:
    """On train start, make one parameter's gradient raise a genuine nondeterminism alert in backward."""

    def hook(grad):
        record.append(determinism.snapshot().to_dict())
        torch._prims_common.alert_not_deterministic(ALERT_OP)

    def on_train_start(trainer):
        record.append({"env": os.environ.get(integ.ENV_INPUTS)})
        next(p for p in trainer.model.parameters() if p.requires_grad).register_hook(hook)

    model.add_callback("on_train_start", on_train_start)


@pytest.mark.slow
def test_warn_training_reports_every_alert_and_restores_the_caller(dataset, tmp_path):
    yolo_det.set_determinism("off")
    before = determinism.snapshot()
    model, record = YOLO("yolov8n.yaml"), []
    add_alert_in_backward(model, record)
    model.train(trainer=DeterministicTrainer, deterministic="warn", **train_args(dataset, tmp_path, "warn"))
    report = json.loads((tmp_path / "warn" / "determinism.json").read_text())
    assert report["mode"] == "warn" and report["mode_source"] == "cli" and report["steps"] >= 1
    assert report["violations"]["ops"] == [{"op": ALERT_OP, "count": 2, "first_step": 1, "action": "warned"}]
    assert report["ultralytics"]["status"] == "completed"
    assert json.loads(record[0]["env"])["explicit"] == {"deterministic": "warn"}  # what DDP ranks would read
    assert all(r["warn_only"] for r in record[1:]) and len(record) == 3
    assert determinism.snapshot() == before and runtime.current() is None


def test_strict_backward_stops_on_the_op_writes_the_report_and_restores_on_error(dataset, tmp_path):
    """Global warn with deterministic_backward=strict: only the backward context can make this raise."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    before = determinism.snapshot()
    model, record = YOLO("yolov8n.yaml"), []  # YOLO() itself sets CUBLAS_WORKSPACE_CONFIG=:4096:8
    add_alert_in_backward(model, record)
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
    try:
        with pytest.raises(yolo_det.NondeterministicOpError, match=ALERT_OP):
            model.train(trainer=DeterministicTrainer, deterministic="warn", deterministic_backward="strict",
                        **train_args(dataset, tmp_path, "fail"))
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"  # Ultralytics pops it when training ends
    finally:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    assert strict_flags(record[1]) == STRICT
    assert determinism.snapshot() == before and runtime.current() is None
    report = json.loads((tmp_path / "fail" / "determinism.json").read_text())
    assert report["violations"]["ops"][0]["op"] == ALERT_OP
    assert report["violations"]["ops"][0]["action"] == "raised"
    assert report["ultralytics"]["status"].startswith("failed: NondeterministicOpError")


# -- two strict trainings: CLI, and a DDP rank re-created from the trainer's import path ------------

RANK_SCRIPT = '''
import json, os, sys
import torch
from yolo_det.core import determinism
from {module} import {name}  # how Ultralytics' generated DDP file re-creates the trainer

torch.use_deterministic_algorithms(True, warn_only=True)
torch.backends.cudnn.benchmark = True
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
os.environ["PYTHONHASHSEED"] = "7"
before = determinism.snapshot().to_dict()
record = {{"batch": [], "backward": []}}

def in_backward(grad):
    if not record["backward"]:
        record["backward"].append(determinism.snapshot().to_dict())

def on_train_start(trainer):
    next(p for p in trainer.model.parameters() if p.requires_grad).register_hook(in_backward)

trainer = {name}(overrides=json.loads(sys.argv[1]))
trainer.add_callback("on_train_start", on_train_start)
trainer.add_callback("on_train_batch_end", lambda t: record["batch"].append(determinism.snapshot().to_dict()))
trainer.train()
record.update(before=before, after=determinism.snapshot().to_dict(),
              env=[os.environ.get("CUBLAS_WORKSPACE_CONFIG"), os.environ.get("PYTHONHASHSEED")])
print("RECORD " + json.dumps(record))
'''


def assert_same_training(a: Path, b: Path, fp_a: Path, fp_b: Path) -> None:
    from yolo_det.proof.compare import compare_logs

    result = compare_logs(fp_a, fp_b)
    assert result.identical, result.first_divergence
    assert result.steps >= 1
    weights = [torch.load(run / "weights" / "last.pt", weights_only=False, map_location="cpu")["model"].state_dict()
               for run in (a, b)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


@pytest.mark.slow
def test_two_strict_trainings_cli_and_ddp_rank_are_bit_identical(dataset, train_env, tmp_path):
    args = train_args(dataset, tmp_path, "cli")
    pairs = [f"{k}={v}" for k, v in args.items()] + ["model=yolov8n.yaml", "deterministic=strict"]
    cli = run([PYTHON, "-m", "yolo_det", "ultralytics", "train", *pairs], cwd=tmp_path,
              env={**train_env, "YOLO_DET_FINGERPRINT": str(tmp_path / "cli.jsonl")})
    assert cli.returncode == 0, cli.stdout[-3000:] + cli.stderr[-3000:]

    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT.format(module=DeterministicTrainer.__module__, name=DeterministicTrainer.__name__))
    # A rank sees the parent's args (deterministic=True stands for strict and warn alike) and the parent's
    # exported inputs; only the latter can tell it the user asked for strict.
    rank_args = {**train_args(dataset, tmp_path, "rank"), "model": "yolov8n.yaml", "deterministic": True}
    rank_env = {**train_env, "YOLO_DET_FINGERPRINT": str(tmp_path / "rank.jsonl"),
                integ.ENV_INPUTS: ModeInputs({"deterministic": "strict"}).to_json()}
    rank = run([PYTHON, script, json.dumps(rank_args)], cwd=tmp_path, env=rank_env)
    assert rank.returncode == 0, rank.stdout[-3000:] + rank.stderr[-3000:]
    record = json.loads(next(line for line in rank.stdout.splitlines() if line.startswith("RECORD "))[7:])

    assert len(record["batch"]) == 2 and all(strict_flags(s) == STRICT for s in record["batch"])
    assert strict_flags(record["backward"][0]) == STRICT
    assert record["after"] == record["before"] and record["env"] == [":16:8", "7"]

    reports = {name: json.loads((tmp_path / name / "determinism.json").read_text()) for name in ("cli", "rank")}
    assert (reports["cli"]["mode"], reports["cli"]["mode_source"]) == ("strict", "cli")
    assert (reports["rank"]["mode"], reports["rank"]["mode_source"]) == ("strict", "cli")
    for report in reports.values():
        assert report["flags_applied"]["warn_only"] is False and report["steps"] >= 1
        assert report["ultralytics"]["status"] == "completed"
        assert report["ultralytics"]["trainer"] == "yolo_det.integrations.ultralytics.DeterministicTrainer"
    assert_same_training(tmp_path / "cli", tmp_path / "rank", tmp_path / "cli.jsonl", tmp_path / "rank.jsonl")


class SegmentTrainer(DeterminismMixin, SegmentationTrainer):
    """What the docs tell users of other tasks to write."""


@pytest.mark.slow
def test_segmentation_through_the_mixin_trains_bit_identically(tmp_path, monkeypatch, restore_environ):
    data = make_dataset(tmp_path / "seg", n_train=8, n_val=4, imgsz=128, segments=True)
    for name in ("a", "b"):
        monkeypatch.setenv("YOLO_DET_FINGERPRINT", str(tmp_path / f"{name}.jsonl"))
        args = {**train_args(data, tmp_path, name), "model": "yolov8n-seg.yaml", "deterministic": "strict"}
        SegmentTrainer(overrides=args).train()
        report = json.loads((tmp_path / name / "determinism.json").read_text())
        assert (report["mode"], report["mode_source"]) == ("strict", "cli")
        assert report["flags_applied"]["warn_only"] is False and report["steps"] >= 1
        assert report["ultralytics"]["status"] == "completed"
        assert report["ultralytics"]["trainer"].endswith("SegmentTrainer")
    assert runtime.current() is None
    assert_same_training(tmp_path / "a", tmp_path / "b", tmp_path / "a.jsonl", tmp_path / "b.jsonl")


def test_supported_versions_are_explicit():
    assert integ.version_warning("8.4.190") is None and integ.version_warning("8.0.238") is None
    assert "ultralytics>=8.0.238,<8.5" in integ.version_warning("8.0.237")
    assert integ.version_warning("8.5.0") is not None
    setup_cfg = (Path(__file__).resolve().parents[3] / "setup.cfg").read_text()
    assert f"ultralytics{integ.SUPPORTED}" in setup_cfg


# -- CLI usage ---------------------------------------------------------------------------------

def test_cli_usage_errors_exit_2(capsys):
    assert cli_main(["ultralytics", "train"]) == 2
    assert cli_main(["ultralytics", "train", "model=yolov8n.yaml", "epochs"]) == 2
    assert cli_main(["ultralytics", "train", "model=yolov8n.yaml", "data=d.yaml", "deterministic=sometimes"]) == 2
    err = capsys.readouterr().err
    assert "model= is required" in err and "'epochs' is not KEY=VALUE" in err
    assert "deterministic= 'sometimes' is not one of strict, warn, off" in err
