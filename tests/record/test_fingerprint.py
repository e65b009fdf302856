"""The fingerprint recorder in-process: what each step's line holds and when it is taken, the
runtime hook (``YOLO_DET_FINGERPRINT`` + ``configure``/``finish``), and the log reader's errors."""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import yolo_det
from yolo_det.record import fingerprint
from yolo_det.cli import main as cli_main
from yolo_det.proof.compare import compare_logs
from yolo_det.record.digest import ALGORITHM, Digester
from yolo_det.record.log import FingerprintError, read_log


class ModelEMA:
    """YOLOv5-style EMA: ``.ema`` module, ``update(model)`` after ``optimizer.step()``."""

    def __init__(self, model: nn.Module, decay: float = 0.5) -> None:
        self.ema = copy.deepcopy(model).eval()
        self.decay = decay

    def update(self, model: nn.Module) -> None:
        with torch.no_grad():
            for k, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v.mul_(self.decay).add_(model.state_dict()[k], alpha=1 - self.decay)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))


def train(path: Path, *, steps: int = 4, accumulate: int = 1, perturb_step: int = 0, track: bool = True,
          validate: bool = False, session=None, observe=None) -> Path:
    """A small in-process training loop fingerprinted into ``path`` (returns the log path)."""
    random.seed(0)
    np.random.seed(0)
    model = _model()
    ema = ModelEMA(model)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(16, 3, 8, 8, generator=g), torch.randint(0, 2, (16,), generator=g))
    loader = DataLoader(data, batch_size=2, shuffle=False)
    val = DataLoader(TensorDataset(torch.randn(4, 3, 8, 8, generator=g)), batch_size=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    calls = []

    def flip_inside_step(opt, args, kwargs):  # per-optimizer hooks run before the recorder's global hook
        calls.append(1)
        if len(calls) == perturb_step:
            with torch.no_grad():
                model[4].bias.view(torch.int32)[0] ^= 1

    optimizer.register_step_post_hook(flip_inside_step)
    if session is not None:
        session.track(model, ema) if track else None
        recorder = fingerprint.active()
    else:
        recorder = fingerprint.start(path, model=model if track else None, ema=ema if track else None, rank=-1)
    for i, (x, y) in enumerate(loader):
        if i == steps * accumulate:
            break
        loss = nn.functional.cross_entropy(model(x), y)
        with yolo_det.backward_context(loss=torch.stack([loss.detach(), loss.detach() * 2])):
            loss.backward()
        if (i + 1) % accumulate:
            continue
        optimizer.step()
        step = (i + 1) // accumulate
        optimizer.zero_grad()
        ema.update(model)
        if observe is not None:
            observe(step, model, ema)
        if validate:
            for (v,) in val:
                ema.ema(v)
    if session is not None:
        session.finish(echo=lambda _: None)
        return recorder.path
    return fingerprint.stop() or path


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Two identical runs, one with a parameter bit flipped inside optimizer step 3, one shorter."""
    root = tmp_path_factory.mktemp("fp")
    return {
        "a": train(root / "a.jsonl"),
        "b": train(root / "b.jsonl"),
        "perturbed": train(root / "p.jsonl", perturb_step=3),
        "short": train(root / "s.jsonl", steps=3),
    }


def test_step_lines_hold_every_kind_with_exact_digests(tmp_path):
    digester = Digester()
    seen = {}

    def observe(step, model, ema):
        seen[step] = [dict(zip(m.state_dict(), digester.hex(list(m.state_dict().values())))) for m in (model, ema.ema)]

    log = read_log(train(tmp_path / "fp.jsonl", observe=observe))
    assert [s.step for s in log.steps] == [1, 2, 3, 4] and log.complete and log.final.closed_by == "finish"
    first = log.steps[0]
    assert first.names["data"] == ["batch0[0]", "batch0[1]"]
    assert first.names["loss"] == ["backward0", "items0"]
    assert first.names["grad"] == ["0.weight", "0.bias", "1.weight", "1.bias", "4.weight", "4.bias"]
    assert first.names["param"][:6] == first.names["grad"] and "1.running_mean" in first.names["param"]
    assert set(first.names["rng"]) >= {"python", "numpy", "torch"}
    assert first.lr == {"group0.lr": 0.1, "group0.momentum": 0.9}
    for step in log.steps:  # params after the step, and the EMA after its update (taken one step later)
        params, ema = seen[step.step]
        assert step.entries("param") == params
        assert step.entries("ema") == ema
        assert math.isfinite(step.loss) and step.items[0][1] == pytest.approx(2 * step.losses[0])
    final = log.final.entries()
    assert final == {**{f"model.{k}": v for k, v in seen[4][0].items()}, **{f"ema.{k}": v for k, v in seen[4][1].items()}}
    assert log.final.names[0] == "model.0.weight" and "ema.1.running_var" in log.final.names
    assert "names" not in json.loads(Path(log.path).read_text().splitlines()[2])  # names only when they change


def test_validation_batches_are_not_counted_and_accumulation_is(tmp_path):
    log = read_log(train(tmp_path / "fp.jsonl", steps=3, accumulate=2, validate=True))
    for step in log.steps:
        assert step.names["data"] == ["batch0[0]", "batch0[1]", "batch1[0]", "batch1[1]"]
        assert step.names["loss"] == ["backward0", "backward1", "items0", "items1"]
        assert len(step.losses) == 2


def test_without_a_tracked_model_the_optimizer_params_are_named_by_position(tmp_path):
    log = read_log(train(tmp_path / "fp.jsonl", steps=2, track=False))
    assert log.steps[0].names["param"] == [f"group0.{i}" for i in range(6)]
    assert "ema" not in log.steps[0].digests and log.final.names == []


def test_identical_runs_compare_identical_and_a_flipped_bit_is_named(logs):
    same = compare_logs(logs["a"], logs["b"])
    assert same.identical and same.steps == 4 and same.first_divergence is None
    assert same.tensors == sum(s.count() for s in read_log(logs["a"]).steps) + len(read_log(logs["a"]).final.names)
    diff = compare_logs(logs["a"], logs["perturbed"])
    assert not diff.identical
    assert (diff.first_divergence.step, diff.first_divergence.kind, diff.first_divergence.tensor) == (3, "param", "4.bias")
    assert diff.differing[:2] == [0, 0] and diff.differing[2] >= 1
    assert diff.to_json()["first_divergence"] == {"step": 3, "kind": "param", "tensor": "4.bias"}


def test_session_starts_from_env_and_finish_closes_the_log(tmp_path, monkeypatch):
    path = tmp_path / "env.jsonl"
    monkeypatch.setenv("YOLO_DET_FINGERPRINT", str(path))
    session = yolo_det.configure("warn", seed=0)
    assert fingerprint.active() is not None and fingerprint.active().session is session
    train(path, steps=2, session=session)
    assert fingerprint.active() is None
    log = read_log(path)
    assert len(log.steps) == 2 and log.complete and log.header["mode"] == "warn" and log.header["seed"] == 0
    assert log.steps[0].names["param"][0] == "0.weight"  # the model from session.track()


def test_stop_removes_every_hook(tmp_path):
    from torch.utils.data import dataloader

    next_before, backward_before = dataloader._BaseDataLoaderIter.__next__, torch.autograd.backward
    recorder = fingerprint.start(tmp_path / "x.jsonl", rank=-1)
    assert torch.autograd.backward is not backward_before
    fingerprint.stop()
    assert recorder.closed
    assert dataloader._BaseDataLoaderIter.__next__ is next_before and torch.autograd.backward is backward_before
    model = _model()
    torch.optim.SGD(model.parameters(), lr=0.1).step()  # no hook left to write anything
    assert len(read_log(tmp_path / "x.jsonl").steps) == 0


def test_exit_closes_an_unfinished_log(tmp_path):
    model = _model()
    fingerprint.start(tmp_path / "x.jsonl", model=model, rank=-1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(1, 3, 8, 8)).sum().backward()
    optimizer.step()
    fingerprint._close_at_exit()
    log = read_log(tmp_path / "x.jsonl")
    assert len(log.steps) == 1 and log.final.closed_by == "exit"


# -- reading bad logs, and `yolo-det diff` on them ---------------------------------------------------
def _diff(capsys, a, b, *extra):
    code = cli_main(["diff", str(a), str(b), *extra])
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    return code, out


def _variant(src: Path, dest: Path, edit) -> Path:
    lines = src.read_text().splitlines(keepends=True)
    dest.write_text("".join(edit(lines)))
    return dest


@pytest.mark.parametrize("name, edit, message", [
    ("corrupt", lambda ls: ls[:2] + ["{not json\n"] + ls[3:], "is corrupt: line 3"),
    ("out-of-order", lambda ls: [ls[0], ls[2], ls[1]] + ls[3:], "expected 1"),
    ("digests", lambda ls: ls[:2] + [ls[2].replace('"digests":{"data":"', '"digests":{"data":"00')] + ls[3:],
     "do not match"),
    ("schema", lambda ls: [ls[0].replace('"schema":1', '"schema":2')] + ls[1:], "schema 2"),
    ("algorithm", lambda ls: [ls[0].replace(ALGORITHM, "other-v9")] + ls[1:], "digest algorithm"),
    ("not-a-log", lambda ls: ['{"hello": 1}\n'], "not a yolo-det fingerprint log"),
    ("empty", lambda ls: [], "is empty"),
])
def test_bad_logs_give_a_clear_error_and_exit_2(logs, tmp_path, capsys, name, edit, message):
    bad = _variant(logs["a"], tmp_path / f"{name}.jsonl", edit)
    with pytest.raises(FingerprintError, match=message):
        read_log(bad)
    code, out = _diff(capsys, logs["a"], bad)
    assert code == 2 and message in out.err and str(bad) in out.err


def test_a_cut_last_line_is_said_and_the_rest_used(logs, tmp_path, capsys):
    """A kill cuts only the line being written: the reader says so and keeps the complete steps."""
    whole = read_log(logs["a"])
    cut = _variant(logs["a"], tmp_path / "cut.jsonl", lambda ls: ls[:-1] + [ls[-1][: len(ls[-1]) // 2]])
    log = read_log(cut)
    assert "is truncated" in log.truncated and str(cut) in log.truncated
    assert [s.digests for s in log.steps] == [s.digests for s in whole.steps] and log.final is None
    code, out = _diff(capsys, logs["a"], cut)
    assert code == 2 and "is truncated" in out.err and str(cut) in out.err


def _as_v1(src: Path, dest: Path) -> Path:
    """``src`` as a log of the previous digest algorithm says it is (its digests are not recomputed)."""
    return _variant(src, dest, lambda ls: [ls[0].replace(f'"digest":"{ALGORITHM}"', '"digest":"bytes-intmm-v1"')]
                    + ls[1:])


def test_logs_of_the_previous_digest_algorithm_read_and_compare_only_with_each_other(logs, tmp_path, capsys):
    v1a, v1b, v1p = (_as_v1(logs[k], tmp_path / f"v1-{k}.jsonl") for k in ("a", "b", "perturbed"))
    assert read_log(v1a).header["digest"] == "bytes-intmm-v1"
    assert _diff(capsys, v1a, v1b)[0] == 0  # two old logs: compared as before
    code, out = _diff(capsys, v1a, v1p, "--json")
    assert code == 1 and json.loads(out.out)["first_divergence"]["step"] == 3
    for a, b in ((logs["a"], v1b), (v1p, logs["a"])):  # old against new: refused, never "diverged"
        code, out = _diff(capsys, a, b)
        assert code == 2 and "bytes-intmm-v1" in out.err and ALGORITHM in out.err and str(a) in out.err
        assert "diverge" not in (out.out + out.err).lower()
        with pytest.raises(FingerprintError, match="different|cannot be compared"):
            compare_logs(a, b)
    from yolo_det.record.splice import join_logs
    with pytest.raises(FingerprintError, match="bytes-intmm-v1"):
        join_logs(logs["a"], v1b)


def test_missing_log(tmp_path, capsys):
    code, out = _diff(capsys, tmp_path / "nope.jsonl", tmp_path / "nope.jsonl")
    assert code == 2 and f"A ({tmp_path / 'nope.jsonl'}): no such file or folder" in out.err


def test_different_lengths_exit_2_unless_they_diverge_first(logs, capsys, tmp_path):
    code, out = _diff(capsys, logs["a"], logs["short"])
    assert code == 2 and "different lengths" in out.err and "first 3 steps are identical" in out.err
    code, out = _diff(capsys, logs["perturbed"], logs["short"], "--json")
    assert code == 1 and json.loads(out.out)["first_divergence"] == {"step": 3, "kind": "param", "tensor": "4.bias"}
    unfinished = _variant(logs["b"], tmp_path / "unfinished.jsonl", lambda ls: ls[:-1])
    code, out = _diff(capsys, logs["a"], unfinished)
    assert code == 2 and "did not finish" in out.err


def test_diff_text_json_and_plot(logs, capsys, tmp_path):
    code, out = _diff(capsys, logs["a"], logs["b"])
    assert code == 0 and out.out.startswith("identical: 4 steps, ")
    code, out = _diff(capsys, logs["a"], logs["perturbed"], "--plot", str(tmp_path / "p.png"))
    assert code == 1
    assert "diverged at step 3: kind param, tensor 4.bias" in out.out and "losses around step 3" in out.out
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out = _diff(capsys, logs["a"], logs["perturbed"], "--json")
    data = json.loads(out.out)
    assert code == 1 and data["identical"] is False and data["steps"] == 4 and data["differing_per_step"][:2] == [0, 0]


def test_dict_batches_are_split_into_named_tensors_and_plain_parts(tmp_path):
    class Images(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return {"img": torch.full((3, 4, 4), i, dtype=torch.uint8), "cls": torch.tensor([i % 2]),
                    "im_file": f"img{i}.jpg", "ori_shape": (4, 4)}

    def collate(items):
        return {"img": torch.stack([b["img"] for b in items]), "cls": torch.cat([b["cls"] for b in items]),
                "im_file": tuple(b["im_file"] for b in items), "ori_shape": tuple(b["ori_shape"] for b in items)}

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with fingerprint.fingerprinting(tmp_path / "d.jsonl", model=model, rank=-1):
        for batch in DataLoader(Images(), batch_size=2, collate_fn=collate):
            model(torch.randn(1, 3, 8, 8)).sum().backward()
            optimizer.step()
    log = read_log(tmp_path / "d.jsonl")
    assert log.steps[0].names["data"] == ["batch0.img", "batch0.cls", "batch0.im_file", "batch0.ori_shape"]
    assert log.steps[0].entries("data")["batch0.im_file"] != log.steps[1].entries("data")["batch0.im_file"]
    assert log.steps[0].entries("data")["batch0.ori_shape"] == log.steps[1].entries("data")["batch0.ori_shape"]


def test_an_unwritable_log_path_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("YOLO_DET_FINGERPRINT", "/proc/yolo-det/fp.jsonl")
    with pytest.raises(FingerprintError, match="cannot write the fingerprint log"):
        yolo_det.configure("warn")


KILL_SCRIPT = '''
import copy, os, random, signal, sys
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from yolo_det.proof import fingerprint

random.seed(0)
np.random.seed(0)
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
ema = copy.deepcopy(model).eval()
g = torch.Generator().manual_seed(1)
loader = DataLoader(TensorDataset(torch.randn(12, 3, 8, 8, generator=g), torch.randint(0, 2, (12,), generator=g)),
                    batch_size=2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
fingerprint.start(sys.argv[1], model=model, ema=ema, rank=-1)
kill_in_step = int(sys.argv[2])
for step, (x, y) in enumerate(loader, 1):
    loss = nn.functional.cross_entropy(model(x), y)
    if step == kill_in_step:  # mid-step: the batch is loaded and the forward ran
        os.kill(os.getpid(), signal.SIGKILL)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    with torch.no_grad():  # the EMA updates after optimizer.step(), as in YOLOv5 and Ultralytics
        for e, p in zip(ema.state_dict().values(), model.state_dict().values()):
            if e.dtype.is_floating_point:
                e.mul_(0.5).add_(p, alpha=0.5)
fingerprint.stop()
'''


@pytest.mark.slow
def test_a_killed_run_keeps_every_completed_step(tmp_path):
    """docs/verify.md: each step's line is written and flushed when the step completes (EMA included)."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "loop.py"
    script.write_text(KILL_SCRIPT)
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    killed = subprocess.run([sys.executable, str(script), str(tmp_path / "killed.jsonl"), "4"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    whole = subprocess.run([sys.executable, str(script), str(tmp_path / "whole.jsonl"), "0"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert whole.returncode == 0, whole.stderr[-2000:]
    cut, full = read_log(tmp_path / "killed.jsonl"), read_log(tmp_path / "whole.jsonl")
    assert [s.step for s in cut.steps] == [1, 2, 3] and not cut.complete  # step 4 was running
    assert [s.step for s in full.steps] == [1, 2, 3, 4, 5, 6] and full.complete
    for a, b in zip(cut.steps, full.steps):  # the lines written early hold the same tensors as in a full run
        for kind in ("data", "loss", "grad", "param", "ema", "rng", "lr"):
            assert a.entries(kind) == b.entries(kind), (a.step, kind)
        assert a.entries("ema")  # the step's EMA update is in its own line
