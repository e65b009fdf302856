"""Mode resolution: precedence, sources, every error message, hyp-key handling."""

import pytest

from yolo_det.core.mode import ConfigError, pop_hyp_keys, resolve


def test_default_is_warn_from_default():
    s = resolve(env={})
    assert (s.mode, s.source, s.backward_mode) == ("warn", "default", "warn")
    assert s.allow == () and s.ops == "replace" and s.fill_uninitialized_memory is None


@pytest.mark.parametrize(
    "cli, hyp, env, expected",
    [
        ("strict", {"deterministic": "off"}, {"YOLO_DET_DETERMINISTIC": "warn"}, ("strict", "cli")),
        (None, {"deterministic": "off"}, {"YOLO_DET_DETERMINISTIC": "strict"}, ("off", "hyp")),
        (None, {}, {"YOLO_DET_DETERMINISTIC": "strict"}, ("strict", "env")),
        (None, {"lr0": 0.01}, {"YOLO_DET_DETERMINISTIC": ""}, ("warn", "default")),
    ],
)
def test_precedence_cli_hyp_env_default(cli, hyp, env, expected):
    s = resolve(cli={"deterministic": cli}, hyp=hyp, env=env)
    assert (s.mode, s.source) == expected


def test_values_are_case_insensitive():
    assert resolve(cli={"deterministic": "STRICT"}, env={}).mode == "strict"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"hyp": {"deterministic": "stric"}}, "hyp.yaml: deterministic: 'stric' is not one of strict, warn, off"),
        ({"env": {"YOLO_DET_DETERMINISTIC": "on"}}, "environment: YOLO_DET_DETERMINISTIC= 'on' is not one of strict, warn, off"),
        ({"cli": {"deterministic": "bogus"}}, "--deterministic 'bogus' is not one of strict, warn, off"),
        ({"hyp": {"deterministic_backward": 1}}, "hyp.yaml: deterministic_backward: 1 is not one of strict, warn, off"),
        ({"hyp": {"deterministic_ops": "fast"}}, "hyp.yaml: deterministic_ops: 'fast' is not one of replace, native"),
        ({"hyp": {"deterministic_allow": 5}}, "hyp.yaml: deterministic_allow: 5 is not a list of op names"),
        ({"env": {"YOLO_DET_FILL_MEMORY": "maybe"}}, "environment: YOLO_DET_FILL_MEMORY= 'maybe' is not a boolean"),
    ],
)
def test_bad_values_name_source_value_and_choices(kwargs, message):
    kwargs.setdefault("env", {})
    with pytest.raises(ConfigError) as err:
        resolve(**kwargs)
    assert str(err.value).startswith(message)
    assert isinstance(err.value, ValueError)


def test_hyp_file_name_appears_in_error():
    with pytest.raises(ConfigError, match=r"^data/hyp\.custom\.yaml: deterministic: 'x'"):
        resolve(hyp={"deterministic": "x"}, hyp_name="data/hyp.custom.yaml", env={})


def test_backward_defaults_to_global_mode_and_can_differ():
    assert resolve(cli={"deterministic": "strict"}, env={}).backward_mode == "strict"
    s = resolve(cli={"deterministic": "strict"}, hyp={"deterministic_backward": "off"}, env={})
    assert (s.mode, s.backward_mode, s.sources["deterministic_backward"]) == ("strict", "off", "hyp")


def test_allow_list_from_yaml_list_and_env_string():
    assert resolve(hyp={"deterministic_allow": ["a_cuda", "b_cuda"]}, env={}).allow == ("a_cuda", "b_cuda")
    assert resolve(env={"YOLO_DET_ALLOW": "a_cuda, b_cuda"}).allow == ("a_cuda", "b_cuda")


def test_fill_memory_booleans():
    assert resolve(hyp={"deterministic_fill_memory": False}, env={}).fill_uninitialized_memory is False
    assert resolve(env={"YOLO_DET_FILL_MEMORY": "1"}).fill_uninitialized_memory is True


def test_pop_hyp_keys_removes_only_yolo_det_keys():
    hyp = {"lr0": 0.01, "deterministic": "strict", "deterministic_allow": ["x"], "mosaic": 1.0}
    popped = pop_hyp_keys(hyp)
    assert popped == {"deterministic": "strict", "deterministic_allow": ["x"]}
    assert hyp == {"lr0": 0.01, "mosaic": 1.0}
    assert pop_hyp_keys(hyp) == {}


def test_yaml_unquoted_off_means_off_and_true_gets_a_hint():
    import yaml

    hyp = yaml.safe_load("deterministic: off\ndeterministic_backward: off\n")
    assert hyp["deterministic"] is False  # PyYAML's YAML 1.1 booleans
    s = resolve(hyp=hyp, env={})
    assert (s.mode, s.backward_mode, s.source) == ("off", "off", "hyp")
    with pytest.raises(ConfigError, match="YAML reads unquoted on/yes/true as a boolean"):
        resolve(hyp=yaml.safe_load("deterministic: on"), env={})


def test_an_unknown_yolo_det_key_is_an_error_naming_the_key_the_file_and_the_known_keys():
    hyp = {"lr0": 0.01, "deterministic_foo": "strict", "deterministic": "off"}
    with pytest.raises(ConfigError) as info:
        resolve(hyp=hyp, env={}, hyp_name="data/hyps/my.yaml")
    message = str(info.value)
    assert message.startswith("data/hyps/my.yaml: unknown yolo-det key 'deterministic_foo'")
    assert "deterministic, deterministic_backward, deterministic_allow, deterministic_ops" in message
    assert pop_hyp_keys(hyp) == {"deterministic_foo": "strict", "deterministic": "off"}  # evolve never sees it
    assert resolve(hyp={"deterministicness": 1, "lr0": 0.1}, env={}).source == "default"  # not ours


def test_every_source_takes_a_mode_in_any_case():
    import argparse

    from yolo_det.cli import main as cli_main
    from yolo_det.core.mode import MODES, mode_arg
    from yolo_det.integrations.yolov5 import script as v5

    parser = v5.add_arguments(argparse.ArgumentParser())
    assert parser.parse_args(["--deterministic", "STRICT"]).deterministic == "strict"
    plain = argparse.ArgumentParser()
    plain.add_argument("--deterministic", type=mode_arg, choices=MODES)
    assert plain.parse_args(["--deterministic", "Off"]).deterministic == "off"
    assert resolve(hyp={"deterministic": "STRICT"}, env={}).mode == "strict"
    assert resolve(env={"YOLO_DET_DETERMINISTIC": "Strict"}).mode == "strict"
    assert cli_main(["env", "--exports", "--deterministic", "WARN"]) == 0


def test_settings_saved_with_a_resumed_run_rank_below_the_environment():
    saved = {"deterministic": "strict", "deterministic_allow": ("op_a",)}
    kept = resolve(saved=saved, env={})
    assert (kept.mode, kept.source, kept.allow, kept.sources["deterministic_allow"]) == ("strict", "resume", ("op_a",), "resume")
    assert kept.sources["deterministic_ops"] == "default"
    assert resolve(saved=saved, env={"YOLO_DET_DETERMINISTIC": "warn"}).source == "env"
    assert resolve(cli={"deterministic": "off"}, saved=saved, env={}).mode == "off"
    with pytest.raises(ConfigError, match="the resumed run's saved deterministic: 'always'"):
        resolve(saved={"deterministic": "always"}, env={})


def test_a_mode_handed_on_by_yolo_det_run_is_said_to_come_from_its_option():
    """`yolo-det run --deterministic strict` hands the mode on through the environment; the run says where the user
    typed it (issue 60, item 7), and a value the environment changed since is the environment's."""
    from yolo_det.core.mode import SOURCE_LABELS

    launched = {"YOLO_DET_DETERMINISTIC": "strict", "YOLO_DET_MODE_FROM_RUN": "strict"}
    assert resolve(env=launched).source == "run" and SOURCE_LABELS["run"] == "yolo-det run --deterministic"
    assert resolve(env={**launched, "YOLO_DET_DETERMINISTIC": "warn"}).source == "env"
    assert resolve(env={"YOLO_DET_DETERMINISTIC": "strict"}).source == "env"
    assert resolve(cli={"deterministic": "off"}, env=launched).source == "cli"
