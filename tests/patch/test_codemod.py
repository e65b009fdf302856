"""The apply-patch / revert-patch codemod on every release shape (no training here)."""

from __future__ import annotations

import ast
import os
import re

import pytest

from support.patch import FIXTURE_SCRIPTS, OLD_LOADERS, PATCHES, lines_with, make_repo, snapshot
from yolo_det import patch as patcher
from yolo_det.cli import main as cli_main
from yolo_det.patch import PatchError, apply_patch, revert_patch

NMS = "utils/general.py"  # the release's non_max_suppression (its wall-clock limit)
REGEN = "patches/ is out of date: run `python scripts/regen_patches.py` and review the diff"
POPS = {  # hyp loads outside train() that must drop the deterministic* keys
    ("yolov5-v5.0", "train.py"): 1, ("yolov7", "train.py"): 2, ("yolov7", "train_aux.py"): 2,
    ("yolov5-v7.0", "classify/train.py"): 0, ("yolov5-master", "classify/train.py"): 0,
}


def _calls(text: str, name: str) -> list:
    return lines_with(text, f"yolo_det_v5.{name}(")


@pytest.mark.parametrize("name", sorted(FIXTURE_SCRIPTS))
def test_each_release_shape_patches_compiles_is_idempotent_and_reverts(tmp_path, name):
    repo = make_repo(tmp_path, name)
    before = snapshot(repo)

    result = apply_patch(repo)

    assert sorted(f.relpath for f in result.files) == sorted(FIXTURE_SCRIPTS[name] + [NMS])
    assert all(f.status == "patched" for f in result.files) and len(result.files_changed) == len(result.files)
    for script in FIXTURE_SCRIPTS[name]:
        text = (repo / script).read_text()
        ast.parse(text, feature_version=(3, 6))  # inserted code stays valid for the oldest releases
        assert lines_with(text, "from yolo_det.integrations import yolov5 as yolo_det_v5") != []
        for call in ("add_arguments", "start", "track", "backward", "finish"):
            assert len(_calls(text, call)) == 1, (script, call)
        old = name in OLD_LOADERS
        # the train loader gets per-sample streams in every release (where there is one: not classify)
        assert len(_calls(text, "seeded_loaders")) == (0 if "classify" in script else 1), script
        assert ("reseed=True" in _calls(text, "start")[0]) == old
        assert len(_calls(text, "pop_hyp_keys")) == POPS.get((name, script), 1), script
        with_hyp = "classify" not in script
        assert _calls(text, "backward")[0].strip() == (  # loss components go to the fingerprint log
            "with yolo_det_v5.backward(loss_items):  # yolo-det" if with_hyp else
            "with yolo_det_v5.backward():  # yolo-det")
        assert _calls(text, "start")[0].strip().startswith(
            "yolo_det_v5.start(opt, hyp," if with_hyp else "yolo_det_v5.start(opt, init_seed=")

    patched = snapshot(repo)
    again = apply_patch(repo)
    assert again.already_patched and not again.files_changed
    assert snapshot(repo) == patched

    reverted = revert_patch(repo)
    assert sorted(str(p.relative_to(repo)) for p in reverted.files_changed) == sorted(FIXTURE_SCRIPTS[name] + [NMS])
    assert snapshot(repo) == before  # byte-identical, no file left behind


def test_anchors_are_placed_where_the_release_needs_them(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v5.0")
    apply_patch(repo)
    lines = (repo / "train.py").read_text().splitlines()

    def index(fragment):
        return next(i for i, line in enumerate(lines) if fragment in line)

    assert index("yolo_det_v5.start(") == index("init_seeds(2 + rank)") + 1
    assert index("yolo_det_v5.track(model, ema)") == index("ema = ModelEMA(model)") + 1
    assert index("yolo_det_v5.add_arguments(parser)") == index("opt = parser.parse_args()") - 1
    assert index("yolo_det_v5.pop_hyp_keys(hyp)") == index("hyp = yaml.load(f, Loader=yaml.SafeLoader)") + 1
    assert index("yolo_det_v5.finish(opt)") == index("return results") - 1
    # only the train loader is seeded, not the test loader built right after it
    wrap = index("with yolo_det_v5.seeded_loaders(opt):")
    assert "create_dataloader(train_path" in lines[wrap + 1]
    assert lines[index("testloader = create_dataloader(")].startswith("        testloader")
    assert lines[index("with yolo_det_v5.backward(loss_items):") + 1].strip() == "scaler.scale(loss).backward()"


def test_hyp_loaded_inside_train_is_left_for_start(tmp_path):
    """v6+: train() hands its own dict to start(), so the run's hyp.yaml/opt.yaml keep the keys for --resume."""
    repo = make_repo(tmp_path, "yolov5-v6.2")
    apply_patch(repo)
    lines = (repo / "train.py").read_text().splitlines()
    load = next(i for i, line in enumerate(lines) if "hyp = yaml.safe_load(f)" in line)
    assert "pop_hyp_keys" not in lines[load + 1]
    evolve = [i for i, line in enumerate(lines) if "hyp = yaml.safe_load(f)" in line][1]
    assert "yolo_det_v5.pop_hyp_keys(hyp)" in lines[evolve + 1]


def test_master_evolve_pops_only_the_hyp_load(tmp_path):
    repo = make_repo(tmp_path, "yolov5-master")
    apply_patch(repo)
    text = (repo / "train.py").read_text()
    assert len(re.findall(r"yaml\.safe_load\(", text)) == 5  # train, resume, evolve, 2 population files
    assert len(_calls(text, "pop_hyp_keys")) == 1


def test_ffca_line_is_commented_out_and_restored(tmp_path):
    repo = make_repo(tmp_path, "ffca-yolo")
    original = (repo / "train.py").read_bytes()
    apply_patch(repo)
    text = (repo / "train.py").read_text()
    assert "\n            torch.use_deterministic_algorithms(False)\n" not in text
    assert "            # yolo-det removed: torch.use_deterministic_algorithms(False)\n" \
           "            with yolo_det_v5.backward(loss_items):  # yolo-det\n" in text
    assert "            # Backward\n            # yolo-det removed:" in text  # the release's comment stays above
    revert_patch(repo)
    assert (repo / "train.py").read_bytes() == original


def test_pypi_yolov5_patch_matches_the_committed_diff(yolov5_copy):
    result = apply_patch(yolov5_copy, dry_run=True)
    assert [f.relpath for f in result.files] == ["train.py", "classify/train.py", "segment/train.py", NMS] + [
        "detect.py", "val.py", "classify/predict.py", "classify/val.py", "segment/predict.py", "segment/val.py",
        "export.py"]
    assert result.diff == (PATCHES / "yolov5-pypi-7.0.14.diff").read_text(), REGEN
    assert all((yolov5_copy / f.relpath).read_bytes() == f.before for f in result.files)  # dry run


@pytest.mark.parametrize("name", sorted(FIXTURE_SCRIPTS))
def test_fixture_patches_match_the_committed_diffs(tmp_path, name):
    result = apply_patch(make_repo(tmp_path, name), dry_run=True)
    assert result.diff == (PATCHES / "fixtures" / f"{name}.diff").read_text(), REGEN


def test_dry_run_changes_nothing(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v6.1")
    before = snapshot(repo)
    result = apply_patch(repo, dry_run=True)
    assert result.dry_run and result.files[0].changed
    assert "+            with yolo_det_v5.backward(loss_items):  # yolo-det" in result.diff
    assert result.diff.startswith("--- a/train.py\n+++ b/train.py\n")
    assert snapshot(repo) == before


def test_revert_keeps_user_edits_elsewhere(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    script = repo / "train.py"
    original = script.read_text()
    apply_patch(repo)
    edited = script.read_text().replace("default=2)", "default=5)").replace(
        "    # Model\n", "    # Model (user note)\n    torch.set_num_threads(1)\n")
    script.write_text(edited)
    assert apply_patch(repo).already_patched  # edits elsewhere do not confuse the patch
    revert_patch(repo)
    expected = original.replace("default=2)", "default=5)").replace(
        "    # Model\n", "    # Model (user note)\n    torch.set_num_threads(1)\n")
    assert script.read_text() == expected


def test_crlf_and_non_ascii_source(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v6.2")
    script = repo / "train.py"
    text = "# Entraînement 🚀 — données\r\n" + script.read_text().replace("\n", "\r\n")
    script.write_bytes(text.encode("utf-8"))
    original = script.read_bytes()

    apply_patch(repo)
    patched = script.read_bytes()
    assert b"yolo_det_v5.start(" in patched
    assert re.search(rb"(?<!\r)\n", patched) is None  # every line still ends in CRLF
    assert patched.startswith("# Entraînement 🚀 — données\r\n".encode("utf-8"))
    ast.parse(patched.decode("utf-8"))
    assert apply_patch(repo).already_patched
    revert_patch(repo)
    assert script.read_bytes() == original


def test_latin1_source_with_coding_cookie(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v6.0")
    script = repo / "train.py"
    source = "# -*- coding: latin-1 -*-\n# données\n" + script.read_text()
    script.write_bytes(source.encode("latin-1"))
    apply_patch(repo)
    patched = script.read_bytes()
    assert patched.startswith("# -*- coding: latin-1 -*-\n# données\n".encode("latin-1"))
    ast.parse(patched.decode("latin-1"))
    revert_patch(repo)
    assert script.read_bytes() == source.encode("latin-1")


def test_unknown_layout_is_refused_with_the_anchors(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    source = ("import argparse\n\n\ndef train(hyp, opt):\n    init_seeds(1)\n    loss.backward()\n\n\n"
              "parser = argparse.ArgumentParser()\nopt = parser.parse_args()\n")
    (repo / "train.py").write_text(source)
    with pytest.raises(PatchError) as info:
        apply_patch(repo)
    error = info.value
    assert "train.py" in str(error) and "nothing was changed" in str(error)
    assert "argument parser (parser = ArgumentParser() ... parser.parse_args())" in error.found
    assert "init_seeds(...) call in a function" in error.found
    assert error.missing == ["EMA (ema = ModelEMA(model)) in train()"]
    assert "missing: EMA" in error.details()
    assert sorted(p.name for p in repo.iterdir()) == ["train.py"]
    assert (repo / "train.py").read_text() == source


def test_folder_without_a_training_script_is_refused(tmp_path):
    (tmp_path / "val.py").write_text("import argparse\n")
    with pytest.raises(PatchError, match="no train.py"):
        apply_patch(tmp_path)
    with pytest.raises(PatchError, match="no such file"):
        apply_patch(tmp_path / "missing")


def test_other_scripts_that_only_look_alike_are_skipped(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v6.2")
    lookalike = repo / "tools" / "finetune.py"
    lookalike.parent.mkdir()
    lookalike.write_text("import argparse\n# init_seeds ArgumentParser\ndef f():\n    loss.backward()\n")
    result = apply_patch(repo)
    statuses = {f.relpath: f.status for f in result.files}
    assert statuses == {"train.py": "patched", "tools/finetune.py": "skipped", NMS: "patched"}
    assert "missing:" in result.files[1].notes[0]
    assert "yolo_det" not in lookalike.read_text()


def test_a_failed_write_changes_nothing(tmp_path, monkeypatch):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    before = snapshot(repo)
    calls = []

    def flaky_replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        os.replace(src, dst)

    monkeypatch.setattr(patcher.journal, "_replace", flaky_replace)
    with pytest.raises(OSError):
        apply_patch(repo)
    assert len(calls) == 2
    assert snapshot(repo) == before  # the first file was put back, no temp files remain


def test_symlinks_are_never_followed_out_of_the_repo(tmp_path):
    outside = make_repo(tmp_path / "outside", "yolov5-v6.2")
    before = snapshot(outside)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").symlink_to(outside / "train.py")
    (repo / "linked").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PatchError):
        apply_patch(repo)
    with pytest.raises(PatchError, match="symbolic link"):
        apply_patch(repo / "train.py")
    revert_patch(repo)
    assert snapshot(outside) == before


def test_single_script_mode_patches_only_that_file(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    result = apply_patch(repo / "segment" / "train.py")
    assert [f.relpath for f in result.files] == ["train.py"]
    assert "yolo_det_v5" in (repo / "segment" / "train.py").read_text()
    assert "yolo_det_v5" not in (repo / "train.py").read_text()


def test_cli_apply_dry_run_revert_and_exit_codes(tmp_path, capsys):
    repo = make_repo(tmp_path, "yolov5-v6.0")
    before = snapshot(repo)

    assert cli_main(["apply-patch", str(repo), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("--- a/train.py") and "would be patched" in err
    assert snapshot(repo) == before

    assert cli_main(["apply-patch", str(repo)]) == 0
    out = capsys.readouterr().out
    assert "train.py: patched" in out and "adds --seed" in out and "seeds the train loader" in out

    assert cli_main(["apply-patch", str(repo)]) == 0
    assert "already patched" in capsys.readouterr().out

    assert cli_main(["revert-patch", str(repo)]) == 0
    assert "2 file(s) reverted" in capsys.readouterr().out  # train.py and utils/general.py (NMS)
    assert snapshot(repo) == before
    assert cli_main(["revert-patch", str(repo)]) == 0
    assert "nothing to revert" in capsys.readouterr().out

    (repo / "train.py").write_text("import argparse\n")
    assert cli_main(["apply-patch", str(repo)]) == 2
    err = capsys.readouterr().err
    assert "nothing was changed" in err and "missing:" in err and "init_seeds" in err
    assert cli_main(["apply-patch", str(tmp_path / "nope")]) == 2


def test_patch_of_a_parse_error_is_refused(tmp_path):
    (tmp_path / "train.py").write_text("def train(:\n")
    with pytest.raises(PatchError, match="cannot parse"):
        apply_patch(tmp_path)


def test_patched_marker_detection():
    assert patcher.is_patched(b"x = 1  # yolo-det\n")
    assert not patcher.is_patched(b"x = 1  # yolo-detective\n# yolo-det is great\n")


def test_bom_is_kept(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v6.2")
    script = repo / "train.py"
    original = b"\xef\xbb\xbf" + script.read_bytes()
    script.write_bytes(original)
    apply_patch(repo)
    assert script.read_bytes().startswith(b"\xef\xbb\xbf# Fixture")
    revert_patch(repo)
    assert script.read_bytes() == original


def test_an_older_patch_shape_is_updated(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v6.2")
    apply_patch(repo)
    script = repo / "train.py"
    current = script.read_text()
    old = current.replace("yolo_det_v5.start(opt, hyp, init_seed=opt.seed + 1 + RANK)  # yolo-det",
                          "yolo_det_v5.start(opt)  # yolo-det")
    assert old != current
    script.write_text(old)
    result = apply_patch(repo)
    assert result.files[0].status == "updated" and not result.already_patched
    assert script.read_text() == current


def test_cli_apply_says_how_a_package_copy_runs(tmp_path, capsys):
    """A copy of a package (the PyPI yolov5: ``__init__.py`` beside ``train.py``) imports itself by name: the closing
    line says to put its parent first on PYTHONPATH, as the README's tour does; a checkout is run as it is."""
    repo = make_repo(tmp_path / "clone", "yolov5-v7.0")
    assert cli_main(["apply-patch", str(repo)]) == 0
    assert "Train with `python train.py ..." in capsys.readouterr().out

    copy = make_repo(tmp_path / "copy", "yolov5-v7.0")
    (copy / "__init__.py").write_text("")
    assert cli_main(["apply-patch", str(copy)]) == 0
    assert f"Train with `PYTHONPATH={copy.resolve().parent} python {copy / 'train.py'} ..." in capsys.readouterr().out
