"""``yolo-det audit``: sources (--model, --cfg with and without --repo, --ultralytics), output,
JSON, exit codes 0/1/2 and error messages without tracebacks."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import PYTHON, run
from yolo_det.cli import main

TESTS = Path(__file__).resolve().parents[1]

FACTORY = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import torch
from models import BLOCKS, detector

def scam():
    return detector(BLOCKS["scam"](8), c=8)

def plain():
    return detector(c=8), torch.rand(2, 3, 32, 32)

def broken():
    raise ImportError("no module named timm")

def not_a_model():
    return 42
"""

# A YOLOv5-shaped repository written for this test: models/yolo.py builds Model(cfg) from
# the yaml, models/common.py holds a custom block with a functional adaptive max pool.
REPO_FILES = {
    "models/__init__.py": "",
    "utils/__init__.py": "CHANNELS = 8\n",
    "models/common.py": """
        import torch.nn as nn
        import torch.nn.functional as F


        class Conv(nn.Module):
            def __init__(self, c1, c2, s=1):
                super().__init__()
                self.conv = nn.Conv2d(c1, c2, 3, s, 1)
                self.act = nn.SiLU()

            def forward(self, x):
                return self.act(self.conv(x))


        class GlobalMaxGate(nn.Module):
            def __init__(self, c1, c2):
                super().__init__()
                self.fc = nn.Conv2d(c1, c2, 1)

            def forward(self, x):
                return x * self.fc(F.adaptive_max_pool2d(x, 1)).sigmoid()
        """,
    "models/yolo.py": """
        import torch.nn as nn
        import yaml

        from models.common import Conv, GlobalMaxGate
        from utils import CHANNELS


        class Model(nn.Module):
            def __init__(self, cfg, ch=3, nc=None):
                super().__init__()
                with open(cfg) as f:
                    spec = yaml.safe_load(f)
                layers, c = [], ch
                for name, stride in spec["layers"]:
                    block = {"Conv": lambda: Conv(c, CHANNELS, stride), "GlobalMaxGate": lambda: GlobalMaxGate(c, c)}[name]()
                    layers.append(block)
                    c = CHANNELS
                self.model = nn.Sequential(*layers)

            def forward(self, x):
                return [self.model(x)]
        """,
    "models/custom.yaml": "layers: [[Conv, 2], [Conv, 2], [GlobalMaxGate, 1], [Conv, 1]]\n",
}


@pytest.fixture
def factory(tmp_path) -> Path:
    path = tmp_path / "my_models.py"
    path.write_text(FACTORY)
    return path


def test_findings_print_a_table_and_exit_1(factory, capsys):
    assert main(["audit", "--model", f"{factory}:scam", "--imgsz", "32"]) == 1
    out = capsys.readouterr().out
    assert "my_models.py:scam" in out and "1 op(s) would raise under strict on CUDA" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("adaptive_max_pool2d_backward"))
    for cell in ("adaptive_max_pool2d_backward_cuda", "model.7.att.max", "yolo-det replacement"):
        assert cell in row


def test_json_output(factory, capsys):
    assert main(["audit", "--model", f"{factory}:scam", "--imgsz", "32", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["torch"] and data["model"] == "my_models.py:scam"
    (op,) = data["ops"]
    assert {"op", "cuda_kernel", "modules", "fix"} <= set(op)
    assert (op["op"], op["cuda_kernel"], op["modules"]) == (
        "adaptive_max_pool2d_backward", "adaptive_max_pool2d_backward_cuda", ["model.7.att.max"])


def test_clean_model_exits_0_with_an_empty_op_list(factory, capsys):
    assert main(["audit", "--model", f"{factory}:plain", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ops"] == []


def test_torch_version_prediction(factory, capsys):
    assert main(["audit", "--model", f"{factory}:scam", "--imgsz", "32", "--torch", "1.6"]) == 0
    assert "torch 1.6, predicted from the op table" in capsys.readouterr().out


@pytest.mark.parametrize("args,message", [
    (["--model", "{factory}:missing"], "has no function 'missing'"),
    (["--model", "{factory}:broken"], "ImportError: no module named timm"),
    (["--model", "{factory}:not_a_model"], "returned int, not a torch.nn.Module"),
    (["--model", "nowhere.py:build"], "nowhere.py not found"),
    (["--model", "{factory}"], "expected path/to/file.py:function"),
    (["--cfg", "no_such_model.yaml"], "no_such_model.yaml: no such file"),
    (["--cfg", "models/custom.yaml", "--repo", "{tmp}/not_a_repo"], "models/yolo.py not found"),
    (["--model", "{factory}:scam", "--repo", "x"], "--repo goes with --cfg"),
    (["--model", "{factory}:scam", "--torch", "two"], "--torch: 'two' is not a torch version"),
    (["--ultralytics", "yolov99z.yaml"], "cannot load the model yaml"),
])
def test_errors_exit_2_with_a_message_and_no_traceback(args, message, factory, tmp_path, capsys):
    args = [a.format(factory=factory, tmp=tmp_path) for a in args]
    assert main(["audit"] + args) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("yolo-det audit: error: ") and message in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_repo_models_with_custom_modules(tmp_path, capsys):
    repo = tmp_path / "yolov5-fork"
    for name, text in REPO_FILES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(textwrap.dedent(text))
    before = {k for k in sys.modules if k.split(".")[0] in ("models", "utils")}
    assert main(["audit", "--cfg", "models/custom.yaml", "--repo", str(repo), "--imgsz", "32", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [(o["op"], o["modules"]) for o in data["ops"]] == [("adaptive_max_pool2d_backward", ["model.2"])]
    after = {k for k in sys.modules if k.split(".")[0] in ("models", "utils")}
    assert after == before  # the repo's packages did not leak into this process


def test_ultralytics_yaml(capsys):
    pytest.importorskip("ultralytics")
    assert main(["audit", "--ultralytics", "yolov8n.yaml", "--imgsz", "64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "yolov8n.yaml" and data["ops"] == []
    assert Path(data["file"]).is_file() and "ultralytics" in data["file"]  # the package's file it read


@pytest.mark.slow
def test_installed_command_audits_the_yolov5_package(tmp_path):
    result = run([PYTHON, "-m", "yolo_det", "audit", "--cfg", "models/yolov5n.yaml", "--imgsz", "64"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "model: yolov5n.yaml" in result.stdout and "clean" in result.stdout
    assert "Traceback" not in result.stderr


def test_inputs_too_large_to_allocate_and_factories_that_exit_are_errors(tmp_path, capsys):
    """Issue 16, item 13: a huge --imgsz is refused before allocating; sys.exit() in a factory is a build error."""
    exiting = tmp_path / "exiting.py"
    exiting.write_text("import sys\nimport torch.nn as nn\n\ndef build():\n    print('no GPU, giving up')\n"
                       "    sys.exit(3)\n\ndef forward_exits():\n    class M(nn.Module):\n"
                       "        def forward(self, x):\n            sys.exit(4)\n    return M()\n")
    cases = [
        (["--model", f"{exiting}:build"], "called sys.exit(3)"),
        (["--model", f"{exiting}:forward_exits"], "forward pass called sys.exit(4)"),
        (["--model", f"{tmp_path}/my_models.py:scam", "--imgsz", "100000", "--batch", "64"], "use a smaller --imgsz"),
    ]
    (tmp_path / "my_models.py").write_text(FACTORY)
    for args, message in cases:
        assert main(["audit"] + args) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith("yolo-det audit: error: ") and message in captured.err, captured.err
        assert "Traceback" not in captured.err + captured.out


def test_ultralytics_tasks_without_a_detection_trainer_and_open_vocabulary_models_are_built_offline(capsys):
    """Semantic segmentation and depth (yolo26) and YOLO-World build offline; the audit says what it leaves out."""
    pytest.importorskip("ultralytics")
    from ultralytics.nn import tasks

    for cfg, model_class in (("yolo26n-sem.yaml", "SemanticSegmentationModel"), ("yolo26n-depth.yaml", "DepthModel"),
                             ("yolov8s-worldv2.yaml", "WorldModel")):
        if not hasattr(tasks, model_class):
            continue  # an older ultralytics without this task
        assert main(["audit", "--ultralytics", cfg, "--imgsz", "32", "--json"]) == 0, cfg
        data = json.loads(capsys.readouterr().out)
        assert data["model"] == cfg and data["ops"] == []
        placeholder = [n for n in data["notes"] if "placeholder text embeddings" in n and "not audited" in n]
        assert bool(placeholder) == ("world" in cfg)


def write_repo(root: Path) -> Path:
    """The YOLOv5-shaped repository of :data:`REPO_FILES` under ``root``."""
    for name, text in REPO_FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


@pytest.mark.parametrize("option, path, repo", [
    ("--cfg", "/nonexistent/yolov5s.yaml", False),  # issue 55, item 7: audited the package's yolov5s.yaml, exit 0
    ("--cfg", "{tmp}/missing/yolov5n.yaml", False),
    ("--cfg", "./yolov5s.yaml", False),  # explicitly the working folder's file
    ("--cfg", "../yolov5s.yaml", False),
    ("--cfg", "no_such_folder/yolov5s.yaml", False),  # a folder part that exists nowhere
    ("--cfg", "/nonexistent/yolov5s.pt", False),
    ("--cfg", "/nonexistent/custom.yaml", True),  # the fork's models/custom.yaml is not that file
    ("--cfg", "elsewhere/custom.yaml", True),
    ("--ultralytics", "/nonexistent/yolov8n.yaml", False),
    ("--ultralytics", "{tmp}/missing/yolov8n.yaml", False),
])
def test_a_model_path_that_does_not_exist_exits_2_naming_it(option, path, repo, tmp_path, monkeypatch, capsys):
    if option == "--ultralytics":
        pytest.importorskip("ultralytics")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    path = path.format(tmp=tmp_path)
    args = ["audit", option, path, "--imgsz", "32"] + (["--repo", str(write_repo(tmp_path / "fork"))] if repo else [])
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("yolo-det audit: error: ") and f"{option} {path}" in captured.err
    assert "no such file" in captured.err and "Traceback" not in captured.err + captured.out
    assert "clean" not in captured.out


@pytest.mark.parametrize("cfg", ["custom.yaml", "models/custom.yaml", "{fork}/models/custom.yaml"])
def test_the_audited_model_file_is_named(cfg, tmp_path, monkeypatch, capsys):
    """A bare name may resolve to a repository's (or the package's) models/; the output says which file it audited."""
    fork = write_repo(tmp_path / "fork")
    monkeypatch.chdir(tmp_path)
    assert main(["audit", "--cfg", cfg.format(fork=fork), "--repo", str(fork), "--imgsz", "32"]) == 1
    out = capsys.readouterr().out
    assert f"file: {fork / 'models' / 'custom.yaml'}" in out
    assert main(["audit", "--cfg", cfg.format(fork=fork), "--repo", str(fork), "--imgsz", "32", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["file"] == str(fork / "models" / "custom.yaml")
