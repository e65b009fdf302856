"""apply-patch / revert-patch never damage a user's tree (issue 16): owners and modes kept,
edited markers refused, interrupted writes completed, concurrent commands serialised, bad
bytes and odd files refused with one line (no training here)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from support.patch import make_repo, snapshot
from yolo_det.cli import main as cli_main
from yolo_det.patch import PatchError, apply_patch, journal, revert_patch

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ("train.py", "classify/train.py", "segment/train.py", "utils/general.py")  # utils/general.py: the NMS
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    return env


def _state(repo: Path) -> str:
    """'patched', 'original' or 'mixed' for the three v7.0 scripts."""
    marks = ["# yolo-det" in (repo / s).read_text() for s in SCRIPTS]
    return "patched" if all(marks) else "original" if not any(marks) else "mixed"


def _leftovers(repo: Path) -> list:
    return sorted(p.name for p in repo.rglob(".*") if p.name.endswith(".yolo-det-tmp") or p.name == journal.JOURNAL)


# -- (1) owner, group and mode ---------------------------------------------------------------

@pytest.mark.skipif(not IS_ROOT, reason="needs root to give files to another user")
def test_root_keeps_the_owner_group_and_mode_of_another_users_checkout(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    for path in [repo, *repo.rglob("*")]:
        os.lchown(path, 1234, 1234)
    os.chmod(repo / "train.py", 0o640)
    os.chmod(repo / "segment" / "train.py", 0o755)
    modes = {s: stat.S_IMODE((repo / s).stat().st_mode) for s in SCRIPTS}

    for action in (apply_patch, revert_patch, apply_patch):
        action(repo)
        for script in SCRIPTS:
            st = (repo / script).stat()
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 1234, modes[script]), (action, script)
    assert _state(repo) == "patched" and _leftovers(repo) == []


def test_a_read_only_script_is_refused_and_nothing_changes(tmp_path, capsys):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    os.chmod(repo / "segment" / "train.py", 0o444)
    before = snapshot(repo)
    assert cli_main(["apply-patch", str(repo)]) == 2
    err = capsys.readouterr().err
    assert "segment/train.py is read-only (mode 0444)" in err and "nothing was changed" in err
    assert snapshot(repo) == before and _leftovers(repo) == []


def test_a_hard_linked_script_is_refused(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    os.link(repo / "train.py", tmp_path / "other-name.py")
    before = snapshot(repo)
    with pytest.raises(PatchError, match="2 hard links"):
        apply_patch(repo)
    assert snapshot(repo) == before


# -- (2) edited markers ----------------------------------------------------------------------

@pytest.mark.parametrize("edit", ["# yolo-det (keep)", "", "# keep"])
def test_an_edited_marker_is_refused_by_revert_and_apply_naming_the_line(tmp_path, capsys, edit):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    apply_patch(repo)
    script = repo / "train.py"
    lines = script.read_text().split("\n")
    index = next(i for i, line in enumerate(lines) if "yolo_det_v5.track(" in line)
    lines[index] = lines[index].replace("  # yolo-det", f"  {edit}" if edit else "")
    script.write_text("\n".join(lines))
    before = snapshot(repo)

    for command in ("revert-patch", "apply-patch"):
        assert cli_main([command, str(repo)]) == 2
        err = capsys.readouterr().err
        assert f"line {index + 1}: yolo_det_v5.track(model, ema)" in err, err
        assert "nothing was changed" in err and "Traceback" not in err
        assert snapshot(repo) == before

    lines[index] = lines[index].split("yolo_det_v5")[0] + "yolo_det_v5.track(model, ema)  # yolo-det"
    script.write_text("\n".join(lines))  # the marker put back: both work again
    assert apply_patch(repo).already_patched
    revert_patch(repo)
    assert _state(repo) == "original"


def test_an_edited_with_marker_is_refused(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    apply_patch(repo)
    script = repo / "train.py"
    text = script.read_text()
    script.write_text(text.replace("with yolo_det_v5.backward(loss_items):  # yolo-det",
                                   "with yolo_det_v5.backward(loss_items):  # yolo-det!"))
    with pytest.raises(PatchError, match=r"line \d+: with yolo_det_v5.backward\(loss_items\):"):
        revert_patch(repo)


def test_an_edited_removed_comment_is_refused(tmp_path, capsys):
    repo = make_repo(tmp_path, "ffca-yolo")
    apply_patch(repo)
    script = repo / "train.py"
    text = script.read_text()
    assert "# yolo-det removed: torch.use_deterministic_algorithms(False)" in text
    script.write_text(text.replace("# yolo-det removed: torch.use_deterministic_algorithms(False)",
                                   "# yolo-det removed: torch.use_deterministic_algorithms(False  (why?)"))
    before = snapshot(repo)
    for command in ("revert-patch", "apply-patch"):
        assert cli_main([command, str(repo)]) == 2
        err = capsys.readouterr().err
        assert "no longer holds one line of Python" in err and "Traceback" not in err
    assert snapshot(repo) == before


# -- (3) interrupted writes ------------------------------------------------------------------

def test_sigint_during_the_renames_is_held_until_every_file_is_written(tmp_path, monkeypatch):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    renamed = []

    def interrupted_replace(src, dst):
        os.replace(src, dst)
        renamed.append(dst)
        if len(renamed) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(journal, "_replace", interrupted_replace)
    with pytest.raises(KeyboardInterrupt):
        apply_patch(repo)
    assert len(renamed) == len(SCRIPTS) and _state(repo) == "patched" and _leftovers(repo) == []


_KILLER = """
import os, signal, sys
from yolo_det.patch import apply_patch, journal, revert_patch
stage, count = sys.argv[2], [0]
def kill_after_first(src, dst):
    os.replace(src, dst)
    count[0] += 1
    if count[0] == 1:
        os.kill(os.getpid(), signal.SIGKILL)
def kill_while_writing(change, st):
    path = real(change, st)
    count[0] += 1
    if count[0] == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return path
real = journal._write_temp
if stage == "rename":
    journal._replace = kill_after_first
else:
    journal._write_temp = kill_while_writing
(apply_patch if sys.argv[3] == "apply" else revert_patch)(sys.argv[1])
"""


def _killed(repo: Path, stage: str, action: str) -> None:
    proc = subprocess.run([sys.executable, "-c", _KILLER, str(repo), stage, action], env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_sigkill_during_the_renames_is_completed_by_the_next_command(tmp_path, capsys):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    original = snapshot(repo)
    _killed(repo, "rename", "apply")
    assert _state(repo) == "mixed" and journal.JOURNAL in _leftovers(repo)  # what the kill left

    with pytest.raises(PatchError, match="interrupted"):
        apply_patch(repo, dry_run=True)  # a dry run changes nothing, not even the journal
    assert cli_main(["revert-patch", str(repo)]) == 0
    out = capsys.readouterr().out
    assert "completed an interrupted apply-patch" in out and f"{len(SCRIPTS)} file(s) reverted" in out
    assert snapshot(repo) == original and _leftovers(repo) == []

    apply_patch(repo)
    _killed(repo, "rename", "revert")
    assert _state(repo) == "mixed"
    result = apply_patch(repo)  # finishes the revert, then patches again
    assert result.recovered and _state(repo) == "patched" and _leftovers(repo) == []


def test_sigkill_before_the_renames_leaves_nothing_behind(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    original = snapshot(repo)
    _killed(repo, "write", "apply")
    assert _state(repo) == "original" and _leftovers(repo) and journal.JOURNAL not in _leftovers(repo)
    result = revert_patch(repo)
    assert "removed 2 temp file(s)" in result.recovered[0]
    assert snapshot(repo) == original


# -- (4) two commands at once ----------------------------------------------------------------

def test_a_second_command_waits_for_the_tree_lock(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    apply_patch(repo)
    with journal.locked(repo.resolve()):
        proc = subprocess.Popen([sys.executable, "-m", "yolo_det", "revert-patch", str(repo)], env=_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = proc.stderr.readline()  # the event: it found the tree locked (EOF, "", if it exited instead)
        assert first.startswith("yolo-det: waiting for another yolo-det apply-patch/revert-patch"), first
        assert proc.poll() is None and _state(repo) == "patched"  # still waiting: we hold the lock
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert _state(repo) == "original"


def test_apply_and_revert_at_the_same_moment_never_mix_the_tree(tmp_path):
    repo = make_repo(tmp_path, "yolov5-v7.0")
    for _ in range(1):
        procs = [subprocess.Popen([sys.executable, "-m", "yolo_det", command, str(repo)], env=_env(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for command in ("apply-patch", "revert-patch", "apply-patch")]
        for proc in procs:
            assert proc.wait(timeout=120) == 0, proc.stderr.read()
        assert _state(repo) in ("patched", "original") and _leftovers(repo) == []


# -- (8) bytes that are not Python, files that are not files -----------------------------------

@pytest.mark.parametrize("content", [
    b"# donn\xe9es\nimport argparse\n",                     # latin-1 without a coding cookie
    b"# -*- coding: bogus-xyz -*-\nimport argparse\n",      # a cookie naming no codec
    bytes(range(256)) * 8 + b"# yolo-det\n",                # random bytes (with a marker, so revert reads it)
])
def test_undecodable_sources_are_refused_in_one_line(tmp_path, capsys, content):
    (tmp_path / "train.py").write_bytes(content)
    for command in ("apply-patch", "revert-patch"):
        code = cli_main([command, str(tmp_path)])
        err = capsys.readouterr().err
        if command == "revert-patch" and b"# yolo-det" not in content:
            assert code == 0  # nothing to revert
            continue
        assert code == 2 and "Traceback" not in err
        assert "cannot decode it as Python source" in err or "cannot parse it as Python" in err, err
        assert len(err.strip().splitlines()) == 1
    assert (tmp_path / "train.py").read_bytes() == content


def test_a_fifo_named_train_py_is_refused_without_hanging(tmp_path, capsys):
    os.mkfifo(tmp_path / "train.py")
    os.mkfifo(tmp_path / "other.py")
    assert cli_main(["apply-patch", str(tmp_path)]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert cli_main(["apply-patch", str(tmp_path / "train.py")]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert cli_main(["revert-patch", str(tmp_path)]) == 0


# -- (15) large scripts: only what the patch can touch goes through libcst ---------------------

def _big(script: Path, functions: int) -> bytes:
    filler = "".join(f"\n\n@decorate\ndef helper_{i}(x):\n    '''\ndef not_code():\n'''\n    return [x,\n        {i}]\n"
                     for i in range(functions))
    text = script.read_text()
    head, sep, rest = text.partition("\ndef ")
    return (head + "\n\ndef decorate(f):\n    return f\n" + filler + sep + rest + filler).encode()


@pytest.mark.parametrize("name", ["yolov5-v5.0", "yolov5-v7.0", "ffca-yolo", "yolov7"])
def test_a_skeleton_patches_exactly_like_the_whole_file(tmp_path, monkeypatch, name):
    from yolo_det.patch import skeleton

    full, fast = make_repo(tmp_path / "full", name), make_repo(tmp_path / "fast", name)
    for repo in (full, fast):
        (repo / "train.py").write_bytes(_big(repo / "train.py", 150))
    monkeypatch.setattr(skeleton, "MIN_LINES", 10**9)
    expected = apply_patch(full)
    monkeypatch.setattr(skeleton, "MIN_LINES", 100)
    built = skeleton.build((fast / "train.py").read_bytes())
    assert built is not None and len(built.runs) >= 2 and len(built.text) < len(built.source) / 3
    got = apply_patch(fast)
    assert [f.after for f in got.files] == [f.after for f in expected.files]
    assert apply_patch(fast).already_patched
    monkeypatch.setattr(skeleton, "MIN_LINES", 10**9)
    assert apply_patch(fast).already_patched
    monkeypatch.setattr(skeleton, "MIN_LINES", 100)
    revert_patch(fast)
    monkeypatch.setattr(skeleton, "MIN_LINES", 10**9)
    revert_patch(full)
    assert snapshot(fast) == snapshot(full)
    assert (fast / "train.py").read_bytes() == _big(make_repo(tmp_path / "orig", name) / "train.py", 150)


def test_a_skeleton_names_original_lines_and_keeps_crlf(tmp_path, monkeypatch):
    from yolo_det.patch import skeleton

    monkeypatch.setattr(skeleton, "MIN_LINES", 100)
    repo = make_repo(tmp_path, "yolov5-v7.0")
    script = repo / "train.py"
    original = _big(script, 100).replace(b"\n", b"\r\n")
    script.write_bytes(original)
    apply_patch(repo)
    patched = script.read_bytes()
    assert b"yolo_det_v5.track(model, ema)  # yolo-det\r\n" in patched and b"\n" not in patched.replace(b"\r\n", b"")
    lines = patched.split(b"\r\n")
    index = next(i for i, line in enumerate(lines) if b"yolo_det_v5.track(" in line)
    lines[index] = lines[index].replace(b"# yolo-det", b"# yolo-det (keep)")
    script.write_bytes(b"\r\n".join(lines))
    with pytest.raises(PatchError, match=rf"line {index + 1}: yolo_det_v5.track\(model, ema\)"):
        revert_patch(repo)
    lines[index] = lines[index].replace(b"# yolo-det (keep)", b"# yolo-det")
    script.write_bytes(b"\r\n".join(lines))
    revert_patch(repo)
    assert script.read_bytes() == original
