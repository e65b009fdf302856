"""The disk a run's resume state costs (issue 60, item 11): at rest one sidecar per distinct checkpoint and no
``.prev`` (a kill at any file operation of a save still leaves ``last.pt`` a sidecar of its digest, or an honest
"none matches"); a completed training keeps only the full-precision EMA unless ``$YOLO_DET_KEEP_RESUME=1``; yolo-det's
own files leave ``weights/`` while trackers' callbacks upload it; the sidecar's bytes per parameter by optimizer."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from yolo_det.integrations import resume
from yolo_det.integrations.resume import completion
from yolo_det.record import run_folder


def _state(epoch: int) -> dict:
    return {"format": resume.FORMAT, "version": resume.VERSION, "epoch": epoch, "checkpoint": "last.pt"}


class _Snapshots:
    """The weights folder's files (name -> bytes) before every file operation a save makes, and after the last:
    every instant a SIGKILL can leave on disk."""

    def __init__(self, folder: Path, monkeypatch) -> None:
        self.folder, self.states = folder, []
        for name in ("replace", "link", "unlink", "rename"):
            original = getattr(os, name)

            def wrapped(*args, _original=original, **kwargs):
                self.take()
                return _original(*args, **kwargs)

            monkeypatch.setattr(os, name, wrapped)

    def take(self) -> None:
        self.states.append({p.name: p.read_bytes() for p in self.folder.iterdir()
                            if p.is_file() and not p.name.startswith(".")})  # temp files: never read by anyone


def _save(writer, last: Path, epoch: int, best: bool) -> None:
    staged = resume.staged_path(last)
    torch.save({"epoch": epoch}, staged)
    writer.write(resume.sidecar_path(last), _state(epoch), background=False, staged=staged,
                 best=last.with_name("best.pt") if best else None)


@settings(max_examples=12, deadline=None)
@given(best=st.lists(st.booleans(), min_size=2, max_size=4))
def test_a_kill_at_any_file_operation_of_a_save_leaves_last_pt_its_sidecar_and_at_rest_no_prev(best):
    """Each instant of each save, replayed from a snapshot: the reader pairs ``last.pt`` with a sidecar of its digest
    (or, before the first save completed, says there is none); after every save one sidecar per checkpoint."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        folder = Path(tmp) / "weights"
        folder.mkdir()
        last = folder / "last.pt"
        snapshots = _Snapshots(folder, monkeypatch)
        writer = resume.Writer()
        for epoch, is_best in enumerate(best):
            _save(writer, last, epoch, is_best)
            snapshots.take()
            at_rest = sorted(p.name for p in folder.iterdir())
            assert not resume.previous_path(last).exists(), at_rest  # the .prev served only the swap
            expected = {"last.pt", "last.pt.yolo-det", run_folder.RESUME_MARKER}
            assert set(at_rest) - {"best.pt.yolo-det"} == expected, at_rest
        monkeypatch.undo()
        replay = Path(tmp) / "replay"
        for state in snapshots.states:
            if replay.exists():
                shutil.rmtree(replay)
            replay.mkdir()
            for name, data in state.items():
                (replay / name).write_bytes(data)
            if "last.pt" not in state:  # before the first checkpoint was in place: nothing to resume, said
                assert resume.unsaved(replay / "last.pt"), sorted(state)
                continue
            found = resume.consistent_state(replay / "last.pt")
            checkpoint_epoch = torch.load(replay / "last.pt")["epoch"]
            assert found["state"] is not None and not found.get("mismatch"), (sorted(state), found)
            assert found["state"]["epoch"] == checkpoint_epoch, sorted(state)
            assert found["state"]["checkpoint_sha256"] == resume.file_digest(replay / "last.pt")


def test_a_resume_with_the_current_sidecar_removes_a_prev_a_kill_left_after_the_rename(tmp_path):
    last = tmp_path / "last.pt"
    writer = resume.Writer()
    for epoch in (0, 1):
        _save(writer, last, epoch, best=False)
    shutil.copyfile(resume.sidecar_path(last), resume.previous_path(last))  # killed after the rename, before removal
    found = resume.consistent_state(last)
    assert found["path"] == resume.sidecar_path(last) and found["state"]["epoch"] == 1
    resume.adopt_previous(last, found["path"])
    assert not resume.previous_path(last).exists()


# -- a completed training ----------------------------------------------------------------------------------
def _full_run(tmp_path: Path, optimizer_name: str = "SGD"):
    """A weights folder as a strict run leaves it: last.pt and best.pt sharing one sidecar (a hard link), a DDP
    rank's RNG states and their .prev, the marker."""
    folder = tmp_path / "weights"
    folder.mkdir(parents=True)
    last, best = folder / "last.pt", folder / "best.pt"
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    ema = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    ema.anchor_grid = torch.arange(6.0)  # a tensor a module caches outside its state_dict
    optimizer = getattr(torch.optim, optimizer_name)(model.parameters(), lr=0.1)
    model(torch.rand(1, 3, 5, 5)).sum().backward()
    optimizer.step()
    writer = resume.Writer()
    for epoch in (0, 1):
        torch.save({"epoch": epoch}, resume.staged_path(last))
        state = resume.capture(epoch=epoch, next_epoch=epoch + 1, model=model, ema=ema, optimizer=optimizer,
                               settings={"mode": "strict"}, checkpoint=last)
        torch.save({"epoch": epoch}, best)
        writer.write(resume.sidecar_path(last), state, background=False, staged=resume.staged_path(last), best=best)
    for _ in range(2):  # rank 1's states of epoch 1, the first kept as .prev
        resume.write_rank_state(last, 1, 1)
    return folder, ema


def test_a_completed_training_keeps_the_full_precision_ema_and_nothing_to_resume_from(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(completion.KEEP_ENV, raising=False)
    folder, ema = _full_run(tmp_path)
    sidecar = folder / "last.pt.yolo-det"
    full = resume.read(sidecar)
    assert os.path.samefile(sidecar, folder / "best.pt.yolo-det")
    freed = resume.finish_completed(folder, echo=print)
    out = capsys.readouterr().out
    assert freed > 0 and out.count("\n") == 1 and "YOLO_DET_KEEP_RESUME=1" in out and "removed its resume state" in out
    assert sorted(p.name for p in folder.iterdir()) == ["best.pt", "best.pt.yolo-det", "last.pt", "last.pt.yolo-det",
                                                        run_folder.RESUME_MARKER]
    assert os.path.samefile(sidecar, folder / "best.pt.yolo-det")  # still one file for the two checkpoints
    kept = resume.read(sidecar)
    assert kept["epoch"] == full["epoch"] == 1 and kept[resume.COMPLETED] is True
    for part in ("model", "optimizer", "rng", "accumulation", "pending_gradients"):
        assert part not in kept
    assert kept["ema"].keys() == full["ema"].keys() and all(torch.equal(kept["ema"][k], v) for k, v in full["ema"].items())
    assert set(kept["caches"]) == {"ema"} and torch.equal(kept["caches"]["ema"]["anchor_grid"]["tensors"][0],
                                                          full["caches"]["ema"]["anchor_grid"]["tensors"][0])
    fresh = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    assert resume.load_module(fresh, kept["ema"])  # what yolo-det val loads
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), ema.state_dict().values()))
    # a resume of the finished run is told why, not "replaced or edited"
    found = resume.consistent_state(folder / "last.pt")
    assert found["state"] is None and "completed" in found["problems"][0] and "YOLO_DET_KEEP_RESUME=1" in found["problems"][0]
    assert resume.finish_completed(folder, echo=print) == 0 and capsys.readouterr().out == ""  # twice: nothing more


def test_keep_resume_keeps_the_full_state_but_no_prev(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(completion.KEEP_ENV, "1")
    folder, _ = _full_run(tmp_path)
    full = (folder / "last.pt.yolo-det").read_bytes()
    resume.finish_completed(folder, echo=print)
    assert "kept its resume state as YOLO_DET_KEEP_RESUME asks" in capsys.readouterr().out
    assert (folder / "last.pt.yolo-det").read_bytes() == full and (folder / "last.pt.yolo-det.rank1").is_file()
    assert not [p for p in folder.iterdir() if p.name.endswith(".prev")]


def test_a_kill_while_the_state_is_reduced_leaves_each_sidecar_readable(tmp_path, monkeypatch):
    monkeypatch.delenv(completion.KEEP_ENV, raising=False)
    folder, _ = _full_run(tmp_path)
    calls = []
    original = os.replace

    def dies_on_the_second(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return original(src, dst)

    monkeypatch.setattr(os, "replace", dies_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        resume.finish_completed(folder, echo=None)
    monkeypatch.undo()
    for name in ("last.pt.yolo-det", "best.pt.yolo-det"):
        assert resume.read(folder / name)["ema"] is not None


def test_yolo_det_files_wait_aside_while_the_weights_folder_is_uploaded(tmp_path):
    folder, _ = _full_run(tmp_path)
    ours = {p.name for p in run_folder.own_weights_files(folder)}
    assert ours == {p.name for p in folder.iterdir()} - {"last.pt", "best.pt"}
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    resume.set_aside(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["best.pt", "last.pt"]  # what an upload of weights/ takes
    assert not list(tmp_path.glob("*.pt"))  # nothing in the run folder a callback's file glob takes either
    resume.put_back(folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert os.path.samefile(folder / "last.pt.yolo-det", folder / "best.pt.yolo-det")
    assert not (tmp_path / run_folder.ASIDE_NAME).exists() and resume.put_back(folder) == []


# -- bytes per parameter ------------------------------------------------------------------------------------
@pytest.mark.parametrize("optimizer_name, state_floats", [("SGD", 1), ("Adam", 2), ("AdamW", 2)])
@pytest.mark.parametrize("pending", [False, True])
def test_the_sidecar_costs_the_bytes_per_parameter_the_docs_say(tmp_path, optimizer_name, state_floats, pending):
    """fp32 model + EMA (8 bytes), the optimizer's per-parameter state (SGD momentum 4, Adam 8), the gradients
    saved mid-accumulation (4): the oracle is the parameter count times those sizes, against the file's bytes."""
    import copy as copy_mod

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(300, 300), torch.nn.Linear(300, 100))
    ema = copy_mod.deepcopy(model)
    kwargs = {"momentum": 0.9} if optimizer_name == "SGD" else {}
    optimizer = getattr(torch.optim, optimizer_name)(model.parameters(), lr=0.01, **kwargs)
    model(torch.rand(2, 300)).sum().backward()
    optimizer.step()
    if pending:
        model(torch.rand(2, 300)).sum().backward()  # gradients waiting for the next step
    else:
        optimizer.zero_grad(set_to_none=True)
    state = resume.capture(epoch=0, next_epoch=1, model=model, ema=ema, optimizer=optimizer, last_opt_step=0,
                           checkpoint=tmp_path / "last.pt")
    path = tmp_path / "last.pt.yolo-det"
    resume.Writer().write(path, state, background=False)
    params = sum(p.numel() for p in model.parameters())
    per_param = 4 * (2 + state_floats + (1 if pending else 0))
    overhead = path.stat().st_size - per_param * params
    assert 0 <= overhead < 0.05 * per_param * params, (path.stat().st_size, per_param * params)
