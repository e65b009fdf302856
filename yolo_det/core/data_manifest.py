"""The data a run trained and validated on: every image and label file of each split (path
relative to the dataset root, size, content digest), the class names and the label caches
present, so two runs can name the files that changed, appeared or disappeared.

Label caches of YOLOv5 and Ultralytics key on file sizes, paths and (8.4) modification times,
not content; this manifest keys on content (BLAKE2b). A repeat costs one ``stat`` per file:
digests are cached per dataset root under ``$YOLO_DET_CACHE_DIR`` (default
``~/.cache/yolo-det``) by (absolute path, size, mtime_ns, ctime_ns, inode).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import atomic, env_names

MANIFEST_FILE = "data_manifest.json"
FORMAT = 1
DIGEST = "blake2b-128"
# Image suffixes the loaders accept (YOLOv5 7.0 and Ultralytics 8.x, lower-cased).
IMG_FORMATS = frozenset({"bmp", "dng", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp", "pfm", "heic"})
#: The same as file suffixes (``.jpg``): the one set every module that looks for images uses.
IMAGE_SUFFIXES = frozenset(f".{name}" for name in IMG_FORMATS)
SPLITS = ("train", "val", "test")
_CHUNK = 1 << 20

PathLike = Union[str, os.PathLike]


def cache_dir() -> Path:
    """Where yolo-det keeps what it can recompute: ``$YOLO_DET_CACHE_DIR`` or ``~/.cache/yolo-det``."""
    env = os.environ.get(env_names.CACHE_DIR)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "yolo-det"


def file_digest(path: PathLike) -> str:
    """BLAKE2b (128-bit) of the file's bytes, read in chunks."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_file(path: PathLike) -> str:
    """SHA-256 of the file's bytes (hex), read in chunks: the digest other tools check (in-toto subjects, a
    checkpoint's sidecar), where :func:`file_digest` is the manifest's own."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as compact JSON to ``path`` through :mod:`.atomic` (never half-written)."""
    atomic.write_json(path, data, sort_keys=True, separators=(",", ":"))


def _key(st: os.stat_result) -> list:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


class DigestCache:
    """Content digests of one dataset root, reused while (size, mtime_ns, ctime_ns, inode) are unchanged.

    ctime is in the key because a copy that keeps size and modification time (``cp -p`` over
    the file, ``touch -r``) still changes it: only the kernel sets it.
    Stored as one JSON file per root; a corrupt or unreadable file is treated as empty and a
    write that fails (read-only home) only costs the next run its speed.
    """

    def __init__(self, root: PathLike, directory: Optional[PathLike] = None) -> None:
        key = hashlib.blake2b(os.path.abspath(root).encode(), digest_size=8).hexdigest()
        self.path = Path(directory) if directory is not None else cache_dir() / "digests"
        self.path = self.path / f"{key}.json"
        self.entries: Dict[str, list] = {}
        self.dirty = False
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("entries"), dict):
                self.entries = data["entries"]
        except (OSError, ValueError):
            pass
        self.hits = 0
        self.misses = 0

    def digest(self, path: str, st: os.stat_result) -> str:
        """The digest of ``path`` (absolute) whose ``stat`` is ``st``: cached or read now."""
        entry = self.entries.get(path)
        key = _key(st)
        if isinstance(entry, list) and len(entry) == 5 and entry[:4] == key:
            self.hits += 1
            return entry[4]
        self.misses += 1
        value = file_digest(path)
        self.entries[path] = key + [value]
        self.dirty = True
        return value

    def digest_all(self, items: Sequence[Tuple[str, os.stat_result]]) -> List[str]:
        """Digests of many ``(absolute path, stat)``: cached ones by lookup, the rest read on a few threads
        (hashlib releases the GIL while it hashes, so reading and hashing overlap across files)."""
        out: List[Optional[str]] = [None] * len(items)
        todo = []
        for i, (path, st) in enumerate(items):
            entry = self.entries.get(path)
            if isinstance(entry, list) and len(entry) == 5 and entry[:4] == _key(st):
                out[i] = entry[4]
            else:
                todo.append(i)
        self.hits += len(items) - len(todo)
        if todo:
            from concurrent.futures import ThreadPoolExecutor

            threads = max(1, min(8, os.cpu_count() or 1))
            if sum(items[i][1].st_size for i in todo) < (64 << 20) * threads:
                threads = 1  # small files: a thread pool costs more per file than reading them
            pool = ThreadPoolExecutor(max_workers=threads) if threads > 1 else None
            try:
                values = (pool.map if pool else map)(lambda i: file_digest(items[i][0]), todo)
                for i, value in zip(todo, values):
                    out[i] = value
                    self.entries[items[i][0]] = _key(items[i][1]) + [value]
            finally:
                if pool is not None:
                    pool.shutdown()
            self.misses += len(todo)
            self.dirty = True
        return out  # type: ignore[return-value]

    def save(self) -> None:
        """Write the cache if anything was added; failures are ignored (it is only a cache)."""
        if not self.dirty:
            return
        with contextlib.suppress(OSError):
            write_json_atomic(self.path, {"format": FORMAT, "digest": DIGEST, "entries": self.entries})
            self.dirty = False


def image_files(sources: Union[PathLike, Sequence[PathLike]]) -> List[str]:
    """The image files a YOLO loader reads from ``sources``: folders (recursively), ``.txt`` lists
    (``./x`` relative to the list's folder, other relative lines to the current directory, as the
    loaders read them) or single files; sorted, as the loaders sort them."""
    found: List[str] = []
    for source in sources if isinstance(sources, (list, tuple)) else [sources]:
        p = Path(source)
        if p.is_dir():
            found += glob.glob(str(p / "**" / "*.*"), recursive=True)
        elif p.is_file() and p.suffix.lower() == ".txt":
            parent = str(p.parent) + os.sep
            for line in p.read_text(encoding="utf-8").strip().splitlines():
                line = line.strip()
                if line:
                    found.append(line.replace("./", parent, 1) if line.startswith("./") else line)
        elif p.is_file():
            found.append(str(p))
        else:
            raise FileNotFoundError(f"dataset source {p} does not exist")
    return sorted({os.path.normpath(x) for x in found if x.rsplit(".", 1)[-1].lower() in IMG_FORMATS})


def label_file(image: str) -> str:
    """The label file of ``image`` by the loaders' rule: the last ``/images/`` becomes ``/labels/``, ``.txt``."""
    sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
    return sb.join(image.rsplit(sa, 1)).rsplit(".", 1)[0] + ".txt"


def label_cache_files(sources: Union[PathLike, Sequence[PathLike]], labels: Sequence[str]) -> List[str]:
    """Where the releases keep the label cache of these sources (YOLOv5: the list file's or the
    label folder's ``.cache``; Ultralytics: the first label's folder ``.cache``), those that exist."""
    candidates = []
    for source in sources if isinstance(sources, (list, tuple)) else [sources]:
        p = Path(source)
        if p.is_file():
            candidates.append(str(p.with_suffix(".cache")))
    if labels:
        candidates.append(str(Path(labels[0]).parent.with_suffix(".cache")))
    return sorted({c for c in candidates if os.path.isfile(c)})


def _rel(path: str, root: str) -> str:
    if path.startswith(root + os.sep):
        rel = path[len(root) + 1:]
    else:
        rel = os.path.relpath(path, root)
        rel = path if rel.startswith("..") else rel
    return rel.replace(os.sep, "/")


def _stat(path: str) -> Optional[os.stat_result]:
    try:
        return os.stat(path)
    except OSError:
        return None


def build(splits: Mapping[str, Iterable[PathLike]], root: PathLike, names: Any = None,
          sources: Optional[Mapping[str, Any]] = None, digests: Optional[DigestCache] = None) -> Dict[str, Any]:
    """The manifest of known image files per split (labels by the ``/images/`` -> ``/labels/`` rule).

    ``sources``: per split what the data YAML named (kept for the record and to find the caches).
    """
    start = time.perf_counter()
    root = os.path.abspath(root)
    own = digests is None
    digests = digests or DigestCache(root)
    out: Dict[str, Any] = {"format": FORMAT, "digest": DIGEST, "root": root,
                           "names": _names(names), "splits": {}, "caches": {}}
    found: List[Tuple[Dict[str, Any], str, str, os.stat_result]] = []  # (where, relpath, path, stat)
    for split, files in splits.items():
        images = sorted({os.path.normpath(os.path.abspath(f)) for f in files})
        record: Dict[str, Any] = {"images": {}, "labels": {}, "missing_labels": []}
        labels = []
        for image in images:
            st = _stat(image)
            if st is None:
                continue
            found.append((record["images"], _rel(image, root), image, st))
            label = label_file(image)
            labels.append(label)
            lst = _stat(label)
            if lst is None:
                record["missing_labels"].append(_rel(label, root))
            else:
                found.append((record["labels"], _rel(label, root), label, lst))
        split_sources = (sources or {}).get(split)
        if split_sources is not None:
            record["sources"] = [str(s) for s in split_sources] if isinstance(split_sources, (list, tuple)) \
                else [str(split_sources)]
        for cache in label_cache_files(split_sources if split_sources is not None else [], labels):
            st = _stat(cache)
            if st is not None:
                out["caches"][_rel(cache, root)] = {"split": split}
                found.append((out["caches"][_rel(cache, root)], "", os.path.abspath(cache), st))
        out["splits"][split] = record
    values = digests.digest_all([(path, st) for _, _, path, st in found])
    for (where, rel, _path, st), value in zip(found, values):
        entry = {"size": st.st_size, "digest": value}
        if rel:
            where[rel] = entry
        else:
            where.update(entry)
    if own:
        digests.save()
    out["files"] = sum(len(s["images"]) + len(s["labels"]) for s in out["splits"].values())
    out["seconds"] = round(time.perf_counter() - start, 4)
    return out


def _names(names: Any) -> Optional[Dict[str, str]]:
    if names is None:
        return None
    if isinstance(names, Mapping):
        return {str(k): str(v) for k, v in names.items()}
    return {str(i): str(v) for i, v in enumerate(names)}


def resolve_data(data: Union[PathLike, Mapping[str, Any]]) -> Tuple[str, Dict[str, Any]]:
    """(dataset root, the data dict) for a data YAML path or an already loaded dict.

    ``path`` absolute is used as is; relative, it is tried against the YAML's folder and the
    current directory; absent, the YAML's folder (Ultralytics) is the root.
    """
    if isinstance(data, Mapping):
        cfg, base = dict(data), os.getcwd()
        if cfg.get("yaml_file"):
            base = os.path.dirname(os.path.abspath(str(cfg["yaml_file"])))
    else:
        import yaml

        with open(data, encoding="utf-8") as f:
            cfg = yaml.safe_load(f) or {}
        if not isinstance(cfg, dict):
            raise ValueError(f"{data}: a data YAML must be a mapping, got {type(cfg).__name__}")
        base = os.path.dirname(os.path.abspath(data))
    path = cfg.get("path")
    if not path:
        return base, cfg
    if os.path.isabs(str(path)):
        return os.path.normpath(str(path)), cfg
    for candidate in (os.path.join(base, str(path)), os.path.abspath(str(path))):
        if os.path.isdir(candidate):
            return os.path.normpath(candidate), cfg
    return os.path.normpath(os.path.join(base, str(path))), cfg


def _split_sources(root: str, value: Any) -> List[str]:
    out = []
    for item in value if isinstance(value, (list, tuple)) else [value]:
        item = str(item)
        p = item if os.path.isabs(item) else os.path.join(root, item)
        if not os.path.exists(p) and item.startswith("../"):
            p = os.path.join(root, item[3:])  # YOLOv5's check_dataset fallback
        out.append(os.path.normpath(p))
    return out


def from_data_yaml(data: Union[PathLike, Mapping[str, Any]], splits: Sequence[str] = ("train", "val"),
                   digests: Optional[DigestCache] = None) -> Dict[str, Any]:
    """The manifest of a YOLO data YAML (path or dict) resolved the way YOLOv5 and Ultralytics do."""
    root, cfg = resolve_data(data)
    files, sources = {}, {}
    for split in splits:
        if not cfg.get(split):
            continue
        sources[split] = _split_sources(root, cfg[split])
        files[split] = image_files(sources[split])
    return build(files, root, names=cfg.get("names"), sources=sources, digests=digests)


def write(run_dir: PathLike, manifest: Mapping[str, Any]) -> Path:
    """Write ``run_dir/data_manifest.json`` atomically; return its path."""
    path = Path(run_dir) / MANIFEST_FILE
    write_json_atomic(path, dict(manifest))
    return path


def read(run_dir: PathLike) -> Optional[Dict[str, Any]]:
    """The manifest recorded in ``run_dir`` (or a manifest file's path); None if there is none.

    Raises ValueError naming the file when it exists but is not a manifest.
    """
    path = Path(run_dir)
    if path.is_dir():
        path = path / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable data manifest ({e}); delete it or re-run training") from e
    if not isinstance(data, dict) or not isinstance(data.get("splits"), dict):
        raise ValueError(f"{path}: not a yolo-det data manifest (no 'splits')")
    return data


@dataclass
class DataChanges:
    """Files that differ between two manifests, per split, as paths relative to the dataset root."""

    changed: Dict[str, List[str]] = field(default_factory=dict)
    added: Dict[str, List[str]] = field(default_factory=dict)
    removed: Dict[str, List[str]] = field(default_factory=dict)
    names: Optional[Tuple[Any, Any]] = None
    splits_only: Dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (any(self.changed.values()) or any(self.added.values()) or any(self.removed.values())
                    or self.names or self.splits_only)

    def files(self, what: str = "changed") -> List[str]:
        """Every path of one kind (``changed``, ``added``, ``removed``) over all splits, in order."""
        out: List[str] = []
        for paths in getattr(self, what).values():
            out += [p for p in paths if p not in out]
        return out

    def describe(self, limit: int = 5) -> str:
        """One line per kind of change: ``3 label files changed (train): labels/train/3.txt, ... and 1 more``."""
        parts = []
        for what in ("changed", "added", "removed"):
            for split, paths in getattr(self, what).items():
                for kind, group in (("image", [p for p in paths if not _is_label(p)]),
                                    ("label", [p for p in paths if _is_label(p)])):
                    if group:
                        shown = ", ".join(group[:limit])
                        more = f" and {len(group) - limit} more" if len(group) > limit else ""
                        noun = f"{kind} file" + ("s" if len(group) != 1 else "")
                        parts.append(f"{len(group)} {noun} {what} ({split}): {shown}{more}")
        if self.names:
            parts.append(f"class names differ: {self.names[0]} vs {self.names[1]}")
        for split, side in self.splits_only.items():
            parts.append(f"split {split} recorded only in run {side}")
        return "; ".join(parts) if parts else "data identical"


def _is_label(path: str) -> bool:
    return path.endswith(".txt")


def _files(split: Mapping[str, Any]) -> Dict[str, str]:
    out = {p: e.get("digest") for p, e in (split.get("images") or {}).items()}
    out.update({p: e.get("digest") for p, e in (split.get("labels") or {}).items()})
    return out


def content_digest(manifest: Mapping[str, Any]) -> str:
    """One BLAKE2b-128 digest of the data's content: each split's image and label files (path under the root,
    content digest) and the class names. The same files at another root or on another machine digest the same;
    timings and label caches are left out."""
    content = {"names": manifest.get("names"),
               "splits": {split: _files(record) for split, record in (manifest.get("splits") or {}).items()}}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def compare(a: Mapping[str, Any], b: Mapping[str, Any], splits: Optional[Sequence[str]] = None) -> DataChanges:
    """What differs between manifests ``a`` and ``b`` (image and label files by content, class names)."""
    result = DataChanges()
    sa, sb = a.get("splits") or {}, b.get("splits") or {}
    for split in splits if splits is not None else sorted(set(sa) | set(sb)):
        if split not in sa or split not in sb:
            if split in sa or split in sb:
                result.splits_only[split] = "A" if split in sa else "B"
            continue
        fa, fb = _files(sa[split]), _files(sb[split])
        changed = sorted(p for p in fa.keys() & fb.keys() if fa[p] != fb[p])
        added, removed = sorted(fb.keys() - fa.keys()), sorted(fa.keys() - fb.keys())
        for what, paths in (("changed", changed), ("added", added), ("removed", removed)):
            if paths:
                getattr(result, what)[split] = paths
    if a.get("names") != b.get("names") and a.get("names") is not None and b.get("names") is not None:
        result.names = (a.get("names"), b.get("names"))
    return result


def label_digests(manifest: Mapping[str, Any], split: str) -> Dict[str, str]:
    """``{relative label path: digest}`` of one split (what a label cache was built from)."""
    labels = ((manifest.get("splits") or {}).get(split) or {}).get("labels") or {}
    return {p: e["digest"] for p, e in labels.items()}
