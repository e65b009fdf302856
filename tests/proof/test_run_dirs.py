"""``yolo-det diff RUN_A RUN_B``: run folders compared from what the releases write, causes first.

Fast tests build folders with the files YOLOv5 (opt.yaml, hyp.yaml) and Ultralytics (args.yaml)
write; the slow one trains plain Ultralytics (no yolo-det) under two releases installed side by
side (8.3.240 from ``scripts/compat.py``, and the installed 8.4) and diffs the two folders.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from support.builders import run_folder
from support.compat import compat, release
from conftest import PYTHON, ROOT, run
from yolo_det.cli import main as cli_main
from yolo_det.core import data_manifest as dm
from yolo_det.proof.run_dirs import compare_runs, settings_differences, RunFolder

RESULTS_HEAD = "epoch,train/box_loss,metrics/mAP50-95(B),time\n"


def folder(path: Path, args=None, opt=None, hyp=None, results=None, weights=None) -> Path:
    if weights is not None:  # weights/last.pt with one tensor of this value, as a release saves it
        import torch

        weights = {"w": torch.full((3,), float(weights))}
    files = None if results is None else {
        "results.csv": RESULTS_HEAD + "".join(f"{i + 1},0.5,{m},{i * 7.3}\n" for i, m in enumerate(results))}
    return run_folder(path, args=args, opt=opt, hyp=hyp, weights=weights, files=files)


def test_identical_folders_exit_0_and_output_locations_are_not_settings(tmp_path, capsys):
    args = {"model": "yolov8n.yaml", "epochs": 2, "lr0": 0.01, "name": "a", "save_dir": "runs/a"}
    a = folder(tmp_path / "a", args=args, results=[0.1, 0.2], weights=1)
    b = folder(tmp_path / "b", args=dict(args, name="b", save_dir="runs/b"), results=[0.1, 0.2], weights=1)
    (b / "results.csv").write_text((b / "results.csv").read_text().replace(",7.3", ",9.9"))  # time: not judged
    assert cli_main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("identical: settings (args.yaml), weights/last.pt (1 tensors), results.csv (2 rows)")
    assert "neither run recorded a data manifest" in out


def test_folders_without_weights_are_not_proven_identical(tmp_path, capsys):
    """Matching settings and results.csv, no checkpoint: what was compared is said, the verdict is not proven
    (exit 3), never "identical"; weights that differ are a finding (exit 1)."""
    args = {"model": "yolov8n.yaml", "epochs": 2, "lr0": 0.01}
    a = folder(tmp_path / "a", args=args, results=[0.1, 0.2])
    b = folder(tmp_path / "b", args=args, results=[0.1, 0.2])
    assert cli_main(["diff", str(a), str(b)]) == 3
    out = capsys.readouterr().out
    assert out.startswith("not proven: nothing differs in what was compared (settings (args.yaml), results.csv "
                          "(2 rows)), but weights (weights/last.pt, weights/best.pt) were not compared")
    assert not compare_runs(a, b).identical and compare_runs(a, b).verdict == "not proven"
    c = folder(tmp_path / "c", args=args, results=[0.1, 0.2], weights=1)
    d = folder(tmp_path / "d", args=args, results=[0.1, 0.2], weights=2)
    assert cli_main(["diff", str(c), str(d)]) == 1
    assert "last.pt: checkpoints differ: 1 of 2 entries" in capsys.readouterr().out
    assert cli_main(["diff", str(a), str(c)]) == 1  # weights in one run only: they differ


def test_settings_compared_key_by_key_with_the_release_that_lacks_a_key(tmp_path):
    a = RunFolder(tmp_path, release="ultralytics 8.3.240", settings={"lr0": 0.01, "label_smoothing": 0.0,
                                                                    "multi_scale": False})
    b = RunFolder(tmp_path, release="ultralytics 8.4.190", settings={"lr0": 0.02, "multi_scale": 0.0, "cutmix": 0.0})
    assert settings_differences(a, b) == [
        "lr0: 0.01 vs 0.02",
        "label_smoothing: 0.0 in A (ultralytics 8.3.240), absent in B (ultralytics 8.4.190)",
        "multi_scale: False vs 0.0",
        "cutmix: absent in A (ultralytics 8.3.240), 0.0 in B (ultralytics 8.4.190)",
    ]


def test_yolov5_opt_and_hyp_and_metrics_per_epoch(tmp_path, capsys):
    hyp = {"lr0": 0.01, "mosaic": 1.0}
    a = folder(tmp_path / "a", opt={"epochs": 2, "hyp": hyp, "data": "d.yaml"}, hyp=hyp, results=[0.1, 0.2])
    b = folder(tmp_path / "b", opt={"epochs": 2, "hyp": dict(hyp, mosaic=0.5), "data": "d.yaml"},
               hyp=dict(hyp, mosaic=0.5), results=[0.1, 0.25])
    assert cli_main(["diff", str(a), str(b), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["settings"] == ["hyp.mosaic: 1.0 vs 0.5"]
    assert result["causes"][0]["class"] == "config" and "hyp.mosaic" in result["causes"][0]["message"]
    assert result["metrics"] == [["1", "0.1", "0.1"], ["2", "0.2", "0.25"]]
    assert cli_main(["diff", str(a), str(b)]) == 1
    assert "epoch 2: 0.2 vs 0.25  <" in capsys.readouterr().out


def test_data_manifests_recorded_by_the_runs_name_the_files(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("YOLO_DET_CACHE_DIR", str(tmp_path / "cache"))
    from yolo_det.synthetic import make_dataset

    data = make_dataset(tmp_path / "ds", n_train=4, n_val=2, imgsz=64)
    a = folder(tmp_path / "a", args={"data": str(data)})
    dm.write(a, dm.from_data_yaml(data))
    (tmp_path / "ds/images/train/train_0001.png").unlink()
    b = folder(tmp_path / "b", args={"data": str(data)})
    dm.write(b, dm.from_data_yaml(data))
    assert cli_main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "likely cause (data): the runs read different data: 1 image file removed (train): " \
           "images/train/train_0001.png" in out
    c = folder(tmp_path / "c", args={"data": str(data)})  # made without yolo-det: its data as it is now
    assert compare_runs(a, c, weights=False).causes[0].cls == "data"
    same = compare_runs(b, c, weights=False)  # the same data, no weights compared: not proven, not identical
    assert not same.causes and not same.identical and same.verdict == "not proven"
    assert "data files" in same.compared


def test_not_a_run_folder_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert cli_main(["diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert "error" in capsys.readouterr().err


# -- two plain Ultralytics runs under two releases installed side by side -------------------------

PLAIN_TRAIN = """\
import sys
from ultralytics import YOLO
YOLO("yolov8n.yaml").train(data=sys.argv[1], epochs=1, imgsz=64, batch=4, workers=0, plots=False, val=False,
                           device="cpu", amp=False, project=sys.argv[2], name=sys.argv[3], exist_ok=True, seed=0)
"""


@pytest.mark.slow
def test_two_plain_ultralytics_releases_diffed_with_versions_and_arguments(tmp_path, train_env, dataset):
    pytest.importorskip("ultralytics")
    import ultralytics

    old = release("8.3.240")
    script = tmp_path / "train.py"
    script.write_text(PLAIN_TRAIN)
    runs = {}
    for name, path in (("old", compat.pythonpath(old)), ("new", os.environ.get("PYTHONPATH", ""))):
        env = dict(train_env, PYTHONPATH=path)
        for key in [k for k in env if k.startswith("YOLO_DET_")]:
            del env[key]
        proc = run([PYTHON, script, dataset, tmp_path / "runs", name], cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        runs[name] = tmp_path / "runs" / name
        assert not (runs[name] / "determinism.json").exists()  # made without yolo-det
    proc = run([PYTHON, "-m", "yolo_det", "diff", runs["old"], runs["new"], "--json"], cwd=ROOT)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["releases"] == ["ultralytics 8.3.240", f"ultralytics {ultralytics.__version__}"]
    assert result["causes"][0]["what"] == "release"
    args_a = yaml.safe_load((runs["old"] / "args.yaml").read_text())
    args_b = yaml.safe_load((runs["new"] / "args.yaml").read_text())
    only_a, only_b = set(args_a) - set(args_b), set(args_b) - set(args_a)
    assert only_a or only_b  # the releases' default.yaml differ
    text = "\n".join(result["settings"])
    for key in only_a:
        assert f"{key}: {args_a[key]!r}" in text or f"{key}: {args_a[key]}" in text
        assert "absent in B (ultralytics " in text
    for key in only_b:
        assert f"{key}: absent in A (ultralytics 8.3.240)" in text
    changed = {k for k in set(args_a) & set(args_b) if args_a[k] != args_b[k] and k not in ("name", "save_dir")}
    for key in changed:
        assert any(line.startswith(f"{key}: ") for line in result["settings"]), key


def test_silent_environment_switches_are_named_from_determinism_json(tmp_path):
    facts = {"amp": True, "train_workers": 8, "devices": 2, "device_names": ["NVIDIA H100", "NVIDIA H100"],
             "cudnn": 90100, "libraries": {"nvidia-cublas-cu12": "12.4.5.8"}}
    other = dict(facts, amp=False, train_workers=2, devices=1, device_names=["NVIDIA H100"])
    for name, f, mode in (("a", facts, "off"), ("b", other, "off"), ("c", other, "strict")):
        folder(tmp_path / name, args={"epochs": 1})
        (tmp_path / name / "determinism.json").write_text(json.dumps({"mode": mode, "run_facts": f}))
    whats = [c.what for c in compare_runs(tmp_path / "a", tmp_path / "b", weights=False).causes]
    assert {"amp", "workers", "devices", "device_names"} <= set(whats)
    amp = next(c for c in compare_runs(tmp_path / "a", tmp_path / "b", weights=False).causes if c.what == "amp")
    assert amp.message.startswith("AMP was on in A and off in B")
    strict = [c.what for c in compare_runs(tmp_path / "c", tmp_path / "c", weights=False).causes]
    assert strict == []
    # under strict/warn per-sample streams make the worker count irrelevant: not a cause
    (tmp_path / "a" / "determinism.json").write_text(json.dumps({"mode": "strict", "run_facts": facts}))
    assert "workers" not in [c.what for c in compare_runs(tmp_path / "a", tmp_path / "c", weights=False).causes]


def test_logs_with_the_same_command_name_release_defaults_that_differ(tmp_path):
    """diff A.jsonl B.jsonl: the commands agree, the args.yaml beside the reports do not."""
    from yolo_det.proof.causes import setup_causes

    header = {"seed": 0, "mode": "strict", "command": ["yolo", "train", "name=v1"], "verify_run": 1}
    for name, version, extra in (("a", "8.3.240", {"label_smoothing": 0.0}), ("b", "8.4.190", {"cutmix": 0.0})):
        folder(tmp_path / name, args={"lr0": 0.01, "name": f"v{name}", "cache_dir": f"c{1 if name == 'a' else 2}",
                                      **extra})
        (tmp_path / name / "determinism.json").write_text(json.dumps({"ultralytics": {"version": version}}))
    causes = setup_causes(dict(header, report=str(tmp_path / "a/determinism.json")),
                          dict(header, verify_run=2, report=str(tmp_path / "b/determinism.json")))
    assert [c.what for c in causes] == ["settings"]
    assert "label_smoothing: 0.0 in A (ultralytics 8.3.240), absent in B (ultralytics 8.4.190)" in causes[0].message
    assert "cache_dir" not in causes[0].message  # filled in from verify's {run}: no cause
