"""A release's logger callbacks run with the training's RNG states set aside: whatever a logger draws from python's,
numpy's or torch's global generator (MLflow's retry back-off, a random run name), and however often, the states
the training goes on with are the ones it had; the defaults and the user's own callbacks are left as they are."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from yolo_det.core import rng
from yolo_det.integrations.ultralytics import loggers


def _callback(module: str, draws: int, raises: bool):
    def on_fit_epoch_end(trainer):
        for _ in range(draws):  # as a logger that retries a busy server does, a count the clock decides
            random.random()
            np.random.rand()
            torch.rand(1)
        if raises:
            raise ConnectionError("the server went away")

    on_fit_epoch_end.__module__ = module
    return on_fit_epoch_end


def _same(a, b) -> bool:
    return a[0] == b[0] and all(np.array_equal(x, y) for x, y in zip(a[1][1:], b[1][1:])) and torch.equal(a[2], b[2])


@settings(max_examples=40, deadline=None)
@given(draws=st.integers(0, 5), raises=st.booleans(), seed=st.integers(0, 2**32 - 1),
       integration=st.sampled_from(["mlflow", "tensorboard", "wb", "hub", "raytune", "clearml"]))
def test_a_logger_leaves_the_host_rng_states_as_they_were(draws, raises, seed, integration):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    table = {"on_fit_epoch_end": [_callback(f"ultralytics.utils.callbacks.{integration}", draws, raises)]}
    assert loggers.guard(table) == [f"{integration}.on_fit_epoch_end"]
    before = rng.host_states()
    try:
        table["on_fit_epoch_end"][0](None)
    except ConnectionError:
        assert raises
    assert _same(rng.host_states(), before)


def test_the_defaults_and_the_users_callbacks_are_not_wrapped_and_guarding_twice_wraps_once():
    default = _callback(loggers.DEFAULTS, 1, False)
    user = _callback("my_training_script", 1, False)
    forked = _callback("ultralytics.utils.callbacks.mlflow", 1, False)  # a fork's vendored package: same module path
    table = {"on_fit_epoch_end": [default, user, forked], "on_train_end": []}
    assert loggers.guard(table) == ["mlflow.on_fit_epoch_end"]
    guarded = table["on_fit_epoch_end"][2]
    assert table["on_fit_epoch_end"][:2] == [default, user] and guarded is not forked
    assert loggers.guard(table) == ["mlflow.on_fit_epoch_end"] and table["on_fit_epoch_end"][2] is guarded
    random.seed(3)
    before = random.getstate()
    user(None)  # the user's own draws are the user's training
    assert random.getstate() != before


@pytest.mark.parametrize("module, expected", [("ultralytics.utils.callbacks.mlflow", True),
                                              ("ultralytics.utils.callbacks.base", False),
                                              ("ultralytics.utils.callbacks", False),
                                              ("ultralytics.engine.trainer", False), ("", False)])
def test_a_logger_is_known_by_its_module(module, expected):
    assert loggers.is_logger(_callback(module, 0, False)) is expected
