"""Label caches that would train old labels, and the data manifest of the datasets a run built.

YOLOv5 (``get_hash``: total size and paths) and Ultralytics (8.0-8.3: total size; 8.4: sizes
and modification times) accept a ``labels.cache`` whose labels were edited in place keeping
their size (or their mtime, after ``cp -p`` / ``rsync -t``). Here each cache yolo-det saw built
is recorded with the content digests of the labels it was built from; under strict and warn a
cache without a matching record is not used (the release's own rebuild, as on a hash mismatch),
under off the release uses it and a warning names the labels that changed.

Both families call a module-level ``get_hash`` from the dataset's constructor (a frame holding
``cache_path``) and rebuild with ``<dataset>.cache_labels(path, ...)``; those two are wrapped,
found by feature, never by version.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from ..core import active
from ..core import data_manifest as dm

_WRAPPED = "__yolo_det_label_cache__"
_local = threading.local()
#: What each dataset build read, by cache path: (split, image files, sources). Written as the run's manifest.
_datasets: Dict[str, Tuple[str, List[str], Any]] = {}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _record_path(cache: Path) -> Path:
    key = hashlib.blake2b(str(cache.resolve()).encode(), digest_size=8).hexdigest()
    return dm.cache_dir() / "label-caches" / f"{key}.json"


def _short(label: str) -> str:
    """A label's path as the data manifest names it (from the dataset root: ``labels/train/3.txt``)."""
    norm = label.replace(os.sep, "/")
    return "labels/" + norm.rsplit("/labels/", 1)[1] if "/labels/" in norm else os.path.basename(norm)


def _label_digests(labels: Iterable[str]) -> Dict[str, str]:
    labels = [os.path.abspath(p) for p in labels]
    if not labels:
        return {}
    root = labels[0].replace(os.sep, "/").rsplit("/labels/", 1)[0] if "/labels/" in labels[0] else \
        os.path.dirname(labels[0])
    cache = dm.DigestCache(root)
    out = {}
    for path in labels:
        try:
            out[_short(path)] = cache.digest(path, os.stat(path))
        except OSError:
            continue  # a missing label: the release records the image as background
    cache.save()
    return out


def check(cache: Path, labels: List[str], split: str = "train") -> Tuple[Optional[bool], dm.DataChanges]:
    """Whether ``cache`` was built from these labels' contents: True (it was), False (they changed
    since: the changes), None (no record of what it was built from, or no cache file)."""
    if not cache.is_file():
        return None, dm.DataChanges()
    try:
        record = json.loads(_record_path(cache).read_text(encoding="utf-8"))
        built_from = record["labels"] if record.get("cache_digest") == dm.file_digest(cache) else None
    except (OSError, ValueError, KeyError, TypeError):
        built_from = None
    if built_from is None:
        return None, dm.DataChanges()
    current = _label_digests(labels)

    def manifest(digests: Dict[str, str]) -> Dict[str, Any]:
        return {"splits": {split: {"labels": {p: {"digest": d} for p, d in digests.items()}}}}

    changes = dm.compare(manifest(built_from), manifest(current))
    return changes.empty, changes


def remember(cache: Path, labels: List[str]) -> None:
    """Record that ``cache`` (just written by the release) holds these labels' current contents."""
    if not cache.is_file():
        return  # the release could not write it (read-only folder): nothing to vouch for
    with contextlib.suppress(OSError):
        dm.write_json_atomic(_record_path(cache), {"cache": str(cache.resolve()), "cache_digest": dm.file_digest(cache),
                                                   "labels": _label_digests(labels)})


def _mode() -> Optional[str]:
    session = active.current()
    return None if session is None else session.settings.mode


def _split(prefix: Any, fallback: str) -> str:
    text = _ANSI.sub("", str(prefix or "")).strip()
    match = re.match(r"(\w+)\s*:", text)
    return match.group(1).lower() if match else fallback


def _caller_dataset() -> Tuple[Optional[Path], Any, Any]:
    """(cache_path, dataset, prefix) of the dataset constructor calling ``get_hash`` (up to 4 frames up)."""
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            break
        local = frame.f_locals
        if isinstance(local.get("cache_path"), (str, os.PathLike)):
            dataset = local.get("self")
            prefix = local.get("prefix", getattr(dataset, "prefix", ""))
            return Path(local["cache_path"]), dataset, prefix
        frame = frame.f_back
    return None, None, None


def _note(session: Any, entry: Dict[str, Any], message: str) -> None:
    session.extra.setdefault("label_caches", []).append(entry)
    if getattr(session, "is_main", True):
        print(f"yolo-det: {message}", flush=True)
    if entry["action"] == "warned":
        session.report.note(message)


def _see(cache: Path, dataset: Any, prefix: Any, images: List[str]) -> str:
    split = _split(prefix, "train" if not _datasets else "val")
    _datasets[str(cache)] = (split, list(images), getattr(dataset, "path", None))
    return split


def _wrap_get_hash(original: Callable[..., str]) -> Callable[..., str]:
    @functools.wraps(original)
    def get_hash(paths: Any, *args: Any, **kwargs: Any) -> str:
        value = original(paths, *args, **kwargs)
        mode = _mode()
        if mode is None or getattr(_local, "building", False) or not isinstance(paths, (list, tuple)):
            return value
        labels = [str(p) for p in paths if str(p).endswith(".txt")]
        cache, dataset, prefix = _caller_dataset()
        if not labels or cache is None or not cache.is_file():
            return value  # no cache to trust: the release builds one (cache_labels records it)
        split = _see(cache, dataset, prefix, [str(p) for p in paths if not str(p).endswith(".txt")
                                              and str(p).rsplit(".", 1)[-1].lower() in dm.IMG_FORMATS])
        session = active.current()
        try:
            fresh, changes = check(cache, labels, split)
        except Exception as exc:  # noqa: BLE001 - never break the release's loader; say what happened
            fresh, changes = None, dm.DataChanges()
            session.report.note(f"label cache {cache}: could not compare its labels ({exc})")
        if fresh:
            return value
        what = changes.describe() if fresh is False else "no record of the label contents it was built from"
        entry = {"cache": str(cache), "split": split, "changed": changes.files("changed"), "added": changes.files("added"),
                 "removed": changes.files("removed"), "stale": fresh is False}
        if mode == "off":
            if fresh is False:
                entry["action"] = "warned"
                _note(session, entry, f"label cache {cache} is stale ({what}); the release uses it under "
                                      "determinism off, so these labels train as they were: delete the cache "
                                      "or run under strict/warn")
            return value
        entry["action"] = "rebuilt"
        _note(session, entry, f"label cache {cache} not used ({what}); rebuilding it as the release does "
                              "on a hash mismatch")
        return value + ":yolo-det-stale"  # the release's own check fails, so it rebuilds the cache

    setattr(get_hash, _WRAPPED, original)
    return get_hash


def _wrap_cache_labels(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def cache_labels(self: Any, path: Any = Path("./labels.cache"), *args: Any, **kwargs: Any) -> Any:
        _local.building = True
        try:
            result = original(self, path, *args, **kwargs)
        finally:
            _local.building = False
        if _mode() is not None:
            labels = [str(p) for p in getattr(self, "label_files", None) or []]
            images = [str(p) for p in getattr(self, "im_files", None) or []]
            prefix = args[0] if args else kwargs.get("prefix", getattr(self, "prefix", ""))
            _see(Path(path), self, prefix, images)
            session = active.current()
            if labels and (session is None or session.is_main):
                remember(Path(path), labels)
        return result

    setattr(cache_labels, _WRAPPED, original)
    return cache_labels


def _install_on(module: Any, dataset_classes: Iterable[type]) -> bool:
    hashed = getattr(module, "get_hash", None)
    if not callable(hashed):
        return False
    if not hasattr(hashed, _WRAPPED):
        module.get_hash = _wrap_get_hash(hashed)
    for cls in dataset_classes:
        method = cls.__dict__.get("cache_labels")
        if method is not None and not hasattr(method, _WRAPPED):
            cls.cache_labels = _wrap_cache_labels(method)
    return True


def install_yolov5() -> List[str]:
    """Guard the label caches of the YOLOv5-family loaders already imported (``utils.dataloaders``,
    ``utils.datasets``, ``yolov5.utils.dataloaders``, ...): a module with ``get_hash`` and a dataset
    class with ``cache_labels``. Returns the modules guarded."""
    guarded = []
    for name, module in list(sys.modules.items()):
        if module is None or not callable(getattr(module, "get_hash", None)) or not callable(
                getattr(module, "img2label_paths", None)):
            continue
        classes = [c for c in vars(module).values() if isinstance(c, type) and "cache_labels" in c.__dict__
                   and c.__module__ == module.__name__]
        if classes and _install_on(module, classes):
            guarded.append(name)
    return guarded


def install_ultralytics() -> bool:
    """Guard Ultralytics' detection-family dataset caches (``data.dataset``: ``get_hash``, ``YOLODataset``)."""
    try:
        from ultralytics.data import dataset as module
    except ImportError:
        return False
    classes = [getattr(module, "YOLODataset")] if hasattr(module, "YOLODataset") else []
    return _install_on(module, classes)


def datasets_seen() -> Dict[str, Tuple[str, List[str], Any]]:
    """The datasets built in this process since :func:`reset`: ``{cache path: (split, images, sources)}``."""
    return dict(_datasets)


def reset() -> None:
    """Forget the datasets seen (a new run starts in this process)."""
    _datasets.clear()
    _written.clear()


_written: Dict[str, int] = {}  # manifest path -> how many datasets it covered


def write_manifest(save_dir: Any, data: Any = None, again: bool = True) -> Optional[Path]:
    """Write ``save_dir/data_manifest.json`` for the datasets this run built (rank 0).

    ``data`` (the data YAML's path or dict) gives the dataset root and class names; without it
    the root is the common folder of the files. ``again=False``: not if this run already wrote it
    for the same datasets. Failures are reported, never raised: the manifest must not stop a
    training run.
    """
    session = active.current()
    if save_dir is None or not _datasets or (session is not None and not session.is_main):
        return None
    target = str(Path(save_dir) / dm.MANIFEST_FILE)
    if not again and _written.get(target) == len(_datasets):
        return Path(target)
    try:
        splits: Dict[str, List[str]] = {}
        sources: Dict[str, Any] = {}
        for split, images, source in _datasets.values():
            splits.setdefault(split, []).extend(images)
            if source is not None:
                sources[split] = source
        root, names = None, None
        if data is not None:
            with contextlib.suppress(OSError, ValueError, TypeError):
                root, cfg = dm.resolve_data(data)
                names = cfg.get("names")
        files = [f for images in splits.values() for f in images]
        if root is None or not files or not all(os.path.abspath(f).startswith(root + os.sep) for f in files):
            root = _common_root(files)
        manifest = dm.build(splits, root, names=names, sources=sources)
        manifest["label_caches"] = list(session.extra.get("label_caches", [])) if session is not None else []
        path = dm.write(save_dir, manifest)
        _written[target] = len(_datasets)
        return path
    except Exception as exc:  # noqa: BLE001 - report, never break training
        print(f"yolo-det: could not write {dm.MANIFEST_FILE} into {save_dir}: {exc}", file=sys.stderr)
        return None


def _common_root(files: List[str]) -> str:
    if not files:
        return os.getcwd()
    first = os.path.abspath(files[0]).replace(os.sep, "/")
    if "/images/" in first:
        candidate = first.rsplit("/images/", 1)[0]
        if all(os.path.abspath(f).replace(os.sep, "/").startswith(candidate + "/") for f in files):
            return candidate
    return os.path.commonpath([os.path.abspath(f) for f in files])


__all__ = ["check", "remember", "install_yolov5", "install_ultralytics", "datasets_seen", "reset", "write_manifest"]
