"""The words every ``yolo-det`` command's JSON puts in its one ``verdict`` field, and the ``schema`` version.

One vocabulary so a script, a tracker or a report reads the same word the same way whatever command wrote
it: ``differs`` is a finding (exit 1) in ``diff``, ``verify``, ``val``, ``parity`` and ``compile-check``
alike; ``not proven`` is exit 3 everywhere. Each word maps to one exit code (docs/exit-codes.md; the
numbers are ``yolo_det.cli.exit_codes``'s, repeated here because ``core`` imports nothing above it).

Every judging command's result is a :class:`Result`: its ``verdict`` (a word of this vocabulary, never a
sentence), its ``exit_code`` (from :func:`exit_code` of that word alone) and its ``to_json()`` (the command's
document, stamped by :func:`stamp`). The CLI, the report and the trackers read only these three, so a word and
its code cannot part (:class:`Judged` implements the two derived ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Protocol, runtime_checkable

#: The version of every command's JSON document: raised when a field changes meaning or goes away.
SCHEMA = 1

IDENTICAL = "identical"  # proven bit-identical by the evidence that decides it
AGREE = "agree"  # parity: an export equals its checkpoint within the stated tolerance
WITHIN_NOISE = "within seed noise"  # seeds compare: no difference beyond the seeds' spread
CLEAN = "clean"  # audit: no op that would fail strict determinism, no kernel outside PyTorch's switch
VERIFIED = "verified"  # attest verify: every signature, digest and file checked matches what was signed
NO_VERDICT = "no verdict"  # a report that claims nothing (a study, a manifest, scores)
DIFFERS = "differs"  # a difference in what was compared
BEYOND_NOISE = "beyond seed noise"  # seeds compare: a difference larger than the seeds' spread
FINDING = "finding"  # audit: ops that would fail under strict on CUDA, opaque kernels, a probe that differed
NOT_PROVEN = "not proven"  # nothing differs in what was compared; what decides was not there to compare
TOO_FEW = "too few seeds"  # seeds compare: no test could reject at these sizes (a kind of not proven)
INCONCLUSIVE = "inconclusive"  # the inputs cannot be compared (logs of different lengths, a run unfinished)

#: Each verdict's exit code: 0 success / identical / clean, 1 a finding, 2 cannot compare, 3 not proven.
EXIT_CODES: Dict[str, int] = {
    IDENTICAL: 0, AGREE: 0, WITHIN_NOISE: 0, CLEAN: 0, VERIFIED: 0, NO_VERDICT: 0,
    DIFFERS: 1, BEYOND_NOISE: 1, FINDING: 1,
    INCONCLUSIVE: 2,
    NOT_PROVEN: 3, TOO_FEW: 3,
}
VERDICTS = tuple(EXIT_CODES)

#: Words earlier releases wrote, read back as today's (parity's ``differ``, seeds compare's long phrases).
_OLD_WORDS: Dict[str, str] = {
    "differ": DIFFERS,
    "A better beyond seed noise": BEYOND_NOISE,
    "B better beyond seed noise": BEYOND_NOISE,
    "different beyond seed noise (no better direction)": BEYOND_NOISE,
    "too few seeds for a verdict": TOO_FEW,
}


def normalize(word: Optional[str]) -> str:
    """Today's word for ``word``, which may be an earlier release's (``differ`` -> ``differs``); an unknown
    word is a ValueError naming the vocabulary."""
    if word in EXIT_CODES:
        return word
    if word in _OLD_WORDS:
        return _OLD_WORDS[word]
    raise ValueError(f"unknown verdict {word!r}: expected one of {', '.join(VERDICTS)}")


def exit_code(word: str) -> int:
    """The exit code a command returns with this verdict."""
    return EXIT_CODES[normalize(word)]


def stamp(document: Mapping[str, Any], verdict: str) -> Dict[str, Any]:
    """``{"schema": SCHEMA, "verdict": verdict, ...document}``: the two fields every command's JSON starts with
    (the verdict normalized to the vocabulary; ``document``'s own ``verdict`` is replaced)."""
    rest = {k: v for k, v in document.items() if k not in ("schema", "verdict")}
    return {"schema": SCHEMA, "verdict": normalize(verdict), **rest}


@runtime_checkable
class Result(Protocol):
    """A judging command's result: ``verdict`` (a word of :data:`EXIT_CODES`), ``exit_code`` (that word's code)
    and ``to_json()`` (the command's JSON document, ``{"schema": SCHEMA, "verdict": verdict, ...}``)."""

    @property
    def verdict(self) -> str: ...

    @property
    def exit_code(self) -> int: ...

    def to_json(self) -> Dict[str, Any]: ...


class Judged:
    """The part of :class:`Result` that follows from ``verdict``: a result class defines ``verdict`` (a word) and
    ``to_json()`` returning ``self.stamped(document)``; its ``exit_code`` is the word's, nothing else decides it."""

    verdict: str  # defined by the result class (a field or a property): a word of EXIT_CODES

    @property
    def exit_code(self) -> int:
        """The exit code of :attr:`verdict` (docs/exit-codes.md)."""
        return exit_code(self.verdict)

    def stamped(self, document: Mapping[str, Any]) -> Dict[str, Any]:
        """``document`` with this result's ``schema`` and ``verdict`` first (see :func:`stamp`)."""
        return stamp(document, self.verdict)


@dataclass
class Document(Judged):
    """A :class:`Result` for a command that judges nothing of its own (a study's runs, ``val --predictions``'s
    scores, ``env``) or whose result is a plain document: its word and its JSON."""

    verdict: str
    document: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.verdict = normalize(self.verdict)

    def to_json(self) -> Dict[str, Any]:
        return self.stamped(self.document)


def by_code(code: int) -> str:
    """The vocabulary's most general word for an exit code (for a result that carries no word of its own): 0
    ``no verdict``, 1 ``differs``, 2 ``inconclusive``, 3 ``not proven``; an unknown code is ``inconclusive``."""
    return _GENERAL.get(code, INCONCLUSIVE)


#: The most general word of each code, named (not taken from EXIT_CODES' order).
_GENERAL: Dict[int, str] = {0: NO_VERDICT, 1: DIFFERS, 2: INCONCLUSIVE, 3: NOT_PROVEN}
assert all(EXIT_CODES[word] == code for code, word in _GENERAL.items())
