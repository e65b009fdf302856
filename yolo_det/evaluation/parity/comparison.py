"""Export parity's comparison (:func:`check`), in named steps: open the inputs, feed every image to both models,
the report of what was compared, box mAP, provenance, causes, the verdict.

One letterbox per image, computed once, goes to both models; the .pt runs each chunk of :data:`CHUNK` images as
one batch while the export runs image by image on its own thread (its runtime's deterministic setting). An image
left out of a comparison (unreadable, refused by the runtime, outputs of another shape) is listed with why, and
keeps the verdict from "agree".
"""

from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ...core import verdicts
from .data import _Image, _images_and_labels, _labels, load_image, pad_to, rect_shape, to_tensor
from .export import ExportInfo, ParityInputError, class_names, compare_names, names_source, read_export
from .metrics import _delta, box_map
from .model import TorchModel
from .outputs import CONF_TOL, METRIC_TOL, _aligned, _fold_raw, _match_boxes
from .postprocess import from_graph, nms, scale_back
from .rect import _rect_canvases, _rect_reasons, _RectPass
from .report import ParityReport
from .runtimes import Runtime, open_runtime

VAL_CONF, VAL_IOU, VAL_MAX_DET = 0.001, 0.7, 300
EXPORT_NMS_DEFAULTS = {"conf": 0.25, "iou": 0.7, "max_det": 300, "agnostic_nms": False}
CHUNK = 8  # images per batched .pt forward (memory: 8 letterboxed images and their activations)


@contextlib.contextmanager
def _restore_threads(torch: Any, threads: int) -> Iterator[None]:
    """Put torch's intra-op thread count back to ``threads`` on leaving."""
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _rect_variant(model: "TorchModel", images: List[Tuple[int, np.ndarray]], imgsz: Tuple[int, int], stride: int,
                  post: Callable[[List[np.ndarray]], np.ndarray], end2end: bool) -> Dict[int, np.ndarray]:
    """The .pt's detections on each image's rectangular canvas (as `yolo val` of a .pt letterboxes), batched by shape."""
    canvases = [(k, *pad_to(img, rect_shape(img.shape[:2], max(imgsz), stride))) for k, img in images]
    outs = _forward_by_shape(model, [to_tensor(canvas) for _, canvas, _, _ in canvases], end2end)
    return {k: scale_back(post(out), r, pad) for (k, _, r, pad), out in zip(canvases, outs)}


def _forward_by_shape(model: "TorchModel", xs: List[np.ndarray], end2end: bool) -> List[List[np.ndarray]]:
    """The .pt's outputs for each tensor of ``xs``, those of one shape run as one batch (conv kernels do not mix
    images, so a row is its batch-1 result)."""
    groups: Dict[Tuple[int, ...], List[int]] = {}
    for i, x in enumerate(xs):
        groups.setdefault(x.shape, []).append(i)
    out: List[List[np.ndarray]] = [[] for _ in xs]
    for members in groups.values():
        outs = model(np.concatenate([xs[i] for i in members]), end2end=end2end)
        for j, i in enumerate(members):
            out[i] = _row(outs, j)
    return out


def _run_export(runtime: Runtime, x1: np.ndarray, batch: int,
                twice: bool) -> Tuple[List[np.ndarray], Optional[List[np.ndarray]]]:
    """The export's outputs for one image at its static batch (copies), and a second run when ``twice``."""
    x = np.repeat(x1, batch, axis=0) if batch > 1 else x1
    out = runtime(x)
    return out, (runtime(x) if twice else None)


def _row(outs: List[np.ndarray], i: int) -> List[np.ndarray]:
    """Image ``i`` of a batched forward's outputs, keeping the batch axis."""
    return [o[i:i + 1] for o in outs]


LEFT_OUT_OF_ALL, LEFT_OUT_OF_RAW = "every comparison", "the raw comparison"


def _load_chunk(items: List[Tuple[Path, Optional[Path]]], start: int, imgsz: Tuple[int, int],
                skipped: List[Dict[str, Any]]) -> List[_Image]:
    """The readable images of the chunk at ``start``; an unreadable one is added to ``skipped`` (``yolo val`` drops
    it too), so the verdict can say what was not compared."""
    chunk = []
    for n, (file, label_file) in enumerate(items[start:start + CHUNK], start):
        try:
            img, hw0 = load_image(file, max(imgsz))
        except ParityInputError:
            skipped.append({"image": n, "file": str(file), "why": "unreadable image (OpenCV cannot decode it)",
                            "left_out_of": LEFT_OUT_OF_ALL})
            continue
        canvas, r, pad = pad_to(img, imgsz)
        chunk.append(_Image(n, file, img, hw0, to_tensor(canvas), float(r), pad, _labels(label_file, hw0)))
    return chunk


def _skip(image: _Image, why: str, left_out_of: str) -> Dict[str, Any]:
    """An image left out of a comparison, as the report lists it."""
    return {"image": image.n, "file": str(image.file), "why": why, "left_out_of": left_out_of}


def _skip_reasons(skipped: List[Dict[str, Any]], total: int) -> List[str]:
    """One line per comparison images were left out of: how many of ``total``, which, and why."""
    lines = []
    for where in (LEFT_OUT_OF_ALL, LEFT_OUT_OF_RAW):
        group = [s for s in skipped if s["left_out_of"] == where]
        if not group:
            continue
        whys = list(dict.fromkeys(s["why"] for s in group))
        ids = ", ".join(str(s["image"]) for s in group[:10]) + (", ..." if len(group) > 10 else "")
        lines.append(f"{len(group)} of {total} images left out of {where} (image {ids}): " + "; ".join(whys[:3])
                     + (f"; and {len(whys) - 3} other reasons" if len(whys) > 3 else ""))
    return lines


def _run_export_guarded(runtime: Runtime, x1: np.ndarray, batch: int, twice: bool
                        ) -> Tuple[Optional[List[np.ndarray]], Optional[List[np.ndarray]], Optional[str]]:
    """:func:`_run_export`, and the runtime's error as text where it refuses this input (the image is then left
    out of the comparison, said why) instead of ending the whole comparison."""
    try:
        out, again = _run_export(runtime, x1, batch, twice)
    except Exception as exc:  # noqa: BLE001 - each runtime raises its own error types
        return None, None, f"{type(exc).__name__}: {exc}"
    return out, again, None


@dataclass
class _Job:
    """One comparison's inputs, opened and checked: the export and its runtime, the .pt, the images, the settings."""

    model_path: Path
    exported: Path
    data: os.PathLike
    conf: float
    info: ExportInfo
    torch_model: TorchModel
    runtime: Runtime
    items: List[Tuple[Path, Optional[Path]]]
    imgsz: Tuple[int, int]
    batch: int
    stride: int
    e2e: bool
    baked: Dict[str, Any]
    baked_recorded: bool
    post: Callable[..., np.ndarray]  # one image's outputs -> detections (validation's NMS, a graph's, a baked one)


@dataclass
class _Fed:
    """What feeding every image to both models gave: the raw rows, each model's detections, the cause variants."""

    raw_rows: Dict[str, Dict[str, Any]]
    pt_dets: List[np.ndarray]
    ex_dets: List[np.ndarray]
    pt_low: List[Optional[np.ndarray]]  # boxes just under the threshold (None where an image's boxes agree)
    ex_low: List[Optional[np.ndarray]]
    variants: Dict[str, List[np.ndarray]]  # the .pt with one setting changed, on the images with labels
    labels: List[Optional[np.ndarray]]
    compared: List[int]  # the images in the box and metric comparison, in order
    skipped: List[Dict[str, Any]]  # the images left out of a comparison, and why
    repeatable: bool
    raw_note: Optional[str]
    rect_pass: Optional[_RectPass]

    def pairs(self, dets: List[np.ndarray]) -> List[Tuple[np.ndarray, np.ndarray]]:
        """(detections, labels) of the images that have labels."""
        return [(d, g) for d, g in zip(dets, self.labels) if g is not None]


def check(model_path: os.PathLike, exported: os.PathLike, data: Optional[os.PathLike] = None,
          max_images: int = 100, conf: float = VAL_CONF, echo: Callable[[str], None] = lambda _: None) -> ParityReport:
    """Compare ``model_path`` (.pt) with ``exported`` on the validation images of ``data``; see the package doc."""
    t0 = time.perf_counter()
    job = _open(model_path, exported, data, max_images, conf)
    fed = _feed(job, echo)
    report = _compared(job, fed)
    pm, em, have_labels = _metrics(report, fed)
    report.provenance = _provenance(job.info, job.torch_model)
    report.causes = _causes(job, fed, report, pm, em)
    _verdict(job, fed, report, pm, em, have_labels)
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def _open(model_path: os.PathLike, exported: os.PathLike, data: Optional[os.PathLike], max_images: int,
          conf: float) -> _Job:
    """Step 1: the .pt, the export and its runtime, the images opened; the input size, batch, stride, baked NMS."""
    model_path, exported = Path(model_path), Path(exported)
    if not model_path.exists():
        raise ParityInputError(f"{model_path}: no such PyTorch model")
    info = read_export(exported)
    torch_model = TorchModel(model_path)
    try:
        runtime = open_runtime(info)
    except ParityInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - each runtime raises its own error types
        raise ParityInputError(f"{exported}: the {info.format} runtime cannot load it ({exc})") from exc
    if data is None:
        raise ParityInputError("no images to compare on: give --data DATA (a data YAML or an image folder)")
    items = _images_and_labels(data, max_images)
    imgsz = info.imgsz or (tuple(info.metadata.get("imgsz")) if info.metadata.get("imgsz") else None)
    if imgsz is None:
        raise ParityInputError(f"{exported}: a dynamic export without an image size in its metadata")
    batch = info.batch or 1
    stride = int(info.metadata.get("stride") or torch_model.stride)
    nc = torch_model.nc
    e2e = info.end2end
    yolov5 = torch_model.yolov5
    baked = {k: info.export_args.get(k, EXPORT_NMS_DEFAULTS[k]) for k in EXPORT_NMS_DEFAULTS}
    if baked["conf"] is None:
        baked["conf"] = EXPORT_NMS_DEFAULTS["conf"]
    baked_recorded = bool((info.provenance or {}).get("export_args"))

    def post(out: List[np.ndarray], graph_selected: bool, c: float = conf, single: Optional[dict] = None,
             rank_by: Optional[List[np.ndarray]] = None) -> np.ndarray:
        """Detections of one output; ``rank_by``: the .pt's output, whose scores order the export's candidates."""
        o = out[0][0]
        if graph_selected:
            return from_graph(o, c)
        ref = rank_by[0][0] if rank_by else None
        if single:
            return nms(o, nc, single["conf"], single["iou"], single["max_det"], False, bool(single["agnostic_nms"]),
                       yolov5, rank_by=ref)
        return nms(o, nc, c, VAL_IOU, VAL_MAX_DET, True, False, yolov5, rank_by=ref)

    return _Job(model_path, exported, data, conf, info, torch_model, runtime, items, imgsz, batch, stride, e2e, baked,
                baked_recorded, post)


def _feed(job: _Job, echo: Callable[[str], None]) -> _Fed:
    """Step 2: every image to both models (the same tensors), chunk by chunk; raw outputs folded, detections kept."""
    info, torch_model, runtime, items, post = job.info, job.torch_model, job.runtime, job.items, job.post
    imgsz, batch, stride, conf, e2e, baked = job.imgsz, job.batch, job.stride, job.conf, job.e2e, job.baked
    raw_rows: Dict[str, Dict[str, Any]] = {}
    pt_dets, ex_dets, pt_low, ex_low = [], [], [], []
    variants: Dict[str, List[np.ndarray]] = {k: [] for k in ("pt_rect", "pt_o2m", "pt_baked", "pt_fp16")}
    labels: List[Optional[np.ndarray]] = []
    compared: List[int] = []  # the images in the box and metric comparison, in order
    skipped: List[Dict[str, Any]] = []  # the images left out of a comparison, and why
    repeatable, repeat_checked = True, False
    raw_note = None
    graph_selected = info.nms_baked or e2e
    # a dynamic export is what `yolo val` letterboxes rect: compared at those shapes too
    rect_pass = _RectPass(post, e2e, graph_selected, conf if not info.nms_baked else 0.0, info.nms_baked) \
        if info.dynamic else None
    # two threads share the cores: this one runs the .pt on the square tensors, the other the export (one thread,
    # its deterministic setting) and the .pt on the rect canvases (the letterbox cause) with its own model copy
    # (a head caches its anchors per input shape); torch's intra-op threads are split between the two
    rect_model = None if info.dynamic else torch_model.clone()
    torch_threads = torch_model.torch.get_num_threads()
    torch_model.torch.set_num_threads(max(1, torch_threads // 2 if rect_model is not None else torch_threads - 1))
    with _restore_threads(torch_model.torch, torch_threads), \
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="parity-export") as pool:
        for start in range(0, len(items), CHUNK):
            # one letterbox per image; the .pt runs each chunk as one batch (its rows are the batch-1 results: conv
            # kernels do not mix images), the export image by image at its own static batch
            chunk = _load_chunk(items, start, imgsz, skipped)
            if not chunk:
                continue
            xs = np.concatenate([im.x for im in chunk])
            # the export runs on its own thread while the .pt computes (both release the GIL in their kernels; each
            # runtime's result does not depend on what else runs); the first image runs twice (repeatability)
            ex_jobs = [pool.submit(_run_export_guarded, runtime, im.x, batch, not repeat_checked and k == 0)
                       for k, im in enumerate(chunk)]
            canvases = _rect_canvases(chunk, imgsz, stride, with_square=start == 0) if rect_pass else []
            rect_jobs = [pool.submit(_run_export_guarded, runtime, c.x, batch, False) for c in canvases]
            pt_batch, o2m_batch = torch_model.run(xs, end2end=e2e, one2many=e2e)
            # cause variants, each differing from the matched .pt in one setting only: only for images with labels
            # (they feed the metric changes), each setting's forward batched too
            labelled = [k for k, im in enumerate(chunk) if im.gt is not None]
            rect_job = pool.submit(_rect_variant, rect_model, [(k, chunk[k].img) for k in labelled], imgsz, stride,
                                   lambda outs: post(outs, e2e), e2e) if labelled and rect_model is not None else None
            fp16_batch = torch_model(xs[labelled], end2end=e2e, fp16_weights=True) if labelled and info.half else None
            rect = rect_job.result() if rect_job is not None else {}
            pt_rect = _forward_by_shape(torch_model, [c.x for c in canvases], e2e)
            for c, pt_out, job in zip(canvases, pt_rect, rect_jobs):
                rect_pass.add(c, pt_out, job.result())
            for k, im in enumerate(chunk):
                n, r0, p0, gt = im.n, im.r, im.pad, im.gt
                ex_out, again, error = ex_jobs[k].result()
                if error is not None:
                    skipped.append(_skip(im, f"the export's runtime failed: {error}", LEFT_OUT_OF_ALL))
                    continue
                if again is not None:
                    repeatable, repeat_checked = all(np.array_equal(a, b) for a, b in zip(ex_out, again)), True
                pt_out, ex_out = _aligned(_row(pt_batch, k), ex_out, e2e)
                why = _fold_raw(raw_rows, pt_out, ex_out, n)
                if why is not None:
                    raw_note = f"not comparable: {why}" + (" (NMS inside the graph)" if info.nms_baked else "")
                    if not info.nms_baked:  # a baked-NMS graph never gives the raw head: said by raw_note
                        skipped.append(_skip(im, why, LEFT_OUT_OF_RAW))
                compared.append(n)
                pt_dets.append(scale_back(post(pt_out, e2e), r0, p0))
                ex_dets.append(scale_back(post(ex_out, graph_selected, conf if not info.nms_baked else 0.0,
                                               rank_by=pt_out), r0, p0))
                # boxes just under the threshold, to name threshold-crossers: only where this image's boxes differ
                if _match_boxes(pt_dets[-1:], ex_dets[-1:], conf)["agree"]:
                    pt_low.append(None), ex_low.append(None)
                else:
                    pt_low.append(scale_back(post(pt_out, e2e, conf / 2), r0, p0))
                    ex_low.append(scale_back(post(ex_out, graph_selected, conf / 2 if not info.nms_baked else 0.0,
                                                  rank_by=pt_out), r0, p0))
                labels.append(gt)
                echo(f"parity: image {n + 1}/{len(items)}") if (n + 1) % 25 == 0 else None
                if gt is None:
                    continue
                i = labelled.index(k)
                if k in rect:
                    variants["pt_rect"].append(rect[k])
                if o2m_batch is not None:
                    variants["pt_o2m"].append(scale_back(post(_row(o2m_batch, k), False), r0, p0))
                if info.nms_baked:  # the same .pt output through the baked NMS: no forward
                    variants["pt_baked"].append(scale_back(post(pt_out, False, single=baked), r0, p0))
                if fp16_batch is not None:
                    variants["pt_fp16"].append(scale_back(post(_row(fp16_batch, i), e2e), r0, p0))
    if not compared:
        raise ParityInputError(f"{job.data}: none of the {len(items)} images could be compared: "
                               + "; ".join(_skip_reasons(skipped, len(items))))
    return _Fed(raw_rows, pt_dets, ex_dets, pt_low, ex_low, variants, labels, compared, skipped, repeatable, raw_note,
                rect_pass)


def _compared(job: _Job, fed: _Fed) -> ParityReport:
    """Step 3: the report of what was compared: the runtime, raw outputs, boxes, class names, the rect shapes."""
    info, torch_model, runtime, items = job.info, job.torch_model, job.runtime, job.items
    conf, baked = job.conf, job.baked
    model_path, exported, imgsz, rect_pass = job.model_path, job.exported, job.imgsz, fed.rect_pass
    pt_dets, ex_dets, pt_low, ex_low, compared, skipped = \
        fed.pt_dets, fed.ex_dets, fed.pt_low, fed.ex_low, fed.compared, fed.skipped
    raw_rows, raw_note, repeatable = fed.raw_rows, fed.raw_note, fed.repeatable
    box_conf = conf if not info.nms_baked else baked["conf"]
    report = ParityReport(str(model_path), str(exported), info.format,
                          {"name": runtime.name, "settings": runtime.settings, "notes": runtime.notes,
                           "repeatable": repeatable},
                          len(items), imgsz, list(raw_rows.values()), raw_note)
    report.boxes = _match_boxes(pt_dets, ex_dets, box_conf, pt_low, None if info.nms_baked else ex_low)
    for crosser in report.boxes["threshold_crossers"]:
        crosser["image"] = compared[crosser["image"]]  # the image's number among the data's, not among those compared
    report.skipped = skipped
    report.class_names = compare_names(torch_model.names, class_names(info.metadata.get("names")), names_source(info))
    if rect_pass is not None:
        report.rect = rect_pass.summary(box_conf)
        report.raw += list(rect_pass.rows.values())
    return report


def _metrics(report: ParityReport, fed: _Fed) -> Tuple[Optional[Dict[str, float]], Optional[Dict[str, float]], bool]:
    """Step 4: box mAP of both models on the labelled images (None: no labels, or no object in them)."""
    labels, pt_dets, ex_dets = fed.labels, fed.pt_dets, fed.ex_dets
    have_labels = all(g is not None for g in labels)
    objects = sum(len(g) for g in labels if g is not None)
    if have_labels and objects:  # no ground-truth object: both mAPs would be 0, a match that proves nothing
        pm, em = box_map(fed.pairs(pt_dets)), box_map(fed.pairs(ex_dets))
        report.metrics = {"pt_matched": pm, "export_matched": em, "delta": _delta(em, pm),
                          "note": "box mAP computed by yolo-det on both models' detections from the same tensors "
                                  "(val conf 0.001, IoU 0.7, max_det 300, multi-label NMS unless the graph selects)"}
    else:
        pm = em = None
    return pm, em, have_labels


def _provenance(info: ExportInfo, torch_model: TorchModel) -> Dict[str, Any]:
    """Step 5: whether the export was made from this .pt (the weight digest its provenance records)."""
    prov = info.provenance
    if prov and prov.get("source_weights_digest"):
        same = prov["source_weights_digest"] == torch_model.digest
        return {"status": "same source checkpoint (weight digests match)" if same else
                f"DIFFERENT source checkpoint: exported from {prov.get('source_checkpoint')} "
                f"({prov['source_weights_digest'][:19]}...), this .pt is {torch_model.digest[:19]}...",
                "same_checkpoint": same, "export": prov, "pt_digest": torch_model.digest}
    return {"status": "the export records no source checkpoint (not exported through yolo-det)",
            "same_checkpoint": None, "pt_digest": torch_model.digest}


def _causes(job: _Job, fed: _Fed, report: ParityReport, pm: Optional[Dict[str, float]],
            em: Optional[Dict[str, float]]) -> List[Dict[str, Any]]:
    """Step 6: each cause that applies, with the metric change when only it is aligned."""
    info, imgsz, baked, baked_recorded = job.info, job.imgsz, job.baked, job.baked_recorded
    e2e, batch = job.e2e, job.batch
    variants = fed.variants
    causes: List[Dict[str, Any]] = []

    def cause(name: str, detail: str, change: Optional[Dict[str, float]], aligned: bool, artifact: bool) -> None:
        causes.append({"cause": name, "detail": detail, "metric_change": change, "aligned": aligned,
                       "artifact": artifact})

    if report.class_names["status"] == "differ":
        cause("class names", report.class_names["detail"], None, False, True)
    if report.provenance.get("same_checkpoint") is False:
        cause("different source checkpoint", report.provenance["status"], _delta(em, pm) if pm else None, False, True)
    if not info.dynamic:
        cause("letterbox rect vs square",
              f"`yolo val`/predict letterbox a .pt rectangularly (rect canvas, a stride multiple plus half a stride), "
              f"this static export square {imgsz}; parity fed both the square tensor",
              _delta(pm, box_map(fed.pairs(variants["pt_rect"]))) if pm and variants["pt_rect"] else None, True, False)
    else:
        cause("dynamic shapes", f"the export has dynamic axes {info.input_shape}: validators keep rect letterbox for "
              f"it; parity fed the square {imgsz} tensor and the rect shapes {report.rect['shapes']} `yolo val` uses "
              "to both", None, True, False)
    if info.nms_baked:
        cause("NMS in graph",
              f"export(nms=True) baked conf={baked['conf']}, iou={baked['iou']}, max_det={baked['max_det']}, "
              f"agnostic_nms={baked['agnostic_nms']} and keeps one class per anchor (argmax); validation's NMS is "
              f"multi-label at conf {VAL_CONF}" + ("" if baked_recorded else " (settings not recorded in the export: "
                                                   "Ultralytics' export defaults assumed)"),
              _delta(box_map(fed.pairs(variants["pt_baked"])), pm) if pm else None, False, True)
    if e2e:
        cause("end-to-end one-to-one head",
              "the export carries the one-to-one head (top-k, no NMS); `yolo val` of the .pt runs the one-to-many "
              "head with NMS (nms=None); parity ran the .pt's one-to-one head too",
              _delta(pm, box_map(fed.pairs(variants["pt_o2m"]))) if pm and variants["pt_o2m"] else None, True, False)
    if info.half:
        cause("precision fp16", ("weights stored in fp16" if info.fp16_weights else "fp16 export")
              + (f", input {info.input_dtype}" if info.input_dtype != "float32" else "")
              + "; the change is the .pt with its weights rounded to fp16",
              _delta(box_map(fed.pairs(variants["pt_fp16"])), pm) if pm and variants["pt_fp16"] else None, False, True)
    if info.int8:
        cause("precision int8", "quantized (int8) graph", _delta(em, pm) if pm else None, False, True)
    if batch > 1:
        cause("batch", f"static batch {batch}: every input is padded to {batch} images; parity fed copies and "
              "compared the first", None, True, False)
    raw_beyond = [r for r in report.raw if not r["within"]]
    explained = any(c["artifact"] and c["cause"] != "class names" for c in causes)  # names change no raw value
    if raw_beyond and not explained:
        graph = f"opset {info.opset}" if info.opset else "the runtime's graph transformations"
        simp = info.export_args.get("simplify")
        cause("opset/simplifier", f"{graph}" + (", simplified by onnxslim" if simp else "")
              + f": raw errors beyond fp32 tolerance with the same weights and no precision change",
              _delta(em, pm) if pm else None, False, True)
    return causes


def _verdict(job: _Job, fed: _Fed, report: ParityReport, pm: Optional[Dict[str, float]],
             em: Optional[Dict[str, float]], have_labels: bool) -> None:
    """Step 7: the verdict and its reasons: differs, not proven (what an agree needs was not there), or agree."""
    info, items, causes = job.info, job.items, report.causes
    repeatable, raw_note, raw_rows, skipped = fed.repeatable, fed.raw_note, fed.raw_rows, fed.skipped
    raw_beyond = [r for r in report.raw if not r["within"]]
    raw_ok = all(r["within"] for r in report.raw) and (bool(report.raw) or info.nms_baked)
    boxes_ok = report.boxes["agree"]
    metrics_ok = pm is not None and all(abs(em[k] - pm[k]) <= METRIC_TOL for k in pm)
    artifact_changes = [c for c in causes if c["artifact"] and (
        c["cause"] == "different source checkpoint"
        or not c["metric_change"] or any(abs(v) > METRIC_TOL for v in c["metric_change"].values())
        or raw_beyond)]
    if not repeatable:
        report.reasons.append("the runtime gave different outputs for the same input twice")
    if not raw_ok and report.raw:
        report.reasons.append(f"raw outputs beyond tolerance: {', '.join(r['output'] for r in raw_beyond)}")
    if not boxes_ok:
        report.reasons.append(f"{report.boxes['only_pt']} boxes only in the .pt, {report.boxes['only_export']} "
                              f"only in the export")
    if pm is not None and not metrics_ok:
        report.reasons.append(f"mAP50-95 {pm['map50_95']:.4f} (.pt) vs {em['map50_95']:.4f} (export)")
    if info.nms_baked:
        report.reasons.append("NMS is inside the graph: the export cannot give validation's multi-label NMS")
    if report.class_names["status"] == "differ":
        report.reasons.append(f"class names differ: {report.class_names['detail']}")
    report.reasons += _rect_reasons(report.rect)
    conf_diff = report.boxes.get("max_conf_diff")
    if boxes_ok and conf_diff is not None and conf_diff > CONF_TOL:
        report.reasons.append(f"matched boxes' confidences differ by up to {conf_diff:.3g} (tolerance {CONF_TOL:g})")
    differs = bool(report.reasons) or bool(artifact_changes)
    missing = []  # what an "agree" needs and was not there to compare
    if not report.raw and not info.nms_baked:
        missing.append("raw outputs not compared" + (f" ({raw_note})" if raw_note else ""))
    if report.class_names["status"] == "unknown":
        missing.append(report.class_names["detail"])
    missing += _skip_reasons([s for s in skipped if s["left_out_of"] == LEFT_OUT_OF_ALL or raw_rows], len(items))
    if report.rect.get("not_compared"):
        missing.append("rect shapes `yolo val` feeds this dynamic export not compared: " + "; ".join(
            f"{s['shape']} (image {', '.join(map(str, s['images']))}: {s['why']})" for s in report.rect["not_compared"]))
    if boxes_ok and not report.boxes["matched"]:  # two empty sets agree whatever the models compute
        missing.append("no box compared: neither model kept a box above the confidence threshold on these images")
    if pm is None:
        missing.append("metrics not compared: " + ("the images' labels hold no object" if have_labels
                                                   else "the images have no labels"))
    if differs:
        report.verdict = verdicts.DIFFERS
        if artifact_changes and not report.reasons:
            report.reasons.append("; ".join(c["cause"] for c in artifact_changes))
    elif missing:
        report.verdict = verdicts.NOT_PROVEN
        report.reasons.append("predictions agree but " + "; ".join(missing))
    else:
        report.verdict = verdicts.AGREE
