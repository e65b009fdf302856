"""Fake run artefacts for the tests that need no training: fingerprint logs, run folders and checkpoints.

One builder each, so that what yolo-det or a release writes is spelled here once and a change to it is made once:
the tests keep their own small wrappers (which records, which files), never their own copy of how to write them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Tuple, Union

import yaml

#: a digest of 128 zero bits, the usual "same tensor" of a fake log
HEX = "0" * 32
#: the header of the small synthetic fingerprint logs (:func:`tiny_log`)
TINY_HEADER = {"yolo_det": "0.1.0", "torch": "2.14.1", "rank": 0, "world_size": 1, "command": ["train.py"]}

#: a value for every step, or a function of the step (1-based) giving it
PerStep = Union[Any, Callable[[int], Any]]


def _at(value: PerStep, step: int) -> Any:
    return value(step) if callable(value) else value


def fingerprint_log(path: Path, header: Mapping[str, Any], steps: int = 0, records: PerStep = None, *,
                    lr: PerStep = None, losses: PerStep = (), items: PerStep = (), ddp: PerStep = None,
                    full: PerStep = True, compact: bool = False, validations: Iterable[Mapping[str, Any]] = (),
                    final: Optional[Tuple[Sequence[str], str]] = ((), ""), closed_by: str = "finish",
                    run_dir: Optional[str] = None) -> Path:
    """A fingerprint log written by yolo-det's own ``LogWriter``: ``steps`` step lines, each with ``records``
    ({kind: (tensor names, hex digests)}) and the other per-step values (a value, or a function of the step);
    ``validations``, keyword arguments of ``write_validation``, each after the step its ``after_step`` names (0:
    before the first); ``final`` (names, digests) of the final line, None to leave it out as a kill does."""
    from yolo_det.record.log import LogWriter

    writer = LogWriter(path, header, compact=compact)
    validations = list(validations)

    def validate(after: int) -> None:
        for validation in validations:
            if validation["after_step"] == after:
                writer.write_validation(**validation)

    validate(0)
    for step in range(1, steps + 1):
        writer.write_step(step, _at(records, step), lr=_at(lr, step), losses=_at(losses, step),
                          items=_at(items, step), ddp=_at(ddp, step), full=_at(full, step))
        validate(step)
    if final is not None:
        writer.write_final(steps, final[0], final[1], closed_by, run_dir)
    writer.close()
    return path


def tiny_log(path: Path, steps: int, flip: bool = False) -> Path:
    """A fingerprint log of ``steps`` steps (0: header and an empty final line only); ``flip`` changes the last
    step's gradient digest, so two logs differ there."""
    return fingerprint_log(path, TINY_HEADER, steps,
                           lambda step: {"grad": (["w"], ("1" if flip and step == steps else "0") * 32),
                                         "param": (["w"], "a" * 32)},
                           lr={"group0.lr": 0.01}, losses=[1.0], ddp={"world_size": 1, "ok": True},
                           final=(["model.w"] if steps else [], "c" * 32 if steps else ""))



def every_field_log(path: Path, steps: int = 3, flip: int = 0) -> Path:
    """A log whose steps carry every field (two tensors' gradients and parameters, a learning rate, losses, loss
    items, a DDP check); ``flip`` changes that step's gradient digest of ``w``."""
    return fingerprint_log(path, TINY_HEADER, steps,
                           lambda step: {"grad": (["w", "b"], ("1" if step == flip else "0") * 32 + "f" * 32),
                                         "param": (["w", "b"], "a" * 64)},
                           lr=lambda step: {"group0.lr": 0.01 * step}, losses=lambda step: [4.0 - step],
                           items=[[0.1, 0.2, 0.3]], ddp={"world_size": 1, "ok": True}, final=(["model.w"], "c" * 32))

def log_lines(path: Path, lines: Iterable[Mapping[str, Any]]) -> Path:
    """A log written line by line as JSON, not by ``LogWriter``: what another writer (or a hand) may produce."""
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def checkpoint(path: Path, tensors: Optional[Mapping[str, Any]] = None, epoch: int = 1, **extra: Any) -> Path:
    """A checkpoint as the releases save one, ``{'epoch': ..., **extra, 'model': tensors}`` (no ``model`` key when
    ``tensors`` is None: a checkpoint without any tensor)."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"epoch": epoch, **extra}
    if tensors is not None:
        data["model"] = dict(tensors)
    torch.save(data, path)
    return path


def run_folder(path: Path, *, args: Optional[Mapping] = None, opt: Optional[Mapping] = None,
               hyp: Optional[Mapping] = None, report: Optional[Mapping] = None,
               weights: Optional[Mapping[str, Any]] = None, files: Optional[Mapping[str, str]] = None) -> Path:
    """A run folder as the releases and yolo-det leave one: ``args.yaml`` (Ultralytics), ``opt.yaml`` and
    ``hyp.yaml`` (YOLOv5) in the order given, yolo-det's ``determinism.json`` (``report``), ``weights/last.pt``
    holding ``weights`` as its model, and any other text ``files`` by name (``results.csv``)."""
    path.mkdir(parents=True)
    if weights is not None:
        checkpoint(path / "weights" / "last.pt", weights)
    for name, data in (("args.yaml", args), ("opt.yaml", opt), ("hyp.yaml", hyp)):
        if data is not None:
            (path / name).write_text(yaml.safe_dump(data, sort_keys=False))
    if report is not None:
        (path / "determinism.json").write_text(json.dumps(report))
    for name, text in (files or {}).items():
        (path / name).write_text(text)
    return path


def study(folder: Path, values, seeds=(11, 22, 33, 44, 55, 66)) -> Path:
    """A finished seed study in ``folder`` (``study.json``): one strict run per seed with ``values`` as its fitness
    (mAP50-95 0.9 times it), as the report and the readers' tests read one."""
    from yolo_det.studies.study import Study, StudyRun

    runs = [StudyRun(i + 1, s, {"run": s, "init": s, "order": s, "augment": s}, str(folder / f"run{i + 1}.jsonl"),
                     None, {"fitness": v, "metrics/mAP50-95(B)": v * 0.9}, {"fitness": v}, 2, "strict")
            for i, (s, v) in enumerate(zip(seeds, values))]
    Study({"seeds": list(seeds), "vary": "all", "base_seed": 0, "mode": "strict", "command": ["yolo", "train"]},
          runs).write(folder)
    return folder
