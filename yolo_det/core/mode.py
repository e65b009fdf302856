"""Determinism settings: the allowed values, where each one comes from, and validation.

Every setting resolves the same way, highest first: an explicit argument (the training
script's ``--deterministic`` flag), the hyp YAML key, the environment variable, the default.
The result records which source won, so a run can always say why it ran in a given mode.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, MutableMapping, Optional, Sequence, Tuple

from . import env_names

MODES: Tuple[str, ...] = ("strict", "warn", "off")
OPS_CHOICES: Tuple[str, ...] = ("replace", "native")
SOURCES: Tuple[str, ...] = ("cli", "hyp", "env", "run", "resume", "default")
#: How each source reads in a message: "strict (from yolo-det run --deterministic)".
SOURCE_LABELS = {"cli": "--deterministic", "hyp": "hyp YAML", "env": "$YOLO_DET_DETERMINISTIC",
                 "run": "yolo-det run --deterministic", "resume": "the resumed run's saved settings",
                 "default": "default"}
DEFAULT_MODE = "warn"

#: hyp YAML key -> environment variable, for every setting yolo-det reads.
HYP_KEYS: Mapping[str, str] = {
    "deterministic": env_names.DETERMINISTIC,
    "deterministic_backward": env_names.BACKWARD,
    "deterministic_allow": env_names.ALLOW,
    "deterministic_ops": env_names.OPS,
    "deterministic_fill_memory": env_names.FILL_MEMORY,
    "virtual_world_size": env_names.VIRTUAL_WORLD_SIZE,
    "fingerprint": env_names.FINGERPRINT_MODE,
    "deterministic_portable": env_names.PORTABLE,
}
#: What the run's own fingerprint log records (``fingerprint:``): a root digest per kind and step with per-tensor
#: lines at validations and the end (the default under strict/warn), every tensor at every step, or no log.
FINGERPRINT_MODES: Tuple[str, ...] = ("compact", "full", "off")
ENV_MODE = HYP_KEYS["deterministic"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class ConfigError(ValueError):
    """A determinism setting has a value yolo-det cannot use; the message names its source."""


@dataclass(frozen=True)
class Settings:
    """The resolved determinism settings of one run.

    ``mode`` applies globally, ``backward_mode`` inside backward passes, ``allow`` lists the
    ops that may run nondeterministically under strict (reported, not raised), ``ops`` says
    whether strict swaps in deterministic replacements, ``fill_uninitialized_memory`` is
    PyTorch's NaN-filling of new tensors (None keeps PyTorch's default, which is on).
    ``sources`` maps each setting name to where its value came from.
    """

    mode: str = DEFAULT_MODE
    backward_mode: str = DEFAULT_MODE
    allow: Tuple[str, ...] = ()
    ops: str = "replace"
    fill_uninitialized_memory: Optional[bool] = None
    sources: Mapping[str, str] = field(default_factory=dict)
    virtual_world_size: Optional[int] = None  # V of world-size invariance (yolo_det.world); None: off
    fingerprint: Optional[str] = None  # FINGERPRINT_MODES; None: compact by default, full for an explicit log path
    portable: Optional[int] = None  # the intra-op thread count portable pins (core/portable.py); None: off

    @property
    def source(self) -> str:
        """Where the global mode came from: one of ``cli``, ``hyp``, ``env``, ``default``."""
        return self.sources.get("deterministic", "default")

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "mode_source": self.source,
            "backward_mode": self.backward_mode,
            "allow": list(self.allow),
            "ops": self.ops,
            "fill_uninitialized_memory": self.fill_uninitialized_memory,
            "sources": dict(self.sources),
            "virtual_world_size": self.virtual_world_size,
            "fingerprint": self.fingerprint,
            "portable": self.portable,
        }


def _where(source: str, key: str, hyp_name: str) -> str:
    if source == "hyp":
        return f"{hyp_name}: {key}:"
    if source == "env":
        return f"environment: {HYP_KEYS[key]}="
    if source == "run":
        return "yolo-det run --deterministic"
    if source == "cli":
        if key in ("deterministic", "virtual_world_size"):
            return "--" + key.replace("_", "-")
        if key == "fingerprint":
            return "--fingerprint-mode"
        if key == "deterministic_portable":
            return "--portable"
        return f"argument {key}="
    if source == "resume":
        return f"the resumed run's saved {key}:"
    return f"{key}:"


def validate_mode(value: Any, where: str = "mode") -> str:
    """Return ``value`` as one of :data:`MODES`, or raise :class:`ConfigError` naming ``where``."""
    text = str(value).strip().lower() if isinstance(value, str) else value
    if text not in MODES:
        hint = " (YAML reads unquoted on/yes/true as a boolean: write the mode, e.g. strict)" if value is True else ""
        raise ConfigError(f"{where} {value!r} is not one of {', '.join(MODES)}{hint}")
    return text


def mode_arg(value: str) -> str:
    """argparse ``type`` for ``--deterministic``: any case, like the hyp YAML key and the environment."""
    return value.strip().lower()


def _parse(key: str, value: Any, where: str) -> Any:
    if key in ("deterministic", "deterministic_backward"):
        if value is False:  # YAML 1.1 (PyYAML) reads an unquoted `deterministic: off` as false
            return "off"
        return validate_mode(value, where)
    if key == "deterministic_ops":
        text = str(value).strip().lower()
        if text not in OPS_CHOICES:
            raise ConfigError(f"{where} {value!r} is not one of {', '.join(OPS_CHOICES)}")
        return text
    if key == "deterministic_allow":
        items: Sequence[Any]
        if isinstance(value, str):
            items = [v for v in value.replace(",", " ").split() if v]
        elif isinstance(value, (list, tuple)):
            items = value
        else:
            raise ConfigError(f"{where} {value!r} is not a list of op names")
        names = tuple(str(v).strip() for v in items)
        if not all(names):
            raise ConfigError(f"{where} {value!r} contains an empty op name")
        return names
    if key == "deterministic_fill_memory":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ConfigError(f"{where} {value!r} is not a boolean (true or false)")
    if key == "virtual_world_size":
        return validate_virtual_world_size(value, where)
    if key == "fingerprint":
        return validate_fingerprint_mode(value, where)
    if key == "deterministic_portable":
        return validate_portable(value, where)
    raise KeyError(key)


def validate_portable(value: Any, where: str = "deterministic_portable") -> Optional[int]:
    """``deterministic_portable``: ``false``/``off``/``0`` -> None (off); ``true``/``on`` -> 1 intra-op thread; a whole
    number N >= 1 -> portable with N threads (the thread count is part of the pin: kernels sum in another order on
    another count). Else :class:`ConfigError` naming ``where``."""
    if value is False or value is None:
        return None
    if value is True:
        return 1
    text = str(value).strip().lower()
    if text in _FALSE:
        return None
    if text in _TRUE:
        return 1
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1 or number > 1024:
        raise ConfigError(f"{where} {value!r} is not true, false or a thread count (1, 2, ...): portable pins the CPU "
                          "libraries to AVX2 and the intra-op threads to this count (true: 1)")
    return number


def validate_fingerprint_mode(value: Any, where: str = "fingerprint") -> str:
    """``value`` as one of :data:`FINGERPRINT_MODES` (YAML's unquoted ``off`` reads as False), or :class:`ConfigError`."""
    if value is False:
        return "off"
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text not in FINGERPRINT_MODES:
        raise ConfigError(f"{where} {value!r} is not one of {', '.join(FINGERPRINT_MODES)} (compact: a root digest "
                          "per kind and step, full: every tensor at every step, off: no fingerprint log)")
    return text


def validate_virtual_world_size(value: Any, where: str = "virtual_world_size") -> int:
    """``value`` as a power of two >= 1 (the number of virtual ranks), or :class:`ConfigError` naming ``where``.

    A power of two, because the gradients of the V virtual micro-batches are summed in a perfect binary
    tree that must split into the same subtrees on every number of processes that divides V."""
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < 1 or number & (number - 1):
        raise ConfigError(f"{where} {value!r} is not a power of two (1, 2, 4, 8, ...): the virtual world size V "
                          f"is the number of GPUs of the run to reproduce")
    return number


def resolve(
    cli: Optional[Mapping[str, Any]] = None,
    hyp: Optional[Mapping[str, Any]] = None,
    env: Optional[Mapping[str, str]] = None,
    hyp_name: str = "hyp.yaml",
    saved: Optional[Mapping[str, Any]] = None,
) -> Settings:
    """Resolve every setting from explicit values > hyp dict > environment > saved > default.

    ``cli`` and ``hyp`` map hyp-style keys (``deterministic``, ``deterministic_allow``, ...)
    to values; ``None`` values count as unset. ``env`` defaults to ``os.environ``. ``saved``:
    the settings a resumed run was started with (source ``resume``). A bad value raises
    :class:`ConfigError` naming the source, e.g.
    ``hyp.yaml: deterministic: 'stric' is not one of strict, warn, off``.
    """
    env = os.environ if env is None else env
    check_hyp_keys(hyp or {}, hyp_name)
    layers = (("cli", cli or {}), ("hyp", hyp or {}), ("env", {k: env.get(v) for k, v in HYP_KEYS.items()}),
              ("resume", saved or {}))
    values: dict = {}
    sources: dict = {}
    for key in HYP_KEYS:
        for source, layer in layers:
            raw = layer.get(key)
            if raw is None or (source == "env" and raw == ""):
                continue
            if source == "env" and key == "deterministic" and env.get(env_names.MODE_FROM_RUN) == str(raw):
                source = "run"  # the launcher's --deterministic, handed on through the environment
            values[key] = _parse(key, raw, _where(source, key, hyp_name))
            sources[key] = source
            break
        else:
            sources[key] = "default"
    mode = values.get("deterministic", DEFAULT_MODE)
    return Settings(
        mode=mode,
        backward_mode=values.get("deterministic_backward", mode),
        allow=values.get("deterministic_allow", ()),
        ops=values.get("deterministic_ops", "replace"),
        fill_uninitialized_memory=values.get("deterministic_fill_memory"),
        sources=sources,
        virtual_world_size=values.get("virtual_world_size"),
        fingerprint=values.get("fingerprint"),
        portable=values.get("deterministic_portable"),
    )


def is_yolo_det_key(key: Any) -> bool:
    """``deterministic``, ``deterministic_<anything>``, ``virtual_world_size`` or ``fingerprint``: the hyp YAML keys
    yolo-det owns."""
    return isinstance(key, str) and (key in ("deterministic", "virtual_world_size", "fingerprint")
                                     or key.startswith("deterministic_"))


def check_hyp_keys(hyp: Mapping[str, Any], hyp_name: str = "hyp.yaml") -> None:
    """Raise :class:`ConfigError` for a ``deterministic_*`` key yolo-det does not know (a typo
    would otherwise be ignored and the run fall back to the default mode)."""
    unknown = [key for key in hyp if is_yolo_det_key(key) and key not in HYP_KEYS]
    if unknown:
        raise ConfigError(f"{hyp_name}: unknown yolo-det key{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(repr(k) for k in unknown)}; the known keys are {', '.join(HYP_KEYS)}")


def pop_hyp_keys(hyp: MutableMapping[str, Any]) -> dict:
    """Remove yolo-det's keys (every ``deterministic*`` key) from a hyp dict in place and return them.

    YOLOv5's ``--evolve`` mutates every hyp key and formats it with ``%g``, so the
    ``deterministic*`` keys must leave the dict before YOLOv5 uses it. Unknown ones are
    popped too, so that :func:`resolve` can name them.
    """
    return {key: hyp.pop(key) for key in list(hyp) if is_yolo_det_key(key)}
