"""Large scripts: hand libcst only the top-level statements the patch can touch.

libcst builds a Python object for every node, so parsing a 125k-line ``train.py`` takes tens
of seconds, although the patch only ever touches the imports, ``train()``, the argument
parser and the hyp loads. For a large file the built-in ``ast`` parser (fast, C) finds where
each top-level statement starts; runs of statements that cannot hold an anchor or a marker are
replaced by one placeholder comment line, the rest is parsed, transformed and printed by
libcst as usual, and the placeholders are put back byte for byte. Removing complete top-level
statements changes nothing for the ones around them, so the result is the same as patching
the whole file.
"""

from __future__ import annotations

import ast
import secrets
import warnings
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

#: Files with at least this many lines are patched through a skeleton.
MIN_LINES = 2000
#: A top-level statement is kept when its text holds one of these (every anchor's matcher needs
#: one of these names; markers and the alias show where an earlier patch is), or when it is an import.
KEEP_WORDS: Tuple[bytes, ...] = (
    b"init_seeds", b"backward", b"ArgumentParser", b"parse_args", b"parse_known_args", b"ModelEMA", b"yaml",
    b"create_dataloader", b"use_deterministic_algorithms", b"yolo-det", b"yolo_det", b"__main__",
)


@dataclass
class Skeleton:
    """The kept statements of a source with placeholders for the rest, and how to put it back."""

    source: bytes
    text: bytes
    runs: Dict[bytes, bytes] = field(default_factory=dict)  # placeholder line (no newline) -> original bytes
    lines: List[int] = field(default_factory=list)  # skeleton line (from 1) -> original line

    def expand(self, patched: bytes) -> bytes:
        """``patched`` (the transformed skeleton) with every placeholder replaced by its original lines."""
        if not self.runs:
            return patched
        out = []
        for line in patched.splitlines(keepends=True):
            original = self.runs.get(line.rstrip(b"\r\n"))
            out.append(line if original is None else original)
        return b"".join(out)

    def original_line(self, line: int) -> int:
        """The line of the original file that skeleton line ``line`` shows."""
        return self.lines[line - 1] if 0 < line <= len(self.lines) else line


def _split_lines(source: bytes) -> List[bytes]:
    """Lines as Python's tokenizer counts them (``\n``, ``\r\n``, ``\r``: exactly what
    ``bytes.splitlines`` splits on), newlines kept."""
    return source.splitlines(keepends=True)


def _starts(body: Sequence[ast.stmt]) -> List[Tuple[int, bool]]:
    """(first line, is an import) of each top-level statement, decorators included, in order."""
    out: List[Tuple[int, bool]] = []
    for node in body:
        first = node.lineno
        decorators = getattr(node, "decorator_list", None)
        if decorators:
            first = min(first, min(d.lineno for d in decorators))
        is_import = isinstance(node, (ast.Import, ast.ImportFrom))
        if out and out[-1][0] >= first:  # `a = 1; b = 2`: one line, one segment
            out[-1] = (out[-1][0], out[-1][1] or is_import)
            continue
        out.append((first, is_import))
    return out


def build(source: bytes, min_lines: int = MIN_LINES, keep: Sequence[bytes] = KEEP_WORDS) -> Optional[Skeleton]:
    """A skeleton of ``source`` keeping the top-level statements that hold one of ``keep``, or None
    when the whole file should simply be parsed (small, nothing to leave out, or not parseable by
    ``ast`` here: libcst then reports the error)."""
    if source.count(b"\n") + 1 < min_lines and source.count(b"\r") + 1 < min_lines:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings of the user's code are not ours to show
            tree = ast.parse(source)
    except (SyntaxError, ValueError, UnicodeDecodeError, LookupError):
        return None
    lines = _split_lines(source)
    starts = _starts(tree.body)
    if len(starts) < 2:
        return None
    bounds = [1] + [first for first, _ in starts[1:]] + [len(lines) + 1]  # segment 0 holds the file's header
    token = b"# yolo_det_skipped_" + secrets.token_hex(8).encode() + b"_"
    skeleton = Skeleton(source, b"")
    parts: List[bytes] = []
    pending: List[bytes] = []
    pending_start = 0

    def flush() -> None:
        if pending:
            key = token + str(len(skeleton.runs)).encode()
            skeleton.runs[key] = b"".join(pending)
            parts.append(key + b"\n")
            skeleton.lines.append(pending_start)
            pending.clear()

    for index, (_, is_import) in enumerate(starts):
        begin, end = bounds[index], bounds[index + 1]
        chunk = b"".join(lines[begin - 1:end - 1])
        if index == 0 or is_import or any(word in chunk for word in keep):
            flush()
            parts.append(chunk)
            skeleton.lines.extend(range(begin, end))
        else:
            if not pending:
                pending_start = begin
            pending.append(chunk)
    flush()
    if not skeleton.runs:
        return None
    skeleton.text = b"".join(parts)
    return skeleton
