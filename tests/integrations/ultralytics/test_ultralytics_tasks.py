"""Ultralytics for every user: `yolo-det run -- yolo train` and `-- python script.py` (the launch
bootstrap), `yolo_det.ultralytics.enable()`, every task and RT-DETR, resume that keeps its mode,
and `yolo-det ultralytics train`'s `yolo` syntax and errors.

Real Ultralytics training from yaml models at 32 px on 4 synthetic images, 1 epoch, CPU.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("ultralytics")

from ultralytics import RTDETR, YOLO  # noqa: E402
from ultralytics.engine.model import Model  # noqa: E402
from ultralytics.utils import LOGGER  # noqa: E402

import yolo_det  # noqa: E402
from yolo_det import session as runtime  # noqa: E402
from yolo_det.cli import main as cli_main  # noqa: E402
from yolo_det.integrations import launch  # noqa: E402
from yolo_det.integrations import resume as resume_state  # noqa: E402
from yolo_det.integrations.ultralytics import trainer as integ  # noqa: E402
from yolo_det.proof.compare import compare_logs  # noqa: E402
from yolo_det.strict.audit import emulate_cuda_alerts  # noqa: E402
from yolo_det.synthetic import make_task_dataset  # noqa: E402

from support.cli import cli  # noqa: E402
from conftest import PYTHON, ROOT, run  # noqa: E402

YOLO_CLI = str(Path(PYTHON).parent / "yolo")
TASKS = {  # task -> (model yaml, the yolo-det trainer Ultralytics' own trainer map leads to)
    "detect": ("yolov8n.yaml", "DeterministicTrainer"),
    "segment": ("yolov8n-seg.yaml", "DeterministicSegmentationTrainer"),
    "pose": ("yolov8n-pose.yaml", "DeterministicPoseTrainer"),
    "obb": ("yolov8n-obb.yaml", "DeterministicOBBTrainer"),
    "classify": ("yolov8n-cls.yaml", "DeterministicClassificationTrainer"),
}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    return {task: make_task_dataset(root / task, task, n_train=4, n_val=2, imgsz=32 if task == "classify" else 64)
            for task in TASKS}


@pytest.fixture
def env(train_env):
    """A launch environment for subprocesses: offline, this checkout's yolo_det, no yolo-det switches."""
    out = {k: v for k, v in train_env.items() if not k.startswith("YOLO_DET_")}
    out["PYTHONPATH"] = str(ROOT)
    return out


@pytest.fixture
def enabled():
    """enable() for one test; afterwards Ultralytics picks its own trainers and os.environ is as before."""
    before = dict(os.environ)
    integ.enable()
    yield
    integ.disable()
    os.environ.clear()
    os.environ.update(before)


def args_for(task: str, data: Path, project: Path, name: str) -> dict:
    return dict(data=str(data), epochs=1, imgsz=32, batch=4, workers=0, plots=False, val=False, amp=False,
                device="cpu", project=str(project), name=name, exist_ok=True, seed=0)


def pairs(args: dict) -> list:
    return [f"{k}={v}" for k, v in args.items()]


def report(run_dir: Path) -> dict:
    return json.loads((run_dir / "determinism.json").read_text())


def assert_strict_run(run_dir: Path, trainer: str, source: str) -> None:
    data = report(run_dir)
    assert data["ultralytics"]["launched_by_yolo_det_run"] is (source == "run")
    assert (data["mode"], data["mode_source"]) == ("strict", source)
    assert data["flags_applied"]["warn_only"] is False and data["steps"] >= 1
    assert data["ultralytics"]["status"] == "completed"
    assert data["ultralytics"]["trainer"] == f"yolo_det.integrations.ultralytics.{trainer}"


def assert_identical(log_a: Path, log_b: Path, run_a: Path, run_b: Path) -> None:
    result = compare_logs(log_a, log_b)
    assert result.identical and result.steps >= 1, result.first_divergence
    a, b = (torch.load(r / "weights" / "last.pt", weights_only=False, map_location="cpu")["model"].state_dict()
            for r in (run_a, run_b))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- yolo-det run: the launch bootstrap ---------------------------------------------------------

@pytest.fixture(scope="module")
def every_task(datasets, train_env, tmp_path_factory):
    """Every task trained strict once through `yolo-det run -- yolo train` and once through enable() in this process.

    The two runs of a task are compared with each other: bit-identical across the two ways in, which also
    shows each way trains the same twice, for half the training runs of two pairs per way. One launch runs a
    shell that runs the five `yolo train` commands (each its own process, with its own fingerprint log): what
    the bootstrap must survive, and one yolo-det start-up instead of five.
    """
    root = tmp_path_factory.mktemp("every-task")
    env = {k: v for k, v in train_env.items() if not k.startswith("YOLO_DET_")}
    env["PYTHONPATH"] = str(ROOT)
    lines = ["set -e"]
    for task, (model, _) in TASKS.items():
        cmd = [YOLO_CLI, "train", f"model={model}", *pairs(args_for(task, datasets[task], root, f"{task}-cli"))]
        log = root / f"{task}-cli.jsonl"
        lines.append(f"YOLO_DET_FINGERPRINT={shlex.quote(str(log))} " + " ".join(shlex.quote(str(c)) for c in cmd))
    launched = run([PYTHON, "-m", "yolo_det", "run", "--deterministic", "strict", "--", "sh", "-c", "\n".join(lines)],
                   cwd=root, env=env)
    before = dict(os.environ)
    integ.enable()  # as the `enabled` fixture: afterwards Ultralytics picks its own trainers, os.environ as before
    try:
        hooked = integ.enabled() and getattr(Model._smart_load, "_yolo_det", False)
        for task, (model, _) in TASKS.items():
            os.environ["YOLO_DET_FINGERPRINT"] = str(root / f"{task}-enable.jsonl")
            YOLO(model).train(deterministic="strict", **args_for(task, datasets[task], root, f"{task}-enable"))
        session_left = runtime.current()
    finally:
        integ.disable()
        os.environ.clear()
        os.environ.update(before)
    return SimpleNamespace(root=root, launched=launched, hooked=hooked, session_left=session_left)


def assert_task_identical(root: Path, task: str, a: str, b: str) -> None:
    assert_identical(root / f"{task}-{a}.jsonl", root / f"{task}-{b}.jsonl", root / f"{task}-{a}", root / f"{task}-{b}")


@pytest.mark.slow
def test_yolo_cli_under_yolo_det_run_trains_every_task_strict_and_bit_identically(every_task):
    """`yolo-det run --deterministic strict -- yolo train ...`, nothing else changed: strict, and bit-identical
    to the same training through enable() (every_task)."""
    result = every_task.launched
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    for task, (_, trainer) in TASKS.items():
        assert_strict_run(every_task.root / f"{task}-cli", trainer, "run")  # yolo-det run --deterministic
        assert_task_identical(every_task.root, task, "cli", "enable")


SCRIPT = '''
import os, sys
from ultralytics import YOLO  # plain Ultralytics: no yolo-det import, no trainer=
for name, task, model in (("a", "detect", "yolov8n.yaml"), ("a", "pose", "yolov8n-pose.yaml"),
                         ("b", "detect", "yolov8n.yaml")):  # b after two trainings in this process
    os.environ["YOLO_DET_FINGERPRINT"] = os.path.join(sys.argv[1], f"{task}-{name}.jsonl")
    YOLO(model).train(data=sys.argv[2] if task == "detect" else sys.argv[3], epochs=1, imgsz=32, batch=4,
                      workers=0, plots=False, val=False, amp=False, device="cpu", project=sys.argv[1],
                      name=f"{task}-{name}", exist_ok=True, seed=0)
'''


@pytest.mark.slow
def test_python_script_under_yolo_det_run_trains_with_yolo_det_without_code_changes(datasets, env, every_task,
                                                                                     tmp_path):
    """Three trainings in one plain script: strict through the bootstrap, each bit-identical to the same training
    through `yolo-det run -- yolo train` and enable() (every_task), the third to the first."""
    script = tmp_path / "my_script.py"
    script.write_text(SCRIPT)
    cmd = [PYTHON, "-m", "yolo_det", "run", "--deterministic", "strict", "--", PYTHON, script, tmp_path,
           datasets["detect"], datasets["pose"]]
    result = run(cmd, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    for task, name in (("detect", "a"), ("pose", "a"), ("detect", "b")):
        assert_strict_run(tmp_path / f"{task}-{name}", TASKS[task][1], "run")
        for other in ("cli", "enable"):
            assert_identical(tmp_path / f"{task}-{name}.jsonl", every_task.root / f"{task}-{other}.jsonl",
                             tmp_path / f"{task}-{name}", every_task.root / f"{task}-{other}")
    assert_identical(tmp_path / "detect-a.jsonl", tmp_path / "detect-b.jsonl", tmp_path / "detect-a",
                     tmp_path / "detect-b")


@pytest.mark.slow
def test_without_yolo_det_in_the_launch_yolo_train_is_untouched(datasets, env, tmp_path):
    result = run([YOLO_CLI, "train", "model=yolov8n.yaml", *pairs(args_for("detect", datasets["detect"], tmp_path, "plain"))],
                 cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert (tmp_path / "plain" / "weights" / "last.pt").is_file()
    assert not (tmp_path / "plain" / "determinism.json").exists()
    assert "yolo-det" not in result.stdout + result.stderr


PROBE = '''
import os, sys
from ultralytics import YOLO
from ultralytics.engine.model import Model
print("PROBE", getattr(Model._smart_load, "_yolo_det", False), os.environ.get("OTHER_SITE"),
      "yolo_det" in sys.modules, YOLO("yolov8n-seg.yaml", verbose=False)._smart_load("trainer").__name__)
'''


@pytest.mark.slow  # starts interpreters that import torch (about 8 s)
def test_bootstrap_chains_to_an_existing_sitecustomize_and_acts_only_when_launched(env, tmp_path):
    other = tmp_path / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text('import os\nos.environ["OTHER_SITE"] = "ran"\n')
    base = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(other)])}
    # the command's own children (as Ultralytics' DDP workers are) inherit the bootstrap
    nested = f"import subprocess, sys; sys.exit(subprocess.call([sys.executable, '-c', {PROBE!r}]))"
    launched = run([PYTHON, "-m", "yolo_det", "run", "--", PYTHON, "-c", nested], cwd=tmp_path, env=base)
    assert launched.returncode == 0, launched.stderr[-3000:]
    # the integration waits for the first trainer lookup: importing Ultralytics does not import yolo_det
    assert "PROBE True ran False DeterministicSegmentationTrainer" in launched.stdout
    child = {**base, **launch.child_env(base)}
    child.pop(launch.BOOTSTRAP_VAR)  # the folder on PYTHONPATH without yolo-det's launch: nothing changes
    alone = run([PYTHON, "-c", PROBE], cwd=tmp_path, env=child)
    assert "PROBE False ran False SegmentationTrainer" in alone.stdout, alone.stderr[-3000:]


def test_child_env_puts_the_bootstrap_first_once():
    env = launch.child_env({"PYTHONPATH": os.pathsep.join(["/x", str(launch.BOOTSTRAP_DIR)])})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(launch.BOOTSTRAP_DIR), "/x"]
    assert env[launch.BOOTSTRAP_VAR] == "1" and (launch.BOOTSTRAP_DIR / "sitecustomize.py").is_file()
    assert "yolo_det.integrations = bootstrap/*.py" in (ROOT / "setup.cfg").read_text()  # shipped as package data


# -- enable(): every task, RT-DETR ----------------------------------------------------------------

@pytest.mark.slow
def test_enable_makes_plain_model_train_use_yolo_det_for_every_task(every_task):
    """Plain ``YOLO(model).train(...)`` after enable() trains every task strict with yolo-det's trainer, bit-identical
    to the same training through `yolo-det run -- yolo train` (every_task); disable() gives Ultralytics its own back."""
    assert every_task.hooked
    for task, (_, trainer) in TASKS.items():
        assert_strict_run(every_task.root / f"{task}-enable", trainer, "cli")
        assert_task_identical(every_task.root, task, "enable", "cli")
    assert every_task.session_left is None
    assert not integ.enabled() and YOLO("yolov8n.yaml")._smart_load("trainer").__name__ == "DetectionTrainer"


def test_every_trainer_gets_a_yolo_det_class_once():
    from ultralytics.models.yolo.segment import SegmentationTrainer
    from ultralytics.models.yolo.world import WorldTrainer

    assert integ.deterministic_trainer(SegmentationTrainer) is integ.DeterministicSegmentationTrainer
    assert integ.deterministic_trainer(integ.DeterministicPoseTrainer) is integ.DeterministicPoseTrainer
    world = integ.deterministic_trainer(WorldTrainer)
    assert world.__mro__[1:3] == (integ.DeterminismMixin, WorldTrainer) and integ.deterministic_trainer(WorldTrainer) is world

    class MySegmentation(SegmentationTrainer):
        pass

    mine = integ.deterministic_trainer(MySegmentation)
    assert issubclass(mine, MySegmentation) and mine is not integ.DeterministicSegmentationTrainer
    assert YOLO("yolov8n-obb.yaml").task_map["obb"]["trainer"] in integ.TRAINERS


#: RT-DETR's decoder (its MSDeformAttn) on a five-convolution backbone, one decoder layer of 30 queries: the
#: swap and the refusal are the decoder's; rtdetr-l.yaml's 32M-parameter HGNet and six layers cost 2.5 times as much
TINY_RTDETR = """
nc: 80
backbone:
  - [-1, 1, Conv, [16, 3, 2]] # 0-P1/2
  - [-1, 1, Conv, [16, 3, 2]] # 1-P2/4
  - [-1, 1, Conv, [32, 3, 2]] # 2-P3/8
  - [-1, 1, Conv, [32, 3, 2]] # 3-P4/16
  - [-1, 1, Conv, [32, 3, 2]] # 4-P5/32
head:
  - [[2, 3, 4], 1, RTDETRDecoder, [nc, 32, 30, 4, 2, 1, 64]] # hd, nq, ndp, nh, ndl, d_ffn
"""


@pytest.mark.slow
def test_rtdetr_strict_with_cuda_alerts_swaps_in_grid_sample_and_trains(datasets, tmp_path, enabled):
    """RT-DETR's MSDeformAttn calls grid_sample, whose CUDA backward has no deterministic kernel."""
    args = {**args_for("detect", datasets["detect"], tmp_path, "rtdetr"), "batch": 2}
    model_yaml = tmp_path / "tiny-rtdetr.yaml"
    model_yaml.write_text(TINY_RTDETR)
    with emulate_cuda_alerts():
        RTDETR(str(model_yaml)).train(deterministic="strict", **args)
    data = report(tmp_path / "rtdetr")
    assert data["ultralytics"]["trainer"].endswith("DeterministicRTDETRTrainer")
    assert data["mode"] == "strict" and data["ultralytics"]["status"] == "completed" and data["steps"] >= 1
    swapped = [r for r in data["replacements"] if r["from"] == "MSDeformAttn"]
    assert swapped and all("grid_sample" in r["to"] and "grid_sampler_2d_backward" in r["ops"] for r in swapped)
    assert data["violations"]["ops"] == []
    # the same training without the replacements, through train() (it picks RT-DETR's own trainer, not the
    # detection trainer, which failed with "'RTDETRDecoder' object has no attribute 'stride'"): strict stops
    # on the emulated CUDA alert
    integ.disable()
    with emulate_cuda_alerts(), pytest.raises(yolo_det.NondeterministicOpError, match="grid_sampler_2d_backward_cuda"):
        integ.train(RTDETR(str(model_yaml)), deterministic="strict", deterministic_ops="native",
                    **{**args, "name": "native"})
    assert report(tmp_path / "native")["ultralytics"]["trainer"].endswith("DeterministicRTDETRTrainer")


# -- resume keeps its mode ------------------------------------------------------------------------

class Interrupted(RuntimeError):
    pass


@pytest.mark.slow
def test_resume_keeps_strict_and_the_checkpoints_seed(datasets, tmp_path, enabled, monkeypatch):
    args = {**args_for("detect", datasets["detect"], tmp_path, "run"), "epochs": 2, "seed": 7}
    model = YOLO("yolov8n.yaml")

    def stop_after_first_save(trainer):
        raise Interrupted("stopped after epoch 1")

    # a slow disk: the sidecar is written on a background thread; train() must not return (or raise) before
    # it is on disk, or a resume right after finds last.pt without it (seen in CI as a refused resume)
    write = resume_state.Writer._write

    def slow_write(self, *a, **k):
        time.sleep(1.5)
        return write(self, *a, **k)

    monkeypatch.setattr(resume_state.Writer, "_write", slow_write)
    model.add_callback("on_model_save", stop_after_first_save)
    with pytest.raises(Interrupted):
        model.train(deterministic="strict", **args)
    assert (tmp_path / "run" / "weights" / "last.pt.yolo-det").is_file()
    monkeypatch.undo()
    last = tmp_path / "run" / "weights" / "last.pt"
    assert report(tmp_path / "run")["ultralytics"]["status"].startswith("failed: Interrupted")

    # an explicit mode wins over the saved one, and the run says so (checked without training)
    trainer = integ.DeterministicTrainer(overrides={"model": str(last), "resume": str(last), "deterministic": "warn"})
    assert (trainer.yolo_det.settings.mode, trainer.yolo_det.settings.source) == ("warn", "cli")
    assert trainer.yolo_det.extra["resume"]["overridden"] == {"deterministic": "cli"}
    trainer.yolo_det.finish(echo=lambda _: None)
    trainer._yolo_det_caller.restore()

    # `yolo-det ultralytics train resume model=last.pt`: no mode given, the run's own comes back
    logged = logging.Handler()
    logged.emit = lambda record: messages.append(record.getMessage())  # type: ignore[assignment]
    messages: list = []
    LOGGER.addHandler(logged)
    try:
        assert cli_main(["ultralytics", "train", "resume", f"model={last}"]) == 0
    finally:
        LOGGER.removeHandler(logged)
    data = report(tmp_path / "run")
    assert (data["mode"], data["mode_source"], data["seed"]) == ("strict", "resume", 7)
    assert data["flags_applied"]["warn_only"] is False and data["ultralytics"]["status"] == "completed"
    assert data["resume"]["kept"] == ["deterministic"] and data["resume"]["seed"] == 7
    # exact: the resumed epoch steps where the uninterrupted run would (with accumulate 8 over 8 batches and the
    # last step at batch 0, not at all), not at once as the release's restarted last_opt_step had it
    assert data["resume"]["exact"] is True
    assert any("deterministic=strict, as saved with the run" in m for m in messages)


# -- `yolo-det ultralytics train`: the yolo CLI's syntax, errors in one line, exit 2 ---------------

def test_cli_takes_the_yolo_syntax():
    from yolo_det.cli.ultralytics import parse_pairs

    assert parse_pairs(["train", "segment", "model=yolov8n-seg.yaml", "epochs", "=", "3", "--amp=False", "resume",
                        "deterministic=strict"]) == {
        "task": "segment", "model": "yolov8n-seg.yaml", "epochs": 3, "amp": False, "resume": True,
        "deterministic": "strict"}


@pytest.mark.parametrize("args, message", [
    (["model=yolov8n.yaml", "data=/nonexistent.yaml"], "'/nonexistent.yaml' does not exist"),
    (["model=nope.yaml", "data={data}"], "FileNotFoundError: 'nope.yaml' does not exist"),
    (["model=yolov8n.yaml"], "data= is required"),
    (["model=yolov8n.yaml", "data={data}", "epochs=abc"], "'epochs=abc' is of invalid type str"),
    (["model=yolov8n.yaml", "data={data}", "colour=red"], "unknown argument colour"),
    (["model=yolov8n.yaml", "data={data}", "task=detection"], "task='detection' is not one of"),
    (["model=yolov8n.yaml", "data={data}", "predict"], "only trains"),
])
def test_cli_errors_are_one_line_and_exit_2(args, message, datasets, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    before = dict(os.environ)
    args = [a.format(data=datasets["detect"]) for a in args] + [f"project={tmp_path}", "name=bad", "device=cpu"]
    try:
        assert cli_main(["ultralytics", "train", *args]) == 2
    finally:
        os.environ.clear()
        os.environ.update(before)
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("yolo-det ultralytics train: ")
    if "nonexistent" in message:  # a run folder was made: it holds the report of the failure
        data = report(tmp_path / "bad")
        assert data["ultralytics"]["status"].startswith("failed: RuntimeError: Dataset '/nonexistent.yaml'")


@pytest.mark.slow
def test_verify_fingerprints_plain_yolo_train_through_the_bootstrap(datasets, env, tmp_path):
    """`yolo-det verify -- yolo train ...` needs no `yolo-det run`: verify's runs get the same bootstrap."""
    train = [YOLO_CLI, "train", "model=yolov8n.yaml", "deterministic=strict",
             *pairs(args_for("detect", datasets["detect"], tmp_path, "v{run}"))]
    result = cli("verify", "--workdir", tmp_path / "w", "--json", "--", *train, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    data = json.loads(result.stdout)
    assert data["identical"] and data["steps"] >= 1
    for name in ("v1", "v2"):
        saved = report(tmp_path / name)
        assert (saved["mode"], saved["mode_source"], saved["ultralytics"]["status"]) == ("strict", "cli", "completed")
        assert saved["ultralytics"]["trainer"] == f"yolo_det.integrations.ultralytics.{TASKS['detect'][1]}"
