"""Ultralytics yolov8n through yolo-det's trainer (CPU, 128 px; the resumed runs 64 px): batches and weights do
not depend on the number of workers (Mosaic partners no longer come from each worker's image buffer), and a run
stopped after epoch 1 and resumed with resume=True is bit-identical to an uninterrupted one; with
the sidecar deleted (or of another epoch than last.pt) a strict resume is refused, exit 2 and nothing
written, by `yolo-det run -- yolo train resume` and the DeterministicTrainer API alike, and warn
diverges and says why.

The two resume verifies are independent: the module's ``resumed`` fixture runs the strict one (a resume between
optimizer steps) in a thread alongside the warn one (every run its own process; docs/testing.md, "Tests that
train")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("ultralytics")

from yolo_det.proof.compare import compare_logs  # noqa: E402
from yolo_det.proof.resume_at import verify_resume  # noqa: E402
from yolo_det.integrations.resume import ResumeStateError  # noqa: E402
from yolo_det.ultralytics import DeterministicTrainer  # noqa: E402

from support.verify import Background, outcome, reraise, script_env  # noqa: E402

pytestmark = pytest.mark.slow  # trains real models or starts DDP processes


def _args(dataset, project, name, epochs=1):
    # nbs=8 with batch=8: an optimizer step every batch, so every epoch ends on a step (see docs: accumulation)
    return dict(model="yolov8n.yaml", data=str(dataset), epochs=epochs, imgsz=128, batch=8, nbs=8, workers=2,
                plots=False, val=True, amp=False, device="cpu", project=str(project), name=name, exist_ok=True,
                seed=0, deterministic="warn")


def _epochs(trainer, workers, epochs=2):
    loader = trainer.get_dataloader(trainer.data["train"], batch_size=4, rank=-1, mode="train")
    try:
        assert loader.num_workers == workers
        return [[(tuple(b["im_file"]), b["img"].clone()) for b in loader] for _ in range(epochs)]
    finally:
        loader.close()


def _same(a, b):
    return all(fa == fb and torch.equal(xa, xb) for ea, eb in zip(a, b) for (fa, xa), (fb, xb) in zip(ea, eb))


def test_batches_and_weights_do_not_depend_on_workers(dataset, tmp_path, restore_environ, monkeypatch):
    trainer = DeterministicTrainer(overrides=_args(dataset, tmp_path, "loader"))
    trainer.setup_model()
    batches = {}
    for workers in (0, 2):
        trainer.args.workers = workers  # Ultralytics sets 0 on CPU; servers use several
        batches[workers] = _epochs(trainer, workers)
    assert _same(batches[0], batches[2])  # two epochs, persistent workers, mosaic on
    assert not _same([batches[0][0]], [batches[0][1]])  # each epoch its own order and augmentation

    logs = {}
    monkeypatch.setenv("YOLO_DET_KEEP_RESUME", "1")  # the completed runs' full sidecars (model too) are compared
    for workers in (0, 2):
        logs[workers] = tmp_path / f"w{workers}.jsonl"
        monkeypatch.setenv("YOLO_DET_FINGERPRINT", str(logs[workers]))
        trainer = DeterministicTrainer(overrides=_args(dataset, tmp_path, f"w{workers}"))
        trainer.args.workers = workers
        trainer.train()
        assert trainer.train_loader.num_workers == workers
    comparison = compare_logs(logs[0], logs[2])
    assert comparison.identical and comparison.steps == 2, "\n".join(comparison.describe())
    a, b = (torch.load(tmp_path / f"w{w}" / "weights" / "last.pt.yolo-det", weights_only=True) for w in (0, 2))
    assert all(torch.equal(a["ema"][k], b["ema"][k]) for k in a["ema"]) and a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


YOLO = str(Path(sys.executable).parent / "yolo")
LOST = "although this run saves resume state with every checkpoint"


def _files(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _strict_yolo_resume(checkpoint: Path, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """The issue-36 command: `yolo-det run --deterministic strict -- yolo train resume model=.../last.pt`."""
    cmd = [sys.executable, "-m", "yolo_det", "run", "--deterministic", "strict", "--", YOLO, "train", "resume",
           f"model={checkpoint}"]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _strict_resumes_are_refused(checkpoint: Path, env: dict, cwd: Path) -> None:
    """A run stopped after epoch 1 (warn): with last.pt one epoch ahead of its sidecar (killed between the
    two), then with the sidecar gone (killed after the first last.pt, before its sidecar), strict refuses:
    exit 2, a true reason, what to do, and the run folder as it was (no epoch trained, nothing written)."""
    run_dir = checkpoint.parents[1]
    before = _files(run_dir)
    # last.pt of epoch 2 beside the sidecar of epoch 1: checked once the trainer has loaded the checkpoint
    original = checkpoint.read_bytes()
    ckpt = torch.load(checkpoint, map_location="cpu", weights_only=False)
    ckpt["epoch"] += 1
    ckpt["train_args"]["epochs"] = 3  # a run of 3 epochs, stopped after its second
    torch.save(ckpt, checkpoint)
    proc = _strict_yolo_resume(checkpoint, env, cwd)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert ("yolo-det: error: strict mode cannot resume exactly: last.pt.yolo-det does not match last.pt: the resume "
            "state was saved after epoch 1, the checkpoint resumes after epoch 2") in proc.stderr
    assert "Nothing was trained" in proc.stderr and "deterministic=warn" in proc.stderr
    assert "resumed exactly" not in proc.stdout + proc.stderr
    checkpoint.write_bytes(original)
    after = _files(run_dir)
    after.pop(Path("args.yaml"))  # Ultralytics' own trainer writes it while it is built, before the check
    assert after == {k: v for k, v in before.items() if k != Path("args.yaml")}

    checkpoint.with_name(checkpoint.name + ".yolo-det").unlink()
    before = _files(run_dir)
    proc = _strict_yolo_resume(checkpoint, env, cwd)
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr
    assert f"yolo-det: error: strict mode cannot resume exactly: last.pt.yolo-det is missing beside {checkpoint}" in err
    assert LOST in err and "determinism.json says it trained under yolo-det, determinism warn" in err
    assert "started before yolo-det" not in err and "Nothing was trained" in err
    assert "deterministic=warn" in err and "YOLO_DET_RESUME=inexact" in err
    assert _files(run_dir) == before  # refused before Ultralytics built its trainer: args.yaml too
    with pytest.raises(ResumeStateError, match="last.pt.yolo-det is missing beside") as refused:
        DeterministicTrainer(overrides={"model": str(checkpoint), "resume": str(checkpoint), "deterministic": "strict"})
    assert LOST in str(refused.value)
    assert _files(run_dir) == before


def _between_steps(dataset, train_env, root: Path):
    """The strict verify of a run stopped between optimizer steps: (its result, the sidecar it was stopped with)."""
    saved = []

    def read_sidecar(checkpoint: Path) -> None:
        saved.append(torch.load(str(checkpoint) + ".yolo-det", weights_only=True))

    args = {**_args(dataset, root / "runs", "a{run}", epochs=2), "batch": 4, "nbs": 12, "warmup_epochs": 0,
            "imgsz": 64, "deterministic": "strict"}
    cmd = [sys.executable, "-m", "yolo_det", "ultralytics", "train", *[f"{k}={v}" for k, v in args.items()]]
    result = verify_resume(cmd, 1, runs=2, workdir=root / "w", cwd=root, env=script_env(train_env),
                           before_resume=read_sidecar)
    return result, saved


@pytest.fixture(scope="module")
def resumed(dataset, train_env, tmp_path_factory) -> dict:
    """Both verifies (the between-steps one in a thread): each entry its result or the exception it raised."""
    root = tmp_path_factory.mktemp("resume-u")
    (root / "between").mkdir()
    background = Background(lambda: outcome(lambda: _between_steps(dataset, train_env, root / "between")))
    refused = []
    at_1 = root / "at1"
    at_1.mkdir()

    def delete_sidecar_of_run_3(checkpoint: Path) -> None:
        if checkpoint.parts[-3] == "u3":
            _strict_resumes_are_refused(checkpoint, script_env(train_env), at_1)  # deletes the sidecar
            refused.append(checkpoint)

    # 64 px: resuming exactly does not depend on the image size
    pairs = [f"{k}={v}" for k, v in {**_args(dataset, at_1 / "runs", "u{run}", epochs=2), "imgsz": 64}.items()]
    cmd = [sys.executable, "-m", "yolo_det", "ultralytics", "train", *pairs]
    warn = outcome(lambda: verify_resume(cmd, 1, runs=3, workdir=at_1 / "w", cwd=at_1, env=script_env(train_env),
                                         before_resume=delete_sidecar_of_run_3))
    return {"at_1": warn, "refused": refused, "between": background.result()}


def test_resume_at_1_is_identical_and_without_the_sidecar_diverges(resumed):
    result = reraise(resumed["at_1"])
    exact, control = result.resumed
    assert exact.comparison.identical, "\n".join(exact.comparison.describe())
    assert exact.first.steps == 2 and exact.second.steps == 2 and exact.checkpoints is None and exact.results is None
    assert "yolo-det: resumed exactly after epoch 1" in exact.second.output.read_text()

    assert resumed["refused"] and not control.comparison.identical and control.checkpoints
    output = control.second.output.read_text()  # warn: resumed, with a true warning
    assert "yolo-det: resume not exact: last.pt.yolo-det is missing" in output and LOST in output
    assert "it resumes as Ultralytics does" in output and "resumed exactly" not in output


def test_resume_between_optimizer_steps_is_exact(resumed):
    """Gradient accumulation across the epoch boundary (Ultralytics' default nbs 64 does this for most
    datasets; here nbs 12, batch 4: a step every 3 of the 4 batches of an epoch, no warm-up ramp), so
    epoch 1 ends with a batch's gradients waiting. The sidecar holds them and the loop's last_opt_step;
    the resumed run steps at the same batches as the uninterrupted one (issue 23: strict refused)."""
    result, saved = reraise(resumed["between"])
    (resumed_run,) = result.resumed
    (state,) = saved
    assert state["pending_gradients"] is True  # the checkpoint fell between optimizer steps
    accumulation = state["accumulation"]
    assert accumulation["last_opt_step"] == 2 and accumulation["gradients"] is not None  # batches 0-2, then 3 waits
    assert resumed_run.comparison.identical, "\n".join(resumed_run.comparison.describe())
    assert resumed_run.checkpoints is None and resumed_run.results is None
    assert "yolo-det: resumed exactly after epoch 1" in resumed_run.second.output.read_text()
