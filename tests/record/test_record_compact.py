"""The compact default record in-process: its size per step, which lines stay full, that it compares with
full logs and with itself (first divergent step and kind), and that a kill leaves a readable log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from yolo_det.cli import main as cli_main
from yolo_det.proof.compare import compare_logs
from yolo_det.record import fingerprint
from yolo_det.record.log import COMPACT_KINDS, ROOT_NAME, read_log, root_digest

STEPS = 200  # the bytes of a step are measured on a log of >= 200 steps
VAL_EVERY = 80
SHORT = 24  # the runs that are compared


def train(path: Path, *, compact: bool, steps: int = STEPS, perturb_step: int = 0, seed: int = 0,
          val_every: int = VAL_EVERY) -> Path:
    """Tiny conv model, SGD, a validation loader pass every ``val_every`` steps; returns the log."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2 * 4 * 4, 2))
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(8, 3, 6, 6, generator=g), torch.randint(0, 2, (8,), generator=g))
    val = DataLoader(TensorDataset(torch.randn(2, 3, 6, 6, generator=g)), batch_size=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    fingerprint.start(path, model=model, rank=-1, compact=compact)
    step = 0
    while step < steps:
        for x, y in DataLoader(data, batch_size=2):
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step == perturb_step:
                with torch.no_grad():
                    model[3].bias.view(torch.int32)[0] ^= 1
            if step % val_every == 0:
                with torch.no_grad():
                    for (v,) in val:
                        model(v)
                fingerprint.record_validation(step // val_every, {"fitness": 0.0})
            if step == steps:
                break
    return fingerprint.stop() or path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("compact")
    short = dict(steps=SHORT, val_every=8)
    return {"long": train(root / "long.jsonl", compact=True),
            "compact": train(root / "c.jsonl", compact=True, **short),
            "again": train(root / "c2.jsonl", compact=True, **short),
            "full": train(root / "f.jsonl", compact=False, **short),
            "perturbed": train(root / "p.jsonl", compact=True, perturb_step=10, **short)}


def test_a_compact_step_costs_at_most_64_bytes_and_full_lines_stay_where_they_are_needed(runs):
    lines = runs["long"].read_bytes().splitlines(keepends=True)
    compact = [line for line in lines if line.startswith(b'{"r":')]
    full = [line for line in lines if line.startswith(b'{"step":')]
    assert len(compact) + len(full) == STEPS and max(map(len, compact)) <= 64
    log = read_log(runs["long"])
    assert log.header["record"] == "compact" and read_log(runs["full"]).header["record"] == "full"
    written_full = [s.step for s in log.steps if not s.compact]
    # step 1 (names), the step before each validation, the last step
    assert written_full == sorted({1, STEPS} | {VAL_EVERY * k for k in range(1, STEPS // VAL_EVERY + 1)})
    assert len(log.validations) == STEPS // VAL_EVERY and log.final is not None
    full_log, log = read_log(runs["full"]), read_log(runs["compact"])
    for kind in COMPACT_KINDS:  # a compact root is the root of the full line's per-tensor digests
        step = full_log.steps[4]
        if kind in step.digests:
            assert log.steps[4].digests[kind] == root_digest(step.digests[kind]) == step.root(kind)


def test_compact_logs_compare_with_each_other_and_with_a_full_log(runs, capsys):
    assert compare_logs(runs["compact"], runs["again"]).identical
    assert compare_logs(runs["compact"], runs["full"]).identical  # roots computed from the full lines
    result = compare_logs(runs["full"], runs["perturbed"])
    first = result.first_divergence
    assert not result.identical and (first.step, first.kind, first.tensor) == (10, "param", ROOT_NAME)
    assert cli_main(["diff", str(runs["compact"]), str(runs["perturbed"])]) == 1
    out = capsys.readouterr().out
    assert "diverged at step 10: kind param" in out and "locate" in out


_KILLED = """
import sys, torch
from torch import nn
from yolo_det.record import fingerprint
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
fingerprint.start(sys.argv[1], model=model, rank=-1, compact=True)
while True:
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def test_a_killed_run_leaves_a_readable_log(tmp_path):
    path = tmp_path / "killed.jsonl"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(path)], env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not path.exists() or path.stat().st_size < 20_000):
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    log = read_log(path)
    assert log.final is None and len(log.steps) > 100
    assert all(s.compact for s in log.steps[1:])


def test_the_fingerprint_setting_resolves_like_the_others():
    from yolo_det.core.mode import ConfigError, is_yolo_det_key, resolve

    assert resolve(hyp={"fingerprint": False}, env={}).fingerprint == "off"  # YAML's unquoted off
    assert resolve(env={"YOLO_DET_FINGERPRINT_MODE": "full"}).fingerprint == "full"
    assert resolve(cli={"fingerprint": "compact"}, env={"YOLO_DET_FINGERPRINT_MODE": "off"}).fingerprint == "compact"
    with pytest.raises(ConfigError, match="YOLO_DET_FINGERPRINT_MODE.*compact, full, off"):
        resolve(env={"YOLO_DET_FINGERPRINT_MODE": "tiny"})
    assert is_yolo_det_key("fingerprint")  # popped from a YOLOv5 hyp before --evolve formats it


def test_the_run_folders_own_log_follows_mode_and_setting(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from yolo_det.core.mode import resolve

    monkeypatch.delenv("YOLO_DET_FINGERPRINT", raising=False)

    def session(mode, choice=None):
        return SimpleNamespace(settings=resolve(cli={"deterministic": mode, "fingerprint": choice}, env={}),
                               rank=-1, extra={}, seed=None)

    assert fingerprint.start_for_run(session("strict", "off"), tmp_path) is None
    assert fingerprint.start_for_run(session("off"), tmp_path) is None
    assert not list(tmp_path.iterdir())
    for name, choice, record in (("fingerprint.jsonl", None, "compact"), ("fingerprint.resume1.jsonl", "full", "full")):
        one = session("warn", choice)
        recorder = fingerprint.start_for_run(one, tmp_path)  # a second start keeps the first log (a resume)
        assert recorder.path == tmp_path / name and one.extra["fingerprint_record"] == record
        fingerprint.stop()
        assert read_log(tmp_path / name).header["record"] == record


def test_each_epoch_end_is_written_in_full_also_without_a_validation(tmp_path):
    """Per-tensor records at each epoch end (``--noval`` / ``val=False``): the step the epoch ended on is full."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2)  # 4 steps per epoch
    fingerprint.start(tmp_path / "e.jsonl", model=model, rank=-1, compact=True)
    for _ in range(3):
        for (x,) in data:
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        fingerprint.epoch_end()
    log = read_log(fingerprint.stop())
    assert [s.step for s in log.steps if not s.compact] == [1, 4, 8, 12]
    assert all(log.steps[3].names.get(k) for k in ("grad", "param")) and not log.validations


def test_an_evaluations_log_waits_in_memory_for_its_run_folder(tmp_path, monkeypatch):
    """A standalone evaluation learns its save_dir late: nothing is written before, under off nothing at all."""
    from types import SimpleNamespace

    from yolo_det.core.mode import resolve

    monkeypatch.delenv("YOLO_DET_FINGERPRINT", raising=False)

    def session(mode, choice=None):
        return SimpleNamespace(settings=resolve(cli={"deterministic": mode, "fingerprint": choice}, env={}),
                               rank=-1, extra={}, seed=None)

    assert fingerprint.start_for_evaluation(session("warn", "off")) is None
    assert fingerprint.start_for_evaluation(session("off")) is None
    folder = tmp_path / "val" / "exp"
    for name in ("fingerprint.jsonl", "fingerprint.1.jsonl"):  # a second evaluation into the same folder
        one = session("strict")
        recorder = fingerprint.start_for_evaluation(one)
        assert recorder.path is None and not (folder / name).exists()
        fingerprint.record_predictions([torch.zeros(2, 6), torch.ones(1, 6)])
        assert fingerprint.place_in(one, folder) == folder / name == recorder.path
        fingerprint.record_validation(None, {"mAP50": 0.5}, settings={"conf_thres": 0.001})
        assert one.extra["fingerprint_log"] == str((folder / name).resolve())
        fingerprint.stop()
        log = read_log(folder / name)
        assert not log.steps and log.complete and log.validations[0].names == ["batch0.image0", "batch0.image1"]
        assert log.validations[0].settings == {"conf_thres": 0.001}
    unplaced = session("warn")
    fingerprint.start_for_evaluation(unplaced)
    assert fingerprint.place_in(unplaced, None) is None and fingerprint.stop() is None
    assert sorted(p.name for p in folder.iterdir()) == ["fingerprint.1.jsonl", "fingerprint.jsonl"]
