"""yolo-det overheads as side-by-side ratios (DESIGN.md §8): python scripts/bench.py [--quick] [--json PATH]

Every ratio compares A and B measured in the same run, interleaved (A, B, A, B, ...), as a
median; absolute seconds on shared machines are noise, ratios much less so.

- patch_overhead_ratio        patched vs unpatched PyPI yolov5n train.py, determinism off (target <= 1.01)
- fingerprint_overhead_ratio  fingerprinting on vs off, per training batch (target <= 1.03 on CPU). In-process
                              with an optimizer step every 8 batches, as YOLOv5 does after warm-up with batch 8
                              (nominal batch 64), and every batch (the worst case: the cost is mostly per
                              optimizer step); and from train.py runs, which are short enough to lie inside
                              YOLOv5's warm-up (>= 100 batches, optimizer every 1-3 batches)
- inprocess                   the patch's per-batch cost measured in-process (precise where whole runs are
                              too noisy)
- strict_vs_off_ratio         patched, strict vs off, step time on this machine
- validation_fingerprint_ratio  a YOLOv5 validation pass (val.run, yolov5n, 16 images, conf 0.001) with its
                              validation record (a digest per image's predictions after NMS, metrics, one
                              log line) vs without (target <= 1.02); record_share: the record's own time
                              over the rest of the same pass (robust on a loaded machine)
- replacement_ratios          each deterministic replacement's forward+backward vs the native op (<= 2.0 CPU)
- opaque                      each stand-in for an opaque kernel (flash-attn's PyTorch fallback, deformable
                              attention's PyTorch path, roi_align's) vs what runs without it on CPU: largest output
                              and gradient difference (float32) and the forward+backward time ratio
- capture_ratio               verify --locate's op capture: one yolov5n training step (forward, loss, backward,
                              SGD step) with every aten op recorded (outputs read or derived, module paths
                              tracked) and every digest resolved, vs the plain step (target <= 3.0); also
                              how many ops and how many tensors were read
- manifest                    the data manifest (issue 28) on 20k tiny files (10k images, 10k labels; 4k with
                              --quick): first build (every file read) and repeat (a stat per file) vs listing them
- digest                      the digest (bytes-lin64-v2) in GB/s over yolov5n's state three times (what a
                              fingerprinted step digests), next to a plain sum over the same bytes (target: within
                              5x), also at 1 thread and over 256 MB (from memory: the 21 MB may sit in a large L3),
                              the op capture's batched reads of the same tensors, and the previous kernels
                              (int8 GEMM of bytes-intmm-v1, torch int64 mv) for reference
- apply_patch_seconds         yolo-det apply-patch on a fresh copy of the PyPI yolov5 package (< 1 s)
- cli                         whole processes: yolo-det --version (< 0.3 s), apply-patch of the PyPI yolov5
                              (< 1 s), diff of two 200 MB logs (peak RSS < 300 MB; 50 MB with --quick), and
                              apply-patch of a 125k-line train.py (20k with --quick)
- audit_seconds               yolo-det audit of yolov5s at 256 px (< 10 s on CPU)
- streams                     per-sample seeding (issue 13) as a fraction of YOLOv5's own sample loading (mosaic,
                              HSV, flips, affine) at 640 and 128 px (target <= 0.01); resume sidecar save time vs
                              YOLOv5's own last.pt save (yolov5n; target <= 0.10): the time training is blocked
                              (RNG states and BatchNorm buffers copied; parameters, EMA and optimizer state are
                              copied on the writer thread before the next optimizer step may run) and, for
                              reference, the whole write done synchronously
- world                       world-size invariance (issue 27): one process running V virtual micro-batches of
                              B/V images (yolov5n, 128 px, YOLOv5's ComputeLoss, B = 16) vs one batch of B, step
                              time (forward, loss, backward) as a ratio, and the engine's own share (V=4 through
                              the engine vs the same 4 micro-batches accumulated by autograd); the in-rank partial
                              sums' peak gradient
                              copies per parameter (at most log2(V/N) + 1); bytes each rank sends per batch
                              through the fixed-tree hook vs a ring all-reduce (the hook's collectives, counted)
- export_errors               raw-output errors of each export format (ONNX fp32/fp16, OpenVINO fp32/fp16) against
                              the .pt through `yolo-det parity`, for yolov5n, yolov8n, yolo11n and yolo26n at 640 px
                              built from their YAML (random init); only with --only export_errors or without --quick
- sidecar                     the resume sidecar's bytes per parameter (issue 60, item 11): yolov8n and yolov8x
                              (yolov8n only with --quick) built from their YAML, SGD and AdamW, saved at an
                              accumulation boundary and mid-accumulation (the pending gradients too), and what a
                              completed training keeps (the full-precision EMA)
- report                      yolo-det report (issue 59, item 9): its time and page size for a 100k-step fingerprint log
                              (20k with --quick) and for two diverging logs of half as many steps, next to a tenth of
                              those steps (the size must not grow with the steps; the page stays under 2 MB), and
                              the time as a ratio to reading the same log alone (LogReader, every step)
- compile                     torch.compile (issue 41): forward + backward of an Ultralytics yolov8n (128 px, batch
                              8) compiled under strict (Inductor's deterministic settings, the op scan) vs compiled
                              with Inductor's defaults and determinism off vs eager strict, step time interleaved;
                              the first (compiling) step timed separately for each compiled model

- portable                    portable vs strict (issue 62): one yolov5n training step (forward, ComputeLoss,
                              backward, SGD) at 128 px, batch 16, under strict in child processes, interleaved:
                              portable (CPU libraries pinned to AVX2, MKL's COMPATIBLE branch, 1 intra-op thread)
                              vs strict with torch's default threads (target <= 1.3 on CPU), vs strict on 1 thread
                              (the pins' own cost), and portable with as many threads as strict's default

Training step time is the median interval between consecutive ``Tensor.backward`` calls
(one batch: load, forward, loss, backward, optimizer when due; the interval spanning each
epoch's validation is an outlier the median ignores), taken by a sitecustomize shim so
patched and unpatched scripts are timed by the same code.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import yaml  # noqa: E402

import yolo_det  # noqa: E402
from yolo_det.core.tensors import tensors_in  # noqa: E402
from yolo_det.synthetic import make_dataset, offline_env  # noqa: E402

SHIM = '''
import atexit, json, os, time
import torch
_times = []
_backward = torch.Tensor.backward
def _timed_backward(self, *args, **kwargs):
    _times.append(time.perf_counter())
    return _backward(self, *args, **kwargs)
torch.Tensor.backward = _timed_backward
if os.environ.get("YOLO_DET_BENCH_FORCE_OFF") == "1":
    # The unpatched baseline with determinism switched off, as users do by editing train.py.
    _use = torch.use_deterministic_algorithms
    torch.use_deterministic_algorithms = lambda mode, **kw: _use(False)
def _dump():
    path = os.environ.get("YOLO_DET_BENCH_TIMES")
    if path and _times:
        with open(path, "w") as f:
            json.dump(_times, f)
atexit.register(_dump)
'''


def _median_ratio(pairs: List[tuple]) -> Dict[str, float]:
    ratios = [b / a for a, b in pairs]
    return {"ratio": round(statistics.median(ratios), 4), "min": round(min(ratios), 4),
            "max": round(max(ratios), 4), "pairs": len(ratios)}


class TrainingBench:
    """Runs YOLOv5 train.py variants as subprocesses and reads their per-batch times."""

    def __init__(self, work: Path, epochs: int, images: int) -> None:
        import yolov5

        self.work = work
        self.epochs = epochs
        package = Path(yolov5.__file__).parent
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        self.plain = work / "plain" / "yolov5"
        self.patched = work / "patched" / "yolov5"
        shutil.copytree(package, self.plain, ignore=ignore)
        shutil.copytree(package, self.patched, ignore=ignore)
        from yolo_det.patch import apply_patch

        apply_patch(self.patched)
        self.data = make_dataset(work / "data", n_train=images, n_val=8, imgsz=128)
        shim_dir = work / "shim"
        shim_dir.mkdir()
        (shim_dir / "sitecustomize.py").write_text(SHIM)
        self.env = offline_env(work / "config")
        self.env["PYTHONPATH"] = os.pathsep.join([str(shim_dir), str(ROOT), self.env.get("PYTHONPATH", "")])
        for key in [k for k in self.env if k.startswith("YOLO_DET_")]:
            del self.env[key]
        self.count = 0

    def step_time(self, variant: str) -> float:
        """Median seconds per batch of one training run of ``variant``."""
        self.count += 1
        name = f"{variant}-{self.count}"
        times = self.work / f"{name}.json"
        env = dict(self.env, YOLO_DET_BENCH_TIMES=str(times))
        repo = self.plain if variant == "unpatched_off" else self.patched
        cmd = [sys.executable, "train.py", "--data", str(self.data), "--cfg", "yolov5n.yaml", "--weights", "",
               "--img", "128", "--epochs", str(self.epochs), "--batch-size", "8", "--workers", "2", "--noplots",
               "--device", "cpu", "--project", str(self.work / "runs"), "--name", name]
        if variant == "unpatched_off":
            env["YOLO_DET_BENCH_FORCE_OFF"] = "1"
        else:  # the patched copy is what `import yolov5` finds (docs/patch.md), as for a user
            env["PYTHONPATH"] = os.pathsep.join([str(self.patched.parent), env["PYTHONPATH"]])
            cmd += ["--deterministic", "strict" if variant == "patched_strict" else "off"]
        if variant == "patched_off_fingerprint":
            cmd += ["--fingerprint", str(self.work / f"{name}.jsonl")]
        out = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
        if out.returncode != 0 or not times.exists():
            raise RuntimeError(f"training run {name} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
        stamps = json.loads(times.read_text())
        intervals = [b - a for a, b in zip(stamps, stamps[1:])]
        return statistics.median(intervals)


def bench_training(rounds: int, epochs: int, images: int, log: Callable[[str], None]) -> Dict[str, object]:
    variants = ("unpatched_off", "patched_off", "patched_off_fingerprint", "patched_strict")
    with tempfile.TemporaryDirectory(prefix="yolo-det-bench-") as tmp:
        bench = TrainingBench(Path(tmp), epochs, images)
        samples: Dict[str, List[float]] = {v: [] for v in variants}
        for r in range(rounds):
            order = variants if r % 2 == 0 else tuple(reversed(variants))
            for variant in order:
                samples[variant].append(bench.step_time(variant))
                log(f"  round {r + 1}/{rounds} {variant:<24} {samples[variant][-1] * 1000:7.1f} ms/batch")
    pair = lambda a, b: list(zip(samples[a], samples[b]))  # noqa: E731
    return {
        "patch_overhead_ratio": _median_ratio(pair("unpatched_off", "patched_off")),
        "fingerprint_overhead_ratio": _median_ratio(pair("patched_off", "patched_off_fingerprint")),
        "strict_vs_off_ratio": _median_ratio(pair("patched_off", "patched_strict")),
        "step_ms": {v: round(statistics.median(s) * 1000, 2) for v, s in samples.items()},
        "sizes": {"model": "yolov5n", "imgsz": 128, "batch": 8, "epochs": epochs, "train_images": images,
                  "workers": 2, "rounds": rounds},
    }


def bench_inprocess(blocks: int, log: Callable[[str], None], accumulate: int = 1) -> Dict[str, object]:
    """Per-batch overheads measured in-process, where run-to-run noise cannot hide 1%.

    What train.py does per batch, with the installed PyPI yolov5: its dataloader (synthetic
    images, mosaic augmentation, 2 workers), yolov5n at 128 px, batch 8, ComputeLoss, SGD and
    ModelEMA, an optimizer step (and EMA update) every ``accumulate`` batches: 8 is what YOLOv5
    does after warm-up (nominal batch 64 / batch 8); 1 is the worst case for fingerprints,
    whose cost is mostly per optimizer step. Variants, interleaved in blocks: ``plain`` (an
    unpatched train.py; only with ``accumulate=1``), ``patched_off`` (the session, its
    optimizer-step hook and the backward context) and ``fingerprint`` (the same with per-step
    fingerprints). A block's sample is the mean time per batch over its timed batches (4
    optimizer steps' worth with ``accumulate=1``, 1 with 8); each ratio is the median over
    blocks of the ratio within a block. The batches are taken from the loader once, after the
    warm-up, and every sample trains on the same ones: equal work for every variant (the
    loader's time, which train.py overlaps with the step, is outside the timed loop, so the
    ratio is a strict one). Each block starts a new session and recorder; its first sample is
    not timed (it builds the fingerprint's caches for the block's layout, as a run's first steps do).
    ``fingerprint_own_share``: the time inside the recorder's optimizer-step hooks (where it digests,
    timed by global hooks registered before and after its own) over the fingerprinted sample's
    time, median over blocks: robust where the machine's noise (block ratios spread by +-10% on a
    shared 2-core VM, with identical work) hides a 1% difference.
    """
    import contextlib
    import io
    import logging
    import warnings

    import yaml

    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    from yolo_det import session as runtime
    from yolo_det.record import fingerprint

    variants = ("plain", "patched_off", "fingerprint", "compact") if accumulate == 1 else \
        ("patched_off", "fingerprint", "compact")
    cycles = 4 if accumulate == 1 else 1  # optimizer steps per sample
    times: Dict[str, List[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="yolo-det-bench-") as tmp:
        data = yaml.safe_load(make_dataset(Path(tmp) / "data", n_train=64, n_val=8, imgsz=128).read_text())
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.disable(logging.WARNING)  # YOLOv5's logger keeps the stream it was first given
            try:
                import yolov5
                from yolov5.models.yolo import Model
                from yolov5.utils.dataloaders import create_dataloader
                from yolov5.utils.loss import ComputeLoss
                from yolov5.utils.torch_utils import ModelEMA

                package = Path(yolov5.__file__).parent
                hyp = yaml.safe_load((package / "data" / "hyps" / "hyp.scratch-low.yaml").read_text())
                torch.manual_seed(0)
                model = Model(str(package / "models" / "yolov5n.yaml"), nc=2)
                loader, _ = create_dataloader(str(Path(data["path"]) / data["train"]), 128, 8, 32, hyp=hyp,
                                              augment=True, workers=2, shuffle=True, seed=0)
            finally:
                logging.disable(logging.NOTSET)
        model.hyp = hyp
        model.train()
        compute_loss = ComputeLoss(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937)
        ema = ModelEMA(model)

        def endless() -> Iterator[tuple]:
            while True:  # YOLOv5's loader yields one epoch per iterator; its workers persist
                yield from loader

        def train_batch(images: torch.Tensor, targets: torch.Tensor, update: bool) -> None:
            loss, items = compute_loss(model(images.float() / 255), targets)
            with runtime.backward_context(items) if runtime.current() is not None else contextlib.nullcontext():
                loss.backward()
            if update:
                optimizer.step()
                optimizer.zero_grad()
                ema.update(model)

        stream = endless()
        for _ in range(3):  # warm-up, through the loader
            images, targets, _, _ = next(stream)
            train_batch(images, targets, update=True)
        # every sample then runs the same batches, taken from the loader once: equal work for each variant
        batches = [next(stream)[:2] for _ in range(cycles * accumulate)]

        def per_batch() -> float:
            start = time.perf_counter()
            for i, (images, targets) in enumerate(batches):
                train_batch(images, targets, update=(i + 1) % accumulate == 0)
            return (time.perf_counter() - start) / len(batches)

        own = [0.0, 0.0]  # seconds inside the recorder's optimizer-step hooks; when the current one began

        def enter(*_: object) -> None:
            own[1] = time.perf_counter()

        def leave(*_: object) -> None:
            own[0] += time.perf_counter() - own[1]

        shares: List[float] = []
        for b in range(blocks):
            for variant in (variants if b % 2 == 0 else tuple(reversed(variants))):
                session, hooks = None, []
                if variant != "plain":
                    session = yolo_det.configure("off")
                    session.track(model, ema)
                if variant in ("fingerprint", "compact"):  # global step hooks run in the order registered: enter,
                    hooks = [register_optimizer_step_pre_hook(enter), register_optimizer_step_post_hook(enter)]
                    fingerprint.start(Path(tmp) / f"{variant}{b}.jsonl", session=session,  # recorder, leave
                                      compact=variant == "compact")
                    hooks += [register_optimizer_step_pre_hook(leave), register_optimizer_step_post_hook(leave)]
                train_batch(*batches[0], update=True)  # not timed: the first optimizer step digests gradients only,
                per_batch()  # the first sample builds the fingerprint's caches for its layout
                own[0] = 0.0
                times[variant].append(per_batch())
                if variant == "fingerprint":
                    shares.append(own[0] / (times[variant][-1] * len(batches)))
                for hook in hooks:
                    hook.remove()
                if session is not None:
                    session.finish(echo=lambda _: None, restore_flags=True)
    med = {v: statistics.median(t) for v, t in times.items()}
    log("  " + ", ".join(f"{v} {med[v] * 1000:.1f} ms/batch" for v in variants)
        + f"; the recorder's step hooks {100 * statistics.median(shares):.2f}% of the fingerprinted batch")
    ratio = lambda a, b: _median_ratio(list(zip(times[a], times[b])))["ratio"]  # noqa: E731
    spread = _median_ratio(list(zip(times["patched_off"], times["fingerprint"])))
    result: Dict[str, object] = {
        "fingerprint_overhead_ratio": ratio("patched_off", "fingerprint"),
        "compact_overhead_ratio": ratio("patched_off", "compact"),
        "fingerprint_own_share": round(statistics.median(shares), 4),
        "fingerprint_ratio_spread": {"min": spread["min"], "max": spread["max"]},
        "batch_ms": {v: round(m * 1000, 2) for v, m in med.items()},
        "accumulate": accumulate, "blocks": blocks, "optimizer_steps_per_sample": cycles,
        "loader": "yolov5 create_dataloader, 64 synthetic images, augment, 2 workers",
    }
    if "plain" in med:
        result["patch_overhead_ratio"] = ratio("plain", "patched_off")
    return result


def bench_record_size(steps: int, log: Callable[[str], None]) -> Dict[str, object]:
    """Bytes the compact default record adds per optimizer step (yolov5n's tensors, in-process, ``steps`` steps of
    batch 2 at 64 px, a validation-like pass every 100 steps), the full record's for reference, and the total of a
    300-epoch COCO-sized run (118k images, batch 64: 555k steps, one validation per epoch)."""
    from yolo_det.record import fingerprint
    from yolo_det.record.log import read_log

    model, _ = _yolov5n()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    out: Dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="yolo-det-bench-") as tmp:
        images = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.rand(2 * steps, 3, 64, 64)),
                                             batch_size=2)
        val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.rand(2, 3, 64, 64)), batch_size=2)
        for mode in ("compact", "full"):
            path = Path(tmp) / f"{mode}.jsonl"
            fingerprint.start(path, model=model, rank=-1, compact=mode == "compact")
            for i, (x,) in enumerate(images):
                sum(p.float().mean() for p in model(x)).backward()
                optimizer.step()
                optimizer.zero_grad()
                if (i + 1) % 100 == 0:
                    with torch.no_grad():
                        for (v,) in val:
                            model.eval()(v)
                    model.train()
                    fingerprint.record_validation(i // 100, {"fitness": 0.0})
            fingerprint.stop()
            lines = path.read_bytes().splitlines(keepends=True)
            compact = [len(line) for line in lines if line.startswith(b'{"r":')]
            full = [len(line) for line in lines if line.startswith(b'{"step":')]
            out[mode] = {"bytes": path.stat().st_size, "steps": len(read_log(path).steps),
                         "compact_line_bytes": max(compact) if compact else None,
                         "full_line_bytes": round(statistics.median(full)) if full else None}
    compact_step, full_step = out["compact"]["compact_line_bytes"], out["full"]["full_line_bytes"]
    coco_steps, epochs = 555_000, 300
    out["bytes_per_step"] = compact_step
    out["full_bytes_per_step"] = full_step
    out["coco_300_epochs_bytes"] = compact_step * coco_steps + 2 * full_step * epochs  # + a full line per validation
    out["coco_300_epochs_full_bytes"] = full_step * coco_steps
    log(f"  compact record: {compact_step} B per step (full: {full_step} B); a 300-epoch COCO-sized run: "
        f"{out['coco_300_epochs_bytes'] / 1e6:.0f} MB compact vs {out['coco_300_epochs_full_bytes'] / 1e9:.1f} GB full "
        "(validation records' per-image digests on top)")
    return out


def bench_sidecar(models: List[str], log: Callable[[str], None]) -> Dict[str, object]:
    """Bytes the resume sidecar (issue 60, item 11) takes per parameter: Ultralytics detection models built from
    their YAML (random init, no weights), each optimizer (SGD with momentum, AdamW) with its state created by one
    step, saved at an accumulation boundary and mid-accumulation (gradients waiting), written as a training writes
    it; and what a completed training keeps (the full-precision EMA alone)."""
    from ultralytics.nn.tasks import DetectionModel

    from yolo_det.integrations import resume
    from yolo_det.integrations.resume.completion import reduced

    out: Dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="yolo-det-bench-") as tmp, contextlib.redirect_stdout(io.StringIO()):
        for name in models:
            model = DetectionModel(name, nc=80, verbose=False)
            ema = DetectionModel(name, nc=80, verbose=False).eval()
            params = sum(p.numel() for p in model.parameters())
            rows: Dict[str, object] = {"parameters": params}
            for optimizer_name in ("SGD", "AdamW"):
                kwargs = {"momentum": 0.937, "nesterov": True} if optimizer_name == "SGD" else {}
                optimizer = getattr(torch.optim, optimizer_name)(model.parameters(), lr=1e-3, **kwargs)
                for p in model.parameters():
                    p.grad = torch.full_like(p, 1e-3)
                optimizer.step()  # the optimizer's per-parameter state exists, as after the first step
                for when in ("boundary", "mid_accumulation"):
                    for p in model.parameters():
                        p.grad = None if when == "boundary" else torch.full_like(p, 1e-3)
                    state = resume.capture(epoch=0, next_epoch=1, model=model, ema=ema, optimizer=optimizer,
                                           last_opt_step=0, checkpoint=Path(tmp) / "last.pt")
                    path = Path(tmp) / "last.pt.yolo-det"
                    resume.Writer().write(path, state, background=False)
                    size = path.stat().st_size
                    rows[f"{optimizer_name}_{when}"] = {"bytes": size, "bytes_per_parameter": size / params}
                    if optimizer_name == "SGD" and when == "boundary":
                        torch.save(reduced(resume.read(path)), path)
                        rows["completed"] = {"bytes": path.stat().st_size,
                                             "bytes_per_parameter": path.stat().st_size / params}
                    path.unlink()
                optimizer.zero_grad(set_to_none=True)
            out[name.replace(".yaml", "")] = rows
    for name, rows in out.items():
        cells = ", ".join(f"{k} {v['bytes_per_parameter']:.2f} B/param ({v['bytes'] / 1e6:.1f} MB)"
                          for k, v in rows.items() if isinstance(v, dict))
        log(f"  {name} ({rows['parameters'] / 1e6:.2f} M parameters): {cells}")
    return out


@contextlib.contextmanager
def _quiet_yolov5() -> Iterator[None]:
    """Silence YOLOv5's prints, warnings and logger while it builds models and loaders."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def _yolov5n() -> Tuple[torch.nn.Module, Dict[str, object]]:
    """yolov5n for 2 classes (seed 0) from the PyPI package, and the package's hyp.scratch-low."""
    import yolov5
    from yolov5.models.yolo import Model

    package = Path(yolov5.__file__).parent
    hyp = yaml.safe_load((package / "data" / "hyps" / "hyp.scratch-low.yaml").read_text())
    torch.manual_seed(0)
    return Model(str(package / "models" / "yolov5n.yaml"), nc=2), hyp


def bench_validation(blocks: int, log: Callable[[str], None]) -> Dict[str, object]:
    """A validation pass as train.py runs it (``val.run`` on the EMA model, its own loader), with and without
    the fingerprint log's validation record, interleaved. The record's cost: every NMS batch's predictions
    digested (through the same ``nms_output`` call the patch inserts into utils/general.py), the metrics,
    the line written."""
    import contextlib
    import io

    import yaml

    from yolo_det.record import fingerprint

    times: Dict[str, List[float]] = {"plain": [], "fingerprint": []}
    with tempfile.TemporaryDirectory(prefix="yolo-det-bench-") as tmp:
        data = yaml.safe_load(make_dataset(Path(tmp) / "data", n_train=8, n_val=16, imgsz=128).read_text())
        data["val"] = str(Path(data["path"]) / data["val"])
        with _quiet_yolov5():
            from yolov5 import val as validate
            from yolov5.utils.dataloaders import create_dataloader

            model, hyp = _yolov5n()
            loader = create_dataloader(data["val"], 128, 16, 32, hyp=hyp, rect=True, workers=2, pad=0.5)[0]
        model.names, model.hyp, model.nc = data["names"], hyp, 2
        model.eval()
        release_nms = validate.non_max_suppression

        spent = [0.0]  # seconds inside the record's own calls during the current pass

        def recording_nms(*args, **kwargs):
            output = release_nms(*args, **kwargs)
            start = time.perf_counter()
            fingerprint.record_predictions(output)  # what the patched NMS's nms_output() does
            spent[0] += time.perf_counter() - start
            return output

        shares: List[float] = []

        def one_pass(record: bool) -> float:
            spent[0] = 0.0
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                results = validate.run(data, batch_size=16, imgsz=128, model=model, dataloader=loader,
                                       plots=False, half=False, save_dir=Path(tmp))[0]
            if record:
                begin = time.perf_counter()
                metrics = dict(zip(("precision", "recall", "mAP50", "mAP50-95"), map(float, results[:4])))
                fingerprint.record_validation(0, dict(metrics, fitness=0.0), best=True)
                recorder._flush_validations(recorder.steps)  # the line, as written after the step it follows
                spent[0] += time.perf_counter() - begin
            total = time.perf_counter() - start
            if record:
                shares.append(spent[0] / (total - spent[0]))
            return total

        recorder = fingerprint.start(Path(tmp) / "val.jsonl", model=model)
        validate.non_max_suppression = recording_nms
        try:
            one_pass(True)
            for b in range(blocks):
                for variant in (("plain", "fingerprint") if b % 2 == 0 else ("fingerprint", "plain")):
                    if variant == "plain":
                        validate.non_max_suppression = release_nms
                        times[variant].append(one_pass(False))
                        validate.non_max_suppression = recording_nms
                    else:
                        times[variant].append(one_pass(True))
        finally:
            validate.non_max_suppression = release_nms
            fingerprint.stop()
    med = {v: statistics.median(t) for v, t in times.items()}
    log("  " + ", ".join(f"{v} {med[v] * 1000:.1f} ms/validation" for v in times))
    result = _median_ratio(list(zip(times["plain"], times["fingerprint"])))
    # The record's own time over the rest of the same pass: immune to load that drifts between passes.
    result["record_share"] = round(statistics.median(shares), 5)
    log(f"  record's own time / validation pass: {result['record_share']:.4f}")
    result.update({"validation_ms": {v: round(m * 1000, 2) for v, m in med.items()},
                   "images": 16, "images_per_batch": 16, "conf_thres": 0.001})
    return result


def bench_capture(repeats: int, log: Callable[[str], None]) -> Dict[str, object]:
    """The op capture of ``verify --locate`` vs the plain step: yolov5n (PyPI yolov5) at 128 px, batch 8,
    ComputeLoss, SGD; the captured step includes resolving every digest (one transfer). Interleaved."""
    from yolo_det.record.capture import CaptureMode, ModulePaths

    with _quiet_yolov5():
        from yolov5.utils.loss import ComputeLoss

        model, hyp = _yolov5n()
    model.hyp = hyp
    model.train()
    compute_loss = ComputeLoss(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937)
    images = torch.rand(8, 3, 128, 128, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([[i, i % 2, 0.3 + 0.05 * i, 0.5, 0.2, 0.3] for i in range(8)])
    ops = [0]

    def step() -> None:
        loss, _ = compute_loss(model(images), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    def captured(read: Optional[Tuple[int, int]] = None) -> None:
        paths = ModulePaths([(model, "")]).start()
        mode = CaptureMode(paths, read)
        try:
            with mode:
                step()
        finally:
            paths.stop()
        ops[0] = len(mode.records())
        read_counts[read is not None] = mode.tensors_read

    read_counts = [0, 0]
    times = _time_pairs(step, captured, repeats)
    # The confirming pass at its most expensive: every input and output of the step read (no op derived).
    full = _time_pairs(step, lambda: captured((0, 1 << 40)), repeats)
    result: Dict[str, object] = {"capture_ratio": _median_ratio(times["wall"]),
                                 "capture_ratio_cpu_time": _median_ratio(times["cpu"]), "ops": ops[0],
                                 "tensors_read": read_counts[0],
                                 "confirm_full_step_ratio": _median_ratio(full["wall"]),
                                 "confirm_full_step_ratio_cpu_time": _median_ratio(full["cpu"]),
                                 "tensors_read_full_step": read_counts[1],
                                 "step_ms": round(statistics.median(a for a, _ in times["wall"]) * 1000, 1)}
    log(f"  capture {result['capture_ratio']['ratio']:.2f}x the step in wall time, "
        f"{result['capture_ratio_cpu_time']['ratio']:.2f}x in CPU time ({ops[0]} ops, {read_counts[0]} tensors read, "
        f"step {result['step_ms']} ms); the confirming pass reading the whole step "
        f"{result['confirm_full_step_ratio']['ratio']:.2f}x ({read_counts[1]} tensors read)")
    return result


def _speeds(cases: Dict[str, Callable[[], None]], repeats: int, nbytes: int) -> Dict[str, Dict[str, float]]:
    """GB/s (wall and CPU time) and ms of each case over ``nbytes``: medians of interleaved calls, after one warm-up."""
    times: Dict[str, Dict[str, List[float]]] = {name: {"wall": [], "cpu": []} for name in cases}
    for fn in cases.values():
        fn()
    for _ in range(repeats):
        for name, fn in cases.items():
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            times[name]["wall"].append(time.perf_counter() - wall)
            times[name]["cpu"].append(time.process_time() - cpu)
    speeds: Dict[str, Dict[str, float]] = {}
    for name, t in times.items():
        wall, cpu = statistics.median(t["wall"]), statistics.median(t["cpu"])
        speeds[name] = {"gb_per_s": round(nbytes / wall / 1e9, 2), "gb_per_s_cpu_time": round(nbytes / cpu / 1e9, 2),
                        "ms": round(wall * 1e3, 2)}
    return speeds


def _digest_from_memory(repeats: int, megabytes: int = 256) -> Dict[str, float]:
    """The digest and a plain sum over one tensor far larger than any CPU cache (memory bandwidth, not a cache's),
    at torch's default thread count."""
    from yolo_det.record.digest import Digester

    big = torch.randn(megabytes << 18, generator=torch.Generator().manual_seed(0))
    digester, hint = Digester(), ("bench-memory", big.data_ptr())
    speed = _speeds({"sum": lambda: big.sum().item(),
                     "digest": lambda: digester.digest([big], hint, stable=1).sum().item()}, repeats, big.numel() * 4)
    return {"megabytes": megabytes, "sum_gb_per_s": speed["sum"]["gb_per_s"],
            "digest_gb_per_s": speed["digest"]["gb_per_s"],
            "digest_over_sum": round(speed["sum"]["gb_per_s"] / speed["digest"]["gb_per_s"], 2)}


def bench_digest(repeats: int, log: Callable[[str], None]) -> Dict[str, object]:
    """The digest kernel's speed in GB/s over what a fingerprinted yolov5n step digests (parameters,
    gradients and EMA: three copies of the state), next to a plain ``sum`` over the same bytes (the
    machine's memory speed) and the previous digest's int8 GEMM (``bytes-intmm-v1``'s row sums) of the same
    bytes. Wall and CPU time, medians of interleaved calls, at torch's default thread count."""
    from yolo_det.record.digest import ROW, Digester, StreamDigests
    from yolo_det.record.digest import weights as digest_weights

    with _quiet_yolov5():
        model, _ = _yolov5n()
    state = [t.detach() for t in model.state_dict().values() if t.is_floating_point()]
    tensors = [t.clone() for _ in range(3) for t in state]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    flat = torch.cat([t.reshape(-1) for t in tensors])
    digester, hint = Digester(), ("bench", tuple(t.data_ptr() for t in tensors))
    rows = -(-nbytes // ROW)
    matrix = torch.zeros(rows * ROW, dtype=torch.int8)
    matrix[:nbytes] = flat.view(torch.int8)
    matrix = matrix.view(rows, ROW)
    weights = torch.ones((ROW, 8), dtype=torch.int8)

    def stream() -> None:
        digests = StreamDigests()
        for t in tensors:
            digests.add(t)
        digests.resolve()

    cases: Dict[str, Callable[[], None]] = {
        "sum": lambda: flat.sum().item(),
        "digest": lambda: digester.digest(tensors, hint, stable=len(tensors)).sum().item(),
        "capture_reads": stream,
    }
    if hasattr(torch, "_int_mm"):
        cases["previous_intmm_gemm"] = lambda: torch._int_mm(matrix, weights).sum().item()
    w, v = torch.from_numpy(digest_weights())
    words, sums = matrix.view(torch.int64), torch.empty(rows, dtype=torch.int64)

    def torch_mv() -> None:  # the same row sums as torch int64 matrix-vector products (the kernel until 2026-12-02)
        for r in range(0, rows, 1024):
            block, out = words[r:r + 1024], sums[r:r + 1024]
            torch.mv(block, w, out=out)
            out.addmv_(torch.bitwise_right_shift(block, 32), v)
        sums.sum().item()

    cases["previous_torch_mv"] = torch_mv

    def timed(threads: int) -> Dict[str, Dict[str, float]]:
        """:func:`_speeds` at ``threads`` torch threads (the digest's host kernel follows them)."""
        default = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return _speeds(cases, repeats, nbytes)
        finally:
            torch.set_num_threads(default)

    out: Dict[str, object] = {"megabytes": round(nbytes / 1e6, 1), "tensors": len(tensors)}
    out.update(timed(torch.get_num_threads()))
    out["from_memory"] = _digest_from_memory(max(repeats // 2, 3))
    one = timed(1)  # stable when another process loads the machine (no thread waits for a busy core)
    one["digest_over_sum"] = round(one["sum"]["gb_per_s"] / one["digest"]["gb_per_s"], 2)  # type: ignore[assignment]
    out["one_thread"] = one
    out["digest_over_sum"] = round(out["sum"]["gb_per_s"] / out["digest"]["gb_per_s"], 2)
    log(f"  digest {out['digest']['gb_per_s']} GB/s, plain sum {out['sum']['gb_per_s']} GB/s "
        f"({out['digest_over_sum']}x), capture's batched reads {out['capture_reads']['gb_per_s']} GB/s"
        + (f", previous int8 GEMM {out['previous_intmm_gemm']['gb_per_s']} GB/s" if "previous_intmm_gemm" in out
           else "") + f", the same row sums as torch.mv {out['previous_torch_mv']['gb_per_s']} GB/s"
        + f" ({out['megabytes']} MB in {len(tensors)} tensors); at 1 thread: digest {one['digest']['gb_per_s']} GB/s, "
        f"sum {one['sum']['gb_per_s']} GB/s ({one['digest_over_sum']}x), torch.mv {one['previous_torch_mv']['gb_per_s']}"
        f" GB/s; over {out['from_memory']['megabytes']} MB from memory: digest {out['from_memory']['digest_gb_per_s']}"
        f" GB/s, sum {out['from_memory']['sum_gb_per_s']} GB/s ({out['from_memory']['digest_over_sum']}x)")
    return out


def _time_pairs(a: Callable[[], None], b: Callable[[], None], repeats: int) -> Dict[str, List[tuple]]:
    """Per round, (a, b) in wall seconds and in this process's CPU seconds (less hurt by other
    processes on a shared machine), alternating which runs first, after one warm-up each."""
    a()
    b()
    pairs: Dict[str, List[tuple]] = {"wall": [], "cpu": []}
    for r in range(repeats):
        took: Dict[Callable[[], None], tuple] = {}
        for fn in ((a, b) if r % 2 == 0 else (b, a)):
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            took[fn] = (time.perf_counter() - wall, time.process_time() - cpu)
        pairs["wall"].append((took[a][0], took[b][0]))
        pairs["cpu"].append((took[a][1], took[b][1]))
    return pairs


def _time_interleaved(fns: List[Callable[[], None]], repeats: int) -> List[float]:
    """Median seconds of each fn, calls interleaved round-robin after one warm-up call each."""
    for fn in fns:
        fn()
    samples: List[List[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            samples[i].append(time.perf_counter() - start)
    return [statistics.median(s) for s in samples]


def _ratios_by_threads(case, x: torch.Tensor, repeats: int) -> Dict[str, object]:
    """A replacement's forward+backward time against the native op's, interleaved, at torch's
    default thread count and at 1 thread (``ratio``, ``ratio_1_thread`` and the raw times)."""
    def run(fn):
        x.grad = None
        fn(x).sum().backward()

    default_threads = torch.get_num_threads()
    entry: Dict[str, object] = {}
    for threads in sorted({default_threads, 1}, reverse=True):
        torch.set_num_threads(threads)
        native_s, repl_s = _time_interleaved([lambda: run(case.native), lambda: run(case.replacement)], repeats)
        entry[f"threads_{threads}"] = {"ratio": round(repl_s / native_s, 3), "native_ms": round(native_s * 1000, 3),
                                       "replacement_ms": round(repl_s * 1000, 3)}
    torch.set_num_threads(default_threads)
    entry["ratio"] = entry[f"threads_{default_threads}"]["ratio"]
    entry["ratio_1_thread"] = entry["threads_1"]["ratio"]
    return entry


def bench_replacements(repeats: int, log: Callable[[str], None]) -> Dict[str, object]:
    """Each replacement vs its native op, at torch's default thread count and at 1 thread.

    Multi-op replacements suffer more than one fused native kernel when another process
    competes for the cores (each threaded op waits for its second thread); the 1-thread ratio
    is stable under load, the default-thread one shows what a quiet machine gives.
    """
    from yolo_det.strict.swap import benchmark_cases

    default_threads = torch.get_num_threads()
    out: Dict[str, object] = {}
    for case in benchmark_cases():
        x = case.make_input()
        entry: Dict[str, object] = {"input": list(x.shape)}
        entry.update(_ratios_by_threads(case, x, repeats))
        out[case.name] = entry
        log(f"  {case.name:<48} {entry['ratio']:.3f}x ({default_threads} threads), {entry['ratio_1_thread']:.3f}x (1 thread)")
    return out


def bench_opaque(repeats: int, log: Callable[[str], None]) -> Dict[str, object]:
    """Each stand-in for an opaque kernel (flash-attn, deformable attention, roi_align): its
    numbers against what runs without it (largest output and input-gradient difference, float32)
    and its forward+backward time ratio, at the default thread count and at 1 thread."""
    from yolo_det.strict.opaque_replacements import benchmark_cases

    default_threads = torch.get_num_threads()
    out: Dict[str, object] = {}
    for case in benchmark_cases():
        x = case.make_input()
        grads = []
        for fn in (case.native, case.replacement):
            x.grad = None
            y = fn(x)
            y.backward(torch.ones_like(y))
            grads.append((y.detach(), x.grad.detach().clone()))
        (y0, g0), (y1, g1) = grads
        entry: Dict[str, object] = {"input": list(x.shape),
                                    "max_abs_output_diff": float((y0 - y1).abs().max()),
                                    "max_abs_grad_diff": float((g0 - g1).abs().max()),
                                    "grad_scale": float(g0.abs().max())}
        entry.update(_ratios_by_threads(case, x, repeats))
        out[case.name] = entry
        log(f"  {case.name:<66} {entry['ratio']:.3f}x ({default_threads} threads), {entry['ratio_1_thread']:.3f}x "
            f"(1 thread); max diff output {entry['max_abs_output_diff']:.2e}, grad {entry['max_abs_grad_diff']:.2e}")
    return out


def bench_apply_patch(repeats: int) -> Dict[str, object]:
    import yolov5

    from yolo_det.patch import apply_patch

    package = Path(yolov5.__file__).parent
    seconds = []
    with tempfile.TemporaryDirectory(prefix="yolo-det-bench-") as tmp:
        for i in range(repeats):
            repo = Path(tmp) / f"copy{i}"
            shutil.copytree(package, repo, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            start = time.perf_counter()
            apply_patch(repo)
            seconds.append(time.perf_counter() - start)
    return {"seconds": round(statistics.median(seconds), 3), "max": round(max(seconds), 3), "repeats": repeats}


_PEAK = """
import atexit, runpy, sys
out = sys.argv[1]
def _peak():  # VmHWM: this process's own peak RSS (ru_maxrss would include the forking parent's)
    kb = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    open(out, "w").write(kb)
atexit.register(_peak)
sys.argv = ["yolo-det"] + sys.argv[2:]
runpy.run_module("yolo_det", run_name="__main__", alter_sys=True)
"""


def _process(cmd: List[str], cwd: Path = ROOT) -> tuple:
    """(wall seconds, peak RSS in MB, exit code) of one whole ``yolo-det`` process (this checkout)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.NamedTemporaryFile("r", suffix=".peak") as peak:
        start = time.perf_counter()
        code = subprocess.call([sys.executable, "-c", _PEAK, peak.name, *cmd], cwd=cwd, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - start
        text = Path(peak.name).read_text().strip()
    return seconds, int(text) / 1024 if text else float("nan"), code


def _write_big_log(path: Path, megabytes: int) -> int:
    """A yolov5n-sized fingerprint log (~650 tensors per kind) of about ``megabytes`` MB; its step count."""
    from yolo_det.record.log import LogWriter

    names = [f"model.{i}.conv.weight" for i in range(650)]
    kinds = {kind: (names, "0123456789abcdef" * 2 * len(names)) for kind in ("grad", "param", "ema")}
    kinds["data"] = (["batch0[0]", "batch0[1]", "batch0[2]", "batch0[3]"], "ab" * 64)
    writer = LogWriter(path, {"torch": torch.__version__, "rank": 0, "world_size": 1, "command": ["bench"]})
    step = 0
    while path.stat().st_size < megabytes * 2**20:
        step += 1
        writer.write_step(step, kinds, lr={"group0.lr": 0.01, "group1.lr": 0.01}, losses=[4.0 / step],
                          items=[[0.1, 0.2, 0.3]])
    writer.write_final(step, names, "0" * 32 * len(names), "finish")
    writer.close()
    return step


def bench_cli(repeats: int, log_mb: int, log: Callable[[str], None], big_lines: int = 125_000) -> Dict[str, object]:
    """Whole processes: ``--version``, ``apply-patch`` of the PyPI yolov5, ``diff`` of two large logs
    (wall seconds and peak RSS), and apply-patch of a ``big_lines``-line train.py."""
    import yolov5

    from yolo_det.patch import apply_patch

    out: Dict[str, object] = {}
    version = [_process(["--version"]) for _ in range(repeats)]
    out["version_seconds"] = round(statistics.median(v[0] for v in version), 3)
    package = Path(yolov5.__file__).parent
    with tempfile.TemporaryDirectory(prefix="yolo-det-bench-") as tmp:
        runs = []
        for i in range(repeats):
            repo = Path(tmp) / f"copy{i}"
            shutil.copytree(package, repo, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            runs.append(_process(["apply-patch", str(repo)]))
        assert all(r[2] == 0 for r in runs), runs
        out["apply_patch_process_seconds"] = round(statistics.median(r[0] for r in runs), 3)

        log(f"  writing two {log_mb} MB fingerprint logs ...")
        a, b = Path(tmp) / "a.jsonl", Path(tmp) / "b.jsonl"
        steps = _write_big_log(a, log_mb)
        shutil.copyfile(a, b)
        seconds, rss, code = _process(["diff", str(a), str(b)])
        out["diff"] = {"log_mb": round(a.stat().st_size / 2**20), "steps": steps, "seconds": round(seconds, 2),
                       "peak_rss_mb": round(rss), "exit_code": code}

        log(f"  apply-patch of a {big_lines}-line train.py ...")
        script = Path(tmp) / "big" / "train.py"
        script.parent.mkdir()
        text = (package / "train.py").read_text()
        filler = "\n\ndef helper_{0}(x, y=2):\n    if x > y:\n        return [x * k for k in range(y)]\n    return x\n"
        parts, lines, i = [text], text.count("\n"), 0
        while lines < big_lines:
            parts.append(filler.format(i))
            lines, i = lines + 6, i + 1
        script.write_text("".join(parts))
        start = time.perf_counter()
        apply_patch(script, dry_run=True)
        out["big_script"] = {"lines": lines, "seconds": round(time.perf_counter() - start, 2)}
    return out


def bench_audit() -> Dict[str, object]:
    from yolo_det.cli import main as cli_main

    start = time.perf_counter()
    with open(os.devnull, "w") as devnull:
        stdout, sys.stdout = sys.stdout, devnull
        try:
            code = cli_main(["audit", "--cfg", "yolov5s.yaml", "--imgsz", "256", "--json"])
        finally:
            sys.stdout = stdout
    return {"seconds": round(time.perf_counter() - start, 2), "exit_code": code, "model": "yolov5s", "imgsz": 256}


def bench_streams(repeats: int, log: Callable[[str], None]) -> Dict[str, object]:
    """Per-sample seeding vs YOLOv5's sample loading; sidecar save vs YOLOv5's checkpoint save."""
    from copy import deepcopy

    import yaml
    import yolov5
    from yolov5.models.yolo import Model
    from yolov5.utils.dataloaders import LoadImagesAndLabels
    from yolov5.utils.torch_utils import ModelEMA

    from yolo_det.core.streams import seed_sample
    from yolo_det.integrations import resume

    out: Dict[str, object] = {}
    package = Path(yolov5.__file__).parent
    hyp = yaml.safe_load((package / "data" / "hyps" / "hyp.scratch-low.yaml").read_text())
    with tempfile.TemporaryDirectory(prefix="yolo-det-bench-streams-") as tmp:
        for imgsz in (640, 128):
            data = make_dataset(Path(tmp) / f"d{imgsz}", n_train=16, n_val=2, imgsz=imgsz)
            train = yaml.safe_load(Path(data).read_text())
            root = Path(train.get("path", Path(data).parent))
            dataset = LoadImagesAndLabels(str(root / train["train"]), imgsz, 8, augment=True, hyp=hyp)
            state = {"i": 0}

            def load() -> None:
                for _ in range(8):
                    dataset[state["i"] % len(dataset)]
                    state["i"] += 1

            def seed() -> None:
                for _ in range(8):
                    seed_sample(0, 1, state["i"] % len(dataset), len(dataset))
                    state["i"] += 1

            load_s, seed_s = _time_interleaved([load, seed], repeats)
            out[f"seeding_fraction_{imgsz}px"] = round(seed_s / load_s, 5)
            log(f"  {imgsz} px: loading a batch of 8 {load_s * 1e3:.2f} ms, seeding it {seed_s * 1e6:.1f} us")
        with torch.no_grad():
            model = Model(str(package / "models" / "yolov5n.yaml"), ch=3, nc=80)
        ema = ModelEMA(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        model(torch.zeros(1, 3, 64, 64))[0].sum().backward()
        optimizer.step()
        last = Path(tmp) / "last.pt"
        writer = resume.Writer()

        def release_save() -> None:
            ckpt = {"epoch": 1, "best_fitness": 0.0, "model": deepcopy(model).half(), "ema": deepcopy(ema.ema).half(),
                    "updates": ema.updates, "optimizer": optimizer.state_dict(), "opt": {}, "date": "now"}
            torch.save(ckpt, last)

        def sidecar(background: bool) -> Callable[[], None]:
            def save() -> None:
                state = resume.capture(epoch=1, next_epoch=2, model=model, ema=ema.ema, ema_updates=ema.updates,
                                       checkpoint=last, reuse=writer.last)
                writer.write(resume.sidecar_path(last), state, background=background)
            return save

        times = []
        for _ in range(max(repeats // 2, 3) + 1):  # interleaved: release, sidecar (blocking part), sidecar (sync)
            row = []
            for fn in (release_save, sidecar(True), sidecar(False)):
                writer.wait()
                start = time.perf_counter()
                fn()
                row.append(time.perf_counter() - start)
            times.append(row)
        writer.wait()
        times = times[1:]  # the first round warms up
        release_s, blocking_s, full_s = (statistics.median(t[i] for t in times) for i in range(3))
        out["sidecar_blocking_vs_release_save"] = round(blocking_s / release_s, 4)
        out["sidecar_full_write_vs_release_save"] = round(full_s / release_s, 4)
        log(f"  release last.pt save {release_s * 1e3:.1f} ms; sidecar blocks {blocking_s * 1e3:.1f} ms, "
            f"full write {full_s * 1e3:.1f} ms")
    return out


def bench_world(repeats: int, log: Callable[[str], None]) -> Dict[str, object]:
    """V micro-batches in one process vs one batch of B; partial-sum memory; hook bytes vs ring all-reduce."""
    from yolov5.utils.loss import ComputeLoss

    from yolo_det.world import WorldEngine, WorldPlan, split_targets

    with _quiet_yolov5():
        model, hyp = _yolov5n()
    model.hyp = hyp
    model.train()
    compute = ComputeLoss(model)
    batch, size = 16, 128
    g = torch.Generator().manual_seed(0)
    imgs = torch.rand(batch, 3, size, size, generator=g)
    targets = torch.cat([torch.arange(batch).repeat_interleave(2)[:, None].float(),
                         torch.randint(0, 2, (2 * batch, 1), generator=g).float(),
                         torch.rand(2 * batch, 2, generator=g) * 0.6 + 0.2,
                         torch.rand(2 * batch, 2, generator=g) * 0.3 + 0.05], 1)

    def split(lo: int, hi: int) -> torch.Tensor:
        return split_targets(targets, lo, hi)

    def one_batch() -> None:
        model.zero_grad(set_to_none=True)
        loss, _ = compute(model(imgs), targets)
        loss.backward()

    engines = {v: WorldEngine(model, WorldPlan(v, 1, 0, batch)) for v in (2, 4, 8)}

    def virtual(v: int) -> Callable[[], None]:
        def run() -> None:
            model.zero_grad(set_to_none=True)
            engine = engines[v]
            for mb in engine.micro_batches(batch):
                loss, _ = compute(model(imgs[mb.slice]), split(mb.slice.start, mb.slice.stop))
                (loss * engine.loss_scale).backward()
        return run

    def plain_micro_batches() -> None:  # the same 4 micro-batches, gradients accumulated by autograd: no engine
        model.zero_grad(set_to_none=True)
        for lo in range(0, batch, batch // 4):
            loss, _ = compute(model(imgs[lo:lo + batch // 4]), split(lo, lo + batch // 4))
            (loss * 4).backward()

    out: Dict[str, object] = {"model": "yolov5n", "imgsz": size, "batch": batch}
    fns = [one_batch, virtual(4), plain_micro_batches, virtual(8)]
    times = _time_interleaved(fns, repeats)
    out["step_ratio_V4_vs_one_batch"] = round(times[1] / times[0], 3)
    out["step_ratio_V8_vs_one_batch"] = round(times[3] / times[0], 3)
    out["engine_overhead_ratio_V4"] = round(times[1] / times[2], 3)
    virtual(2)()
    for v in (2, 4, 8):
        out[f"partial_sum_peak_copies_V{v}_N1"] = engines[v].memory_peak()
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    out["gradient_mb"] = round(grad_bytes / 2**20, 2)
    for n in (2, 4, 8):  # per rank and batch: all-to-all sends (N-1)/N, all-gather (N-1)/N; a ring 2(N-1)/N
        chunk = -(-grad_bytes // 4 // n) * 4
        out[f"hook_bytes_over_ring_allreduce_N{n}"] = round(2 * (n - 1) * chunk / (2 * (n - 1) / n * grad_bytes), 4)
    log(f"  world: {out}")
    return out


PORTABLE_CHILD = r'''
import contextlib, io, json, sys, time, warnings
from pathlib import Path
import torch, yaml
import yolo_det
steps, size, batch = (int(a) for a in sys.argv[1:4])
session = yolo_det.configure("strict", seed=0)
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import yolov5
    from yolov5.models.yolo import Model
    from yolov5.utils.loss import ComputeLoss
    package = Path(yolov5.__file__).parent
    model = Model(str(package / "models" / "yolov5n.yaml"), nc=2)
model.hyp = yaml.safe_load((package / "data" / "hyps" / "hyp.scratch-low.yaml").read_text())
model.train()
session.track(model)
compute = ComputeLoss(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
g = torch.Generator().manual_seed(0)
imgs = torch.rand(batch, 3, size, size, generator=g)
targets = torch.cat([torch.arange(batch).repeat_interleave(2)[:, None].float(),
                     torch.randint(0, 2, (2 * batch, 1), generator=g).float(),
                     torch.rand(2 * batch, 2, generator=g) * 0.6 + 0.2, torch.rand(2 * batch, 2, generator=g) * 0.3 + 0.05], 1)
times, cpu = [], []
for _ in range(steps + 1):  # the first step warms the kernels up: not counted
    start, start_cpu = time.perf_counter(), time.process_time()
    loss, _ = compute(model(imgs), targets)
    with session.backward():
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    times.append(time.perf_counter() - start)
    cpu.append(time.process_time() - start_cpu)
session.finish(echo=lambda _: None)
print(json.dumps({"times": times[1:], "cpu": cpu[1:], "threads": torch.get_num_threads(),
                  "aten": torch.backends.cpu.get_cpu_capability(), "portable": session.portable}))
'''


def bench_portable(rounds: int, steps: int, log: Callable[[str], None]) -> Dict[str, object]:
    """portable vs strict step time (yolov5n, 128 px, batch 16), each variant its own process (the pins hold for a
    whole process), the variants interleaved round by round; a ratio is of the medians of one round, then the
    median over rounds."""
    from yolo_det.core import env_names, machine as machine_facts, portable
    from yolo_det.integrations import launch

    drop = set(machine_facts.DISPATCH_VARS) | set(portable.THREAD_VARS) | {env_names.PORTABLE}
    base = {k: v for k, v in os.environ.items() if k not in drop}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [base.get("PYTHONPATH", "")] if p])
    default_threads = torch.get_num_threads()

    def env_of(pin: Optional[int], threads: Optional[int]) -> Dict[str, str]:
        env = dict(base)
        if threads is not None:
            env.update({var: str(threads) for var in portable.THREAD_VARS})
        if pin is not None:
            env[env_names.PORTABLE] = str(pin)
            env.update(launch.child_env(env))
        return env

    variants = {"strict": env_of(None, None), "strict_1_thread": env_of(None, 1), "portable": env_of(1, None),
                f"portable_{default_threads}_threads": env_of(default_threads, None)}
    medians: Dict[str, List[float]] = {name: [] for name in variants}
    cpu: Dict[str, List[float]] = {name: [] for name in variants}
    facts: Dict[str, object] = {}
    for _ in range(rounds):
        for name, env in variants.items():
            done = subprocess.run([sys.executable, "-c", PORTABLE_CHILD, str(steps), "128", "16"], env=env, cwd=ROOT,
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"portable bench, {name}: {done.stderr[-2000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            medians[name].append(statistics.median(result["times"]))
            cpu[name].append(statistics.median(result["cpu"]))
            facts[name] = {"threads": result["threads"], "aten": result["aten"],
                           "problems": (result["portable"] or {}).get("problems")}
    out: Dict[str, object] = {"model": "yolov5n", "imgsz": 128, "batch": 16, "steps": steps, "rounds": rounds,
                              "variants": facts,
                              "step_seconds": {k: round(statistics.median(v), 4) for k, v in medians.items()},
                              "step_cpu_seconds": {k: round(statistics.median(v), 4) for k, v in cpu.items()}}

    def ratio(a: str, b: str) -> Dict[str, float]:
        return _median_ratio(list(zip(medians[a], medians[b])))

    out["portable_vs_strict_ratio"] = ratio("strict", "portable")
    out["portable_vs_strict_1_thread_ratio"] = ratio("strict_1_thread", "portable")
    # CPU seconds of one thread against one thread: the pins' own cost, robust where other work shares the cores
    out["portable_vs_strict_1_thread_cpu_ratio"] = _median_ratio(list(zip(cpu["strict_1_thread"], cpu["portable"])))
    out[f"portable_{default_threads}_threads_vs_strict_ratio"] = ratio("strict", f"portable_{default_threads}_threads")
    log(f"  portable: {out}")
    return out


def bench_compile(repeats: int, log: Callable[[str], None], model_name: str = "yolov8n.yaml",
                  size: int = 128, batch: int = 8) -> Dict[str, object]:
    """torch.compile (Inductor) training steps: compiled strict vs compiled default vs eager strict, step time
    interleaved (forward + backward of an Ultralytics detection model), compile time (first step) separately."""
    from ultralytics.nn.tasks import DetectionModel

    from yolo_det.core import determinism

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        with contextlib.redirect_stdout(io.StringIO()):
            model = DetectionModel(model_name, nc=2, verbose=False)
        return model.train()

    imgs = torch.rand(batch, 3, size, size, generator=torch.Generator().manual_seed(0))

    def step(model: Callable, mode: str) -> Callable[[], None]:
        params = [p for p in getattr(model, "_orig_mod", model).parameters()]

        def run() -> None:
            with determinism.temporary_determinism(mode):
                for p in params:
                    p.grad = None
                sum(t.float().square().mean() for t in tensors_in(model(imgs))).backward()
        return run

    from torch._dynamo.utils import counters

    out: Dict[str, object] = {"model": model_name, "imgsz": size, "batch": batch}
    torch._dynamo.reset()
    default_model = torch.compile(build())  # no session: Inductor's defaults, PyTorch's determinism off
    default_step = step(default_model, "off")
    t0 = time.perf_counter()
    default_step()
    out["compile_seconds_default"] = round(time.perf_counter() - t0, 1)
    # Timed inside the session: a model compiled under it is recompiled once the session ends (Dynamo's guards
    # see the session's hooks go), outside the guard's settings; the default model does not recompile under it.
    session = yolo_det.configure("strict", seed=0)  # the guard: Inductor's deterministic settings, the op scan
    try:
        strict_model = torch.compile(build())
        strict_step = step(strict_model, "strict")
        t0 = time.perf_counter()
        strict_step()
        out["compile_seconds_strict"] = round(time.perf_counter() - t0, 1)
        out["compile_section"] = {k: v for k, v in session.to_dict()["compile"].items()
                                  if k in ("settings", "graphs", "ops")}
        eager_step = step(build(), "strict")
        eager_step()
        graphs_before = counters["stats"]["unique_graphs"]
        times = _time_interleaved([strict_step, default_step, eager_step], repeats)
        out["graphs_compiled_while_timing"] = counters["stats"]["unique_graphs"] - graphs_before  # 0: as compiled
    finally:
        session.finish(echo=lambda _: None, restore_flags=True)
    out["step_seconds"] = {"compiled_strict": round(times[0], 4), "compiled_default": round(times[1], 4),
                           "eager_strict": round(times[2], 4)}
    out["step_ratio_compiled_strict_vs_compiled_default"] = round(times[0] / times[1], 3)
    out["step_ratio_compiled_strict_vs_eager_strict"] = round(times[0] / times[2], 3)
    log(f"  compile: {out}")
    return out


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


VECTOR_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")  # what the digest's speed used to hang on


def _cpu_flags() -> List[str]:
    """The CPU's vector extensions among VECTOR_FLAGS (from /proc/cpuinfo; empty where it is absent)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [f for f in VECTOR_FLAGS if f in have]
    except OSError:
        pass
    return []


def machine() -> Dict[str, object]:
    from yolo_det.core import environment

    info = environment.manifest()
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "unknown")()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": _cpu_name(),
        "cpu_flags": _cpu_flags(),
        "torch_cpu_capability": capability,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": info["python"],
        "torch": info["torch"],
        "gpus": info["gpus"],
        "packages": info["packages"],
    }


def bench_manifest(images: int, rounds: int, log: Callable[[str], None]) -> Dict[str, float]:
    """The data manifest's cost (issue 28): ``images`` tiny images with a label each (2x files), first
    build (every file read) and repeat (one stat per file), each against listing the files alone
    (what the loaders do anyway); per-file microseconds and a linear extrapolation to 100k images."""
    from yolo_det.core import data_manifest as dm

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ds"
        for split, count in (("train", images * 9 // 10), ("val", images - images * 9 // 10)):
            (root / "images" / split).mkdir(parents=True)
            (root / "labels" / split).mkdir(parents=True)
            for i in range(count):
                (root / "images" / split / f"{i:06d}.jpg").write_bytes(os.urandom(600))
                (root / "labels" / split / f"{i:06d}.txt").write_text(f"{i % 3} 0.5 0.5 0.2 0.2\n")
        data = {"path": str(root), "train": "images/train", "val": "images/val", "names": ["a", "b", "c"]}
        first, repeat, listing = [], [], []
        for r in range(rounds):
            cache = Path(tmp) / f"cache{r}"
            t0 = time.perf_counter()
            for split in ("images/train", "images/val"):
                dm.image_files(str(root / split))
            listing.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            digests = dm.DigestCache(root, cache)
            dm.from_data_yaml(data, digests=digests)
            digests.save()
            first.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            dm.from_data_yaml(data, digests=dm.DigestCache(root, cache))
            repeat.append(time.perf_counter() - t0)
            log(f"  round {r + 1}: list {listing[-1]:.2f} s, first build {first[-1]:.2f} s, repeat {repeat[-1]:.2f} s")
        big = Path(tmp) / "big" / "images"
        big.mkdir(parents=True)
        for i in range(8):
            (big / f"{i}.jpg").write_bytes(os.urandom(64 << 20))
        speeds = []
        for r in range(rounds):  # 512 MB through build(): the rate a first build reads large images at
            t0 = time.perf_counter()
            dm.build({"train": list(big.glob("*.jpg"))}, big.parent, digests=dm.DigestCache(big, Path(tmp) / f"b{r}"))
            speeds.append(512 / (time.perf_counter() - t0))
    files = 2 * images
    mb_s = statistics.median(speeds)
    med = {k: statistics.median(v) for k, v in (("first", first), ("repeat", repeat), ("listing", listing))}
    return {"images": images, "files": files, "first_seconds": round(med["first"], 3),
            "repeat_seconds": round(med["repeat"], 3), "listing_seconds": round(med["listing"], 3),
            "first_vs_listing": round(med["first"] / med["listing"], 2),
            "repeat_vs_listing": round(med["repeat"] / med["listing"], 2),
            "first_us_per_file": round(1e6 * med["first"] / files, 1),
            "repeat_us_per_file": round(1e6 * med["repeat"] / files, 1),
            "first_seconds_100k_images": round(med["first"] * 100_000 / images, 1),
            "repeat_seconds_100k_images": round(med["repeat"] * 100_000 / images, 1),
            "digest_mb_per_s": round(mb_s, 1),
            # a COCO-like first build: 100k JPEGs of ~160 kB (16 GB) read once at the measured rate (page
            # cache warm: a cold disk is slower), plus the per-file cost
            "first_seconds_100k_coco_like": round(100_000 * 0.16 / mb_s + med["first"] * 100_000 / images, 1)}


def bench_parity(repeats: int, images: int, imgsz: int, log: Callable[[str], None]) -> Dict[str, object]:
    """``yolo-det parity`` of an ONNX export against one ``yolo val`` of that export on the same images (issue 38,
    target <= 2x): a 2-class yolov8n (untrained: time does not depend on training), both interleaved, medians."""
    import contextlib
    import io

    import torch
    from ultralytics import YOLO

    from yolo_det.evaluation.parity import check
    from yolo_det.integrations.ultralytics.export import export
    from yolo_det.synthetic import make_dataset

    with tempfile.TemporaryDirectory() as tmp:
        data = make_dataset(Path(tmp) / "data", n_train=1, n_val=images, imgsz=imgsz)
        torch.manual_seed(0)
        yolo = YOLO("yolov8n.yaml")
        yolo.model = type(yolo.model)("yolov8n.yaml", nc=2, verbose=False)
        yolo.model.names = {0: "rect", 1: "ellipse"}
        pt = Path(tmp) / "m.pt"
        yolo.save(str(pt))
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            onnx_file, _ = export(pt, format="onnx", imgsz=imgsz)
        def run_parity():
            check(pt, onnx_file, data, max_images=images)
        def run_val():
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                YOLO(str(onnx_file), task="detect").val(data=str(data), imgsz=imgsz, batch=1, plots=False,
                                                          workers=0, project=tmp, name="val", exist_ok=True,
                                                          verbose=False)
        pairs = _time_pairs(run_val, run_parity, repeats)  # ratio = parity / val
        ratio, cpu = _median_ratio(pairs["wall"]), _median_ratio(pairs["cpu"])
        log(f"  parity / yolo val of the export: {ratio['ratio']:.2f}x wall, {cpu['ratio']:.2f}x CPU "
            f"({images} images, {imgsz} px)")
        return {"images": images, "imgsz": imgsz, "parity_vs_val_ratio": ratio, "parity_vs_val_cpu_ratio": cpu,
                "val_seconds": round(statistics.median(a for a, _ in pairs["wall"]), 3),
                "parity_seconds": round(statistics.median(b for _, b in pairs["wall"]), 3), "target": "<= 2"}


_V5_BUILD_AND_EXPORT = """
import runpy, sys, torch
from models.yolo import Model
torch.manual_seed(0)
model = Model('models/yolov5n.yaml')
with torch.no_grad():  # objectness and class biases spread, so a random model's boxes pass conf 0.001
    for conv in model.model[-1].m:
        conv.bias.view(model.model[-1].na, -1)[:, 4:].normal_(-1.0, 1.0)
torch.save({'model': model.half(), 'ema': None, 'epoch': -1}, sys.argv[1])
sys.argv = ['export.py', '--weights', sys.argv[1], '--include', 'onnx', '--imgsz', sys.argv[2]]
runpy.run_path('export.py', run_name='__main__')
"""


def bench_export_errors(images: int, imgsz: int, log: Callable[[str], None]) -> Dict[str, object]:
    """Raw-output errors of each export format against its .pt (issue 38's per-format table): yolov5n, yolov8n,
    yolo11n, yolo26n built from their YAML (80 classes, random init: no released weights offline), exported to
    ONNX fp32/fp16 and OpenVINO fp32/fp16, compared by ``yolo-det parity`` on synthetic images."""
    from ultralytics import YOLO

    from yolo_det.evaluation.parity import check
    from yolo_det.integrations.ultralytics.export import export
    from yolo_det.patch import apply_patch

    formats = {"onnx fp32": {"format": "onnx"}, "onnx fp16": {"format": "onnx", "quantize": 16},
               "openvino fp32": {"format": "openvino"}, "openvino fp16": {"format": "openvino", "quantize": 16}}
    rows: List[Dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = make_dataset(root / "data", n_train=1, n_val=images, imgsz=imgsz)
        artifacts: Dict[Tuple[str, str], Tuple[Path, Path, str]] = {}
        # YOLOv5: the release's own export.py (patched tree) for ONNX fp32; its fp16 ONNX needs CUDA and its OpenVINO
        # export the removed `mo` tool, so those three are converted from that ONNX with the converters Ultralytics
        # uses on CPU (onnxruntime float16, keep_io_types; openvino.convert_model, compress_to_fp16)
        import yolov5

        tree = root / "yolov5"
        shutil.copytree(Path(yolov5.__file__).parent, tree, ignore=shutil.ignore_patterns("__pycache__"))
        apply_patch(tree)
        pt = root / "v5" / "yolov5n.pt"
        pt.parent.mkdir()
        env = {**offline_env(root / "config"), "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", _V5_BUILD_AND_EXPORT, str(pt), str(imgsz)], cwd=tree, env=env,
                              capture_output=True, text=True, timeout=900)
        if done.returncode:
            raise RuntimeError(f"YOLOv5 export.py failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        os.environ["YOLOV5_REPO"] = str(tree)
        onnx_fp32 = pt.with_suffix(".onnx")
        artifacts[("yolov5n", "onnx fp32")] = (pt, onnx_fp32, "YOLOv5 export.py")
        import onnx
        import openvino as ov
        from onnxruntime.transformers import float16

        half = root / "v5" / "fp16" / "yolov5n.onnx"
        half.parent.mkdir()
        onnx.save(float16.convert_float_to_float16(onnx.load(str(onnx_fp32)), keep_io_types=True), str(half))
        artifacts[("yolov5n", "onnx fp16")] = (pt, half, "export.py ONNX, onnxruntime float16")
        for label, compress in (("openvino fp32", False), ("openvino fp16", True)):
            folder = root / "v5" / label.replace(" ", "-")
            folder.mkdir()
            ov.save_model(ov.convert_model(str(onnx_fp32)), str(folder / "yolov5n.xml"), compress_to_fp16=compress)
            artifacts[("yolov5n", label)] = (pt, folder, "export.py ONNX, openvino.convert_model")
        for name in ("yolov8n", "yolo11n", "yolo26n"):
            torch.manual_seed(0)
            pt = root / name / f"{name}.pt"
            pt.parent.mkdir()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                yolo = YOLO(f"{name}.yaml")
                head = yolo.model.model[-1]  # class biases spread, so a random model's boxes pass conf 0.001
                for seq in list(head.cv3) + list(getattr(head, "one2one_cv3", None) or []):
                    torch.nn.init.normal_(seq[-1].bias, -1.0, 1.0)
                yolo.save(str(pt))
            for label, kwargs in formats.items():
                copy = root / name / label.replace(" ", "-") / pt.name
                copy.parent.mkdir()
                shutil.copy(pt, copy)
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    artifact, _ = export(copy, imgsz=imgsz, **kwargs)
                artifacts[(name, label)] = (copy, artifact, "Ultralytics export")
        for (name, label), (model, artifact, how) in sorted(artifacts.items()):
            report = check(model, artifact, data, max_images=images)
            raw = report.raw[0] if report.raw else {}
            rows.append({"model": name, "format": label, "exported_by": how, "output_shape": raw.get("shape"),
                         "where_abs": raw.get("where_abs"), "where_rel": raw.get("where_rel"),
                         "max_abs_error": raw.get("max_abs"), "max_rel_error": raw.get("max_rel"),
                         "within_fp32_tolerance": raw.get("within"),
                         "other_outputs": [{k: r[k] for k in ("output", "shape", "max_abs", "max_rel", "within")}
                                           for r in report.raw[1:]],
                         "boxes": {k: report.boxes.get(k) for k in ("matched", "only_pt", "only_export")},
                         "verdict": report.verdict, "causes": [c["cause"] for c in report.causes]})
            log(f"  {name:8s} {label:14s} max abs {raw.get('max_abs', float('nan')):.3g}  max rel "
                f"{raw.get('max_rel', float('nan')):.3g}  boxes {report.boxes.get('matched')}/"
                f"{report.boxes.get('only_pt')}/{report.boxes.get('only_export')}  {report.verdict}")
    return {"images": images, "imgsz": imgsz,
            "weights": "random init from each model's YAML (80 classes, seed 0), class (and YOLOv5 objectness) biases "
                       "drawn from N(-1, 1) so boxes pass conf 0.001; no trained weights offline",
            "rows": rows}


def _bench_log(path: Path, steps: int, diverge: int = 0) -> Path:
    """A fingerprint log of ``steps`` steps (two tensors a kind, a loss a step with a spike), written directly."""
    from yolo_det.record.log import LogWriter

    writer = LogWriter(path, {"yolo_det": yolo_det.__version__, "torch": torch.__version__, "rank": 0,
                              "world_size": 1, "command": ["train.py"], "mode": "strict"})
    for step in range(1, steps + 1):
        grad = ("1" if diverge and step >= diverge else "0") * 32
        writer.write_step(step, {"grad": (["w", "b"], grad + "f" * 32), "param": (["w", "b"], "a" * 64)},
                          lr={"group0.lr": 0.01}, losses=[4.0 - step / steps + (5.0 if step == steps * 7 // 9 else 0)])
    writer.write_final(steps, ["model.w"], "c" * 32, "finish")
    writer.close()
    return path


def bench_report(steps: int, rounds: int, log: Callable[[str], None]) -> Dict[str, object]:
    """``yolo-det report`` of one ``steps``-step log and of two diverging ``steps / 2``-step logs (and of a tenth of
    those steps): seconds (median of ``rounds``, in-process), page bytes, ``<rect>`` count, and the time over that of
    reading the log alone."""
    from yolo_det.record.log import LogReader
    from yolo_det.reports.page import write_report

    out: Dict[str, object] = {"steps": steps}
    with tempfile.TemporaryDirectory(prefix="yolo-det-bench-") as tmp:
        for n in (steps // 10, steps):
            one = _bench_log(Path(tmp) / f"one{n}.jsonl", n)
            a, b = _bench_log(Path(tmp) / f"a{n}.jsonl", n // 2), _bench_log(Path(tmp) / f"b{n}.jsonl", n // 2, n // 7)
            for name, inputs in ((f"log_{n}", [one]), (f"two_logs_{n // 2}", [a, b])):
                times, reads = [], []
                page = Path(tmp) / f"{name}.html"
                for _ in range(rounds):  # interleaved: the report, then reading its logs alone
                    start = time.perf_counter()
                    write_report(inputs, page)
                    times.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    for path in inputs:
                        with LogReader(path) as reader:
                            for _ in reader:
                                pass
                    reads.append(time.perf_counter() - start)
                text = page.read_text(encoding="utf-8")
                out[name] = {"seconds": statistics.median(times), "bytes": len(text.encode()),
                             "rects": text.count("<rect"), "ratio_to_reading": statistics.median(times) /
                             max(statistics.median(reads), 1e-9)}
                log(f"  report of {name.replace('_', ' ')} steps: {out[name]['seconds']:.2f} s, "
                    f"{out[name]['bytes'] / 1e3:.0f} kB, {out[name]['rects']} rects, "
                    f"{out[name]['ratio_to_reading']:.2f}x reading the log(s) alone")
    big, small = out[f"log_{steps}"], out[f"log_{steps // 10}"]
    out["bytes_ratio_10x_steps"] = big["bytes"] / small["bytes"]
    return out


def table(results: Dict[str, object]) -> str:
    rows = [("metric", "value", "target")]
    if "report" in results:
        r = results["report"]
        n = r["steps"]
        for name in (f"log_{n}", f"two_logs_{n // 2}"):
            rows.append((f"report of {name.replace('_', ' ')} steps: seconds, kB, x reading alone",
                         f"{r[name]['seconds']:.2f} s, {r[name]['bytes'] / 1e3:.0f} kB, "
                         f"{r[name]['ratio_to_reading']:.2f}x", "page < 2000 kB"))
        rows.append(("report page bytes, 10x the steps", f"{r['bytes_ratio_10x_steps']:.2f}x", "about 1"))
    for name, r in results.get("sidecar", {}).items():
        for key, v in r.items():
            if isinstance(v, dict):
                rows.append((f"sidecar {name} {key.replace('_', ' ')}: bytes per parameter",
                             f"{v['bytes_per_parameter']:.2f} ({v['bytes'] / 1e6:.1f} MB)", "(report)"))
    if "parity" in results:
        r = results["parity"]
        rows.append((f"parity_vs_val_ratio ({r['images']} images, {r['imgsz']} px)",
                     f"{r['parity_vs_val_ratio']['ratio']:.2f} wall, {r['parity_vs_val_cpu_ratio']['ratio']:.2f} CPU",
                     "<= 2"))
    for r in results.get("export_errors", {}).get("rows", []):
        rows.append((f"export error {r['model']} {r['format']}", f"max abs {r['max_abs_error']:.3g}, max rel "
                     f"{r['max_rel_error']:.3g}" if r["max_abs_error"] is not None else "not comparable", "(report)"))
    train = results.get("training", {})
    for key, label, target in (
            ("patch_overhead_ratio", "train.py runs", "<= 1.01"),
            ("fingerprint_overhead_ratio", "train.py runs in YOLOv5's warm-up", "(report)"),
            ("strict_vs_off_ratio", "train.py runs", "(report)")):
        if key in train:
            r = train[key]
            rows.append((f"{key}, {label}", f"{r['ratio']:.3f} (min {r['min']:.3f}, max {r['max']:.3f})", target))
    if "inprocess" in results:
        r = results["inprocess"]
        rows.append(("patch_overhead_ratio, in-process", f"{r['patch_overhead_ratio']:.4f}", "<= 1.01"))
    for key, label, target in (("inprocess_steady", "optimizer every 8 batches", "<= 1.03"),
                               ("inprocess", "optimizer every batch", "(worst case)")):
        if key in results:
            r = results[key]
            rows.append((f"fingerprint_overhead_ratio, in-process, {label}", f"{r['fingerprint_overhead_ratio']:.3f} "
                         f"(min {r['fingerprint_ratio_spread']['min']:.2f}, max {r['fingerprint_ratio_spread']['max']:.2f});"
                         f" own time {100 * r['fingerprint_own_share']:.2f}%", target))
    for name, r in results.get("replacement_ratios", {}).items():
        rows.append((f"replacement {name}", f"{r['ratio']:.2f}x ({r['ratio_1_thread']:.2f}x at 1 thread)", "<= 2.0"))
    for name, r in results.get("opaque", {}).items():
        rows.append((f"opaque stand-in {name}", f"{r['ratio']:.2f}x ({r['ratio_1_thread']:.2f}x at 1 thread); max diff "
                     f"out {r['max_abs_output_diff']:.1e}, grad {r['max_abs_grad_diff']:.1e}", "(report)"))
    if "validation" in results:
        r = results["validation"]
        rows.append(("validation_fingerprint_ratio (yolov5n val.run)",
                     f"{r['ratio']:.4f} (min {r['min']:.3f}, max {r['max']:.3f})", "<= 1.02"))
        rows.append(("validation record's own time / validation pass", f"{r['record_share']:.4f}", "<= 0.02"))
    if "capture" in results:
        r = results["capture"]["capture_ratio"]
        rows.append(("capture_ratio (verify --locate, yolov5n step)",
                     f"{r['ratio']:.2f} (min {r['min']:.2f}, max {r['max']:.2f})", "<= 3.0"))
        c = results["capture"]["capture_ratio_cpu_time"]
        rows.append(("capture_ratio, CPU time", f"{c['ratio']:.2f} (min {c['min']:.2f}, max {c['max']:.2f})", "<= 3.0"))
        f = results["capture"]["confirm_full_step_ratio_cpu_time"]
        rows.append(("confirming pass, whole step read (worst case), CPU time",
                     f"{f['ratio']:.2f} (min {f['min']:.2f}, max {f['max']:.2f})", "(only when pass 1 saw nothing)"))
    if "digest" in results:
        r = results["digest"]
        rows.append((f"digest GB/s ({r['megabytes']} MB, yolov5n state x3), vs plain sum",
                     f"{r['digest']['gb_per_s']} vs {r['sum']['gb_per_s']} ({r['digest_over_sum']}x)", "<= 5x"))
        m = r["from_memory"]
        rows.append((f"  the same over {m['megabytes']} MB (from memory, not cache)",
                     f"{m['digest_gb_per_s']} vs {m['sum_gb_per_s']} ({m['digest_over_sum']}x)", "<= 5x"))
        o = r["one_thread"]
        rows.append(("  the same at 1 thread (stable under load)",
                     f"{o['digest']['gb_per_s']} vs {o['sum']['gb_per_s']} ({o['digest_over_sum']}x)", "<= 5x"))
        rows.append(("capture's batched reads GB/s", f"{r['capture_reads']['gb_per_s']}", "(report)"))
        if "previous_intmm_gemm" in r:
            rows.append(("previous digest's int8 GEMM (bytes-intmm-v1) GB/s", f"{r['previous_intmm_gemm']['gb_per_s']}",
                         "(report)"))
        if "previous_torch_mv" in r:
            rows.append(("the same row sums as torch int64 mv (the CPU kernel before) GB/s",
                         f"{r['previous_torch_mv']['gb_per_s']}", "(report)"))
    if "apply_patch_seconds" in results:
        rows.append(("apply_patch_seconds", f"{results['apply_patch_seconds']['seconds']:.3f}", "< 1"))
    if "audit_seconds" in results:
        rows.append(("audit_seconds (yolov5s)", f"{results['audit_seconds']['seconds']:.2f}", "< 10"))
    if "cli" in results:
        r = results["cli"]
        rows.append(("yolo-det --version, process seconds", f"{r['version_seconds']:.3f}", "< 0.3"))
        rows.append(("yolo-det apply-patch (PyPI yolov5), process seconds", f"{r['apply_patch_process_seconds']:.3f}",
                     "< 1"))
        rows.append((f"yolo-det diff of two {r['diff']['log_mb']} MB logs, peak RSS MB", f"{r['diff']['peak_rss_mb']}"
                     f" ({r['diff']['seconds']:.1f} s)", "< 300"))
        rows.append((f"apply-patch of a {r['big_script']['lines']}-line train.py, seconds",
                     f"{r['big_script']['seconds']:.2f}", "(report)"))
    for key, value in results.get("world", {}).items():
        if key.startswith(("step_ratio", "partial_sum", "hook_bytes", "engine_overhead")):
            rows.append((f"world {key}", f"{value}", "<= log2(V/N)+1" if "peak" in key else "(report)"))
    if "portable" in results:
        r = results["portable"]
        for key in [k for k in r if k.endswith("_ratio")]:
            value = r[key]
            rows.append((f"{key} (yolov5n step, 128 px)", f"{value['ratio']:.3f} (min {value['min']:.3f}, max "
                         f"{value['max']:.3f})", "<= 1.3" if key == "portable_vs_strict_ratio" else "(report)"))
    for key, value in results.get("streams", {}).items():
        rows.append((f"streams {key}", f"{value:.4f}", "<= 0.01" if key.startswith("seeding") else
                     ("<= 0.10" if "blocking" in key else "(report)")))
    if "manifest" in results:
        r = results["manifest"]
        rows.append((f"data manifest, {r['files']} tiny files: first build / repeat, seconds",
                     f"{r['first_seconds']:.2f} / {r['repeat_seconds']:.2f} ({r['first_vs_listing']:.1f}x / "
                     f"{r['repeat_vs_listing']:.1f}x listing them)", "(report)"))
        rows.append(("data manifest, 100k images + labels extrapolated: first / repeat, seconds",
                     f"{r['first_seconds_100k_images']:.0f} / {r['repeat_seconds_100k_images']:.0f}", "repeat < 30"))
        rows.append(("data manifest, first build of 100k ~160 kB JPEGs (read and hashed at "
                     f"{r['digest_mb_per_s']:.0f} MB/s, warm page cache), seconds",
                     f"{r['first_seconds_100k_coco_like']:.0f}", "(once per dataset)"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


PARTS = ["training", "inprocess", "record", "sidecar", "replacements", "apply_patch", "audit", "validation", "cli",
         "streams", "capture", "opaque", "manifest", "world", "digest", "compile", "parity", "export_errors", "report",
         "portable"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds; finishes in under 3 minutes on 2 cores")
    parser.add_argument("--json", type=Path, help="write the results (with machine and versions) here")
    parser.add_argument("--skip", action="append", default=[], choices=PARTS, help="leave a part out")
    parser.add_argument("--only", action="append", default=[], choices=PARTS,
                        help="run only these parts (repeatable; same names as --skip)")
    args = parser.parse_args()
    if args.only:
        args.skip = [p for p in PARTS if p not in args.only]
    elif args.quick:
        args.skip.append("compile")  # compiling yolov8n takes minutes on 2 cores: --only compile runs it
        args.skip.append("export_errors")  # 16 exports at 640 px: --only export_errors runs it
    log = lambda text: print(text, flush=True)  # noqa: E731
    # the in-process parts measure a long run's steady state: the digest's compiled loop loaded (a process loads
    # it only after its first GiB, record/digest.py's COMPILED_AFTER; whole train.py runs below show that start)
    from yolo_det.record.digest import load_compiled
    load_compiled()
    results: Dict[str, object] = {"machine": machine(), "quick": args.quick}
    m = results["machine"]
    log(f"machine: {m['cpu']} ({', '.join(m['cpu_flags']) or 'no AVX2'}; torch {m['torch']} kernels "
        f"{m['torch_cpu_capability']}), {m['cores']} cores, {m['torch_threads']} torch threads")
    if "manifest" not in args.skip:
        log("data manifest: first build and repeat on many small files ...")
        results["manifest"] = bench_manifest(2_000 if args.quick else 10_000, 1 if args.quick else 3, log)
    if "streams" not in args.skip:
        log("per-sample seeding vs sample loading; resume sidecar vs checkpoint save ...")
        results["streams"] = bench_streams(10 if args.quick else 40, log)
    if "apply_patch" not in args.skip:
        log("apply-patch timing ...")
        results["apply_patch_seconds"] = bench_apply_patch(3 if args.quick else 7)
    if "cli" not in args.skip:
        log("whole yolo-det processes: --version, apply-patch, diff of large logs ...")
        results["cli"] = bench_cli(3 if args.quick else 7, 50 if args.quick else 200, log,
                                   big_lines=20_000 if args.quick else 125_000)
    if "audit" not in args.skip:
        log("audit timing (yolov5s) ...")
        results["audit_seconds"] = bench_audit()
    if "replacements" not in args.skip:
        log("replacements, forward+backward vs native ...")
        results["replacement_ratios"] = bench_replacements(15 if args.quick else 50, log)
    if "opaque" not in args.skip:
        log("stand-ins for opaque kernels (flash-attn, deformable attention, roi_align): numerics and speed ...")
        results["opaque"] = bench_opaque(10 if args.quick else 30, log)
    if "world" not in args.skip:
        log("world-size invariance: V micro-batches vs one batch, partial sums, hook bytes (yolov5n) ...")
        results["world"] = bench_world(2 if args.quick else 8, log)
    if "portable" not in args.skip:
        log("portable vs strict step time (yolov5n, child processes) ...")
        results["portable"] = bench_portable(1 if args.quick else 3, 4 if args.quick else 10, log)
    if "digest" not in args.skip:
        log("digest kernel GB/s vs a plain sum over the same bytes ...")
        results["digest"] = bench_digest(10 if args.quick else 40, log)
    if "compile" not in args.skip:
        log("torch.compile: compiled strict vs compiled default vs eager strict (yolov8n; compiling takes minutes) ...")
        results["compile"] = bench_compile(3 if args.quick else 10, log)
    if "record" not in args.skip:
        log("record: bytes per step of the compact default record")
        results["record"] = bench_record_size(20 if args.quick else 400, log)  # bytes per step do not grow with steps
    if "sidecar" not in args.skip:
        log("resume sidecar: bytes per parameter by optimizer, at an accumulation boundary and mid-accumulation ...")
        results["sidecar"] = bench_sidecar(["yolov8n.yaml"] if args.quick else ["yolov8n.yaml", "yolov8x.yaml"], log)
    if "inprocess" not in args.skip:
        log("per-batch overheads in-process (yolov5n, an optimizer step every batch) ...")
        results["inprocess"] = bench_inprocess(6 if args.quick else 24, log)
        log("per-batch overheads in-process (yolov5n, an optimizer step every 8 batches, as after warm-up) ...")
        results["inprocess_steady"] = bench_inprocess(8 if args.quick else 24, log, accumulate=8)
    if "validation" not in args.skip:
        log("validation pass with and without its fingerprint record (yolov5n, val.run) ...")
        results["validation"] = bench_validation(6 if args.quick else 30, log)
    if "capture" not in args.skip:
        log("op capture of verify --locate vs the plain step (yolov5n) ...")
        results["capture"] = bench_capture(3 if args.quick else 9, log)
    if "parity" not in args.skip:
        log("yolo-det parity vs one yolo val of the ONNX export (yolov8n) ...")
        results["parity"] = bench_parity(3 if args.quick else 7, 16 if args.quick else 50, 320 if args.quick else 640, log)
    if "export_errors" not in args.skip:
        log("raw-output errors per export format (yolov5n, yolov8n, yolo11n, yolo26n; random init) ...")
        results["export_errors"] = bench_export_errors(4, 640, log)
    if "report" not in args.skip:
        log("yolo-det report of long logs: time and page size ...")
        results["report"] = bench_report(20_000 if args.quick else 100_000, 1 if args.quick else 3, log)
    if "training" not in args.skip:
        log("training step time, interleaved runs of train.py ...")
        results["training"] = bench_training(rounds=2 if args.quick else 5, epochs=2 if args.quick else 3,
                                             images=48 if args.quick else 64, log=log)
    print()
    print(table(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
