"""What decides an Ultralytics trainer's (or tuner's) determinism settings: yolo-det's keys in its
overrides, Ultralytics' own ``deterministic`` argument, the environment and a resumed run's saved
settings. Plain values, no Ultralytics import, so the trainer integration and the tuner share it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, MutableMapping, Optional

from ...core import env_names
from ...core.mode import HYP_KEYS, ConfigError, Settings, resolve, validate_mode
from ...session import Session, configure

#: Environment variable that carries a parent trainer's mode settings to its DDP ranks.
ENV_INPUTS = env_names.ULTRALYTICS
#: How errors and determinism.json name Ultralytics' own ``deterministic`` argument.
ARG_NAME = "Ultralytics argument"
#: hyp-style key -> keyword of :func:`yolo_det.configure`.
_CONFIGURE_ARGS = {
    "deterministic": "mode",
    "deterministic_backward": "backward",
    "deterministic_allow": "allow",
    "deterministic_ops": "ops",
    "deterministic_fill_memory": "fill_uninitialized_memory",
    "virtual_world_size": "virtual_world_size",
    "fingerprint": "fingerprint",
}


@dataclass(frozen=True)
class ModeInputs:
    """What decides a trainer's determinism settings, before resolution.

    ``explicit`` holds yolo-det keys passed to the trainer (``deterministic='strict'``,
    ``deterministic_allow=[...]``, ...; source ``cli``); ``ultralytics_arg`` is Ultralytics' own
    boolean ``deterministic`` when the user passed it (True -> warn, False -> off; source ``hyp``).
    Precedence: explicit > ``YOLO_DET_*`` environment > Ultralytics' argument > ``saved`` (a resumed
    run's settings) > default (warn).
    """

    explicit: Mapping[str, Any] = field(default_factory=dict)
    ultralytics_arg: Optional[bool] = None
    #: Settings saved with a run being resumed (source ``resume``: below the environment, above the default).
    saved: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_overrides(cls, overrides: MutableMapping[str, Any],
                       env: Optional[Mapping[str, str]] = None) -> "ModeInputs":
        """Take yolo-det's keys out of Ultralytics ``overrides`` (in place) and return the inputs.

        In a DDP rank started by a :class:`DeterministicTrainer`, the parent's inputs come from
        ``$YOLO_DET_ULTRALYTICS`` instead: the rank's overrides no longer show what the user typed.
        """
        env = os.environ if env is None else env
        explicit = {key: overrides.pop(key) for key in list(overrides) if key in HYP_KEYS and key != "deterministic"}
        value = overrides.get("deterministic")
        arg = None
        if isinstance(value, str):
            explicit["deterministic"] = validate_mode(value, "deterministic=")
        elif isinstance(value, bool):
            arg = value
        inherited = env.get(ENV_INPUTS)
        if inherited:
            return cls.from_json(inherited)
        return cls({k: v for k, v in explicit.items() if v is not None}, arg)

    def hyp_layer(self, env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """Ultralytics' argument as a hyp-layer mode, empty when ``YOLO_DET_DETERMINISTIC`` overrides it."""
        env = os.environ if env is None else env
        if self.ultralytics_arg is None or env.get(HYP_KEYS["deterministic"]):
            return {}
        return {"deterministic": "warn" if self.ultralytics_arg else "off"}

    def resolve(self, env: Optional[Mapping[str, str]] = None) -> Settings:
        """The settings these inputs give (ConfigError naming the source on a bad value)."""
        return resolve(cli=self.explicit, hyp=self.hyp_layer(env), env=env, hyp_name=ARG_NAME, saved=self.saved)

    def configure(self, seed: Optional[int]) -> Session:
        """Start this process's :class:`~yolo_det.runtime.Session` from these inputs."""
        kwargs = {_CONFIGURE_ARGS[key]: value for key, value in self.explicit.items()}
        return configure(hyp=self.hyp_layer(), hyp_name=ARG_NAME, seed=seed, saved=self.saved, **kwargs)

    def with_saved(self, saved: Mapping[str, Any]) -> "ModeInputs":
        """These inputs plus the settings a resumed run was saved with."""
        return ModeInputs(dict(self.explicit), self.ultralytics_arg, dict(saved))

    def to_json(self) -> str:
        def plain(values: Mapping[str, Any]) -> Dict[str, Any]:
            return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}

        return json.dumps({"explicit": plain(self.explicit), "ultralytics_arg": self.ultralytics_arg,
                           "saved": plain(self.saved)})

    @classmethod
    def from_json(cls, text: str) -> "ModeInputs":
        try:
            data = json.loads(text)
            return cls(dict(data["explicit"]), data["ultralytics_arg"], dict(data.get("saved") or {}))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"environment: {ENV_INPUTS}={text!r} is not valid ({exc}); unset it") from exc


__all__ = ["ARG_NAME", "ENV_INPUTS", "ModeInputs"]
