"""core/atomic: the one atomic writer — the target holds the old contents or the new ones, never a part, and no
temporary file is left behind, whatever fails."""

import json
import os

import pytest
from hypothesis import given, settings, strategies as st

from yolo_det.core import atomic


@settings(max_examples=30, deadline=None)
@given(old=st.one_of(st.none(), st.binary(max_size=64)), new=st.binary(max_size=4096))
def test_a_write_leaves_exactly_the_new_contents_and_no_temp_file(tmp_path_factory, old, new):
    folder = tmp_path_factory.mktemp("w")
    target = folder / "f.bin"
    if old is not None:
        target.write_bytes(old)
    atomic.write_bytes(target, new)
    assert target.read_bytes() == new
    assert sorted(p.name for p in folder.iterdir()) == ["f.bin"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temp(tmp_path):
    target = tmp_path / "f.json"
    target.write_text("old")
    with pytest.raises(TypeError):
        atomic.write_json(target, {"x": object()})  # not JSON: fails half-way through the dump
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]
    with pytest.raises(RuntimeError):
        with atomic.atomic_file(target, "w", encoding="utf-8") as f:
            f.write("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]


def test_the_new_file_is_fsynced_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", os.path.isdir(f"/proc/self/fd/{fd}")))
                        or real_fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: calls.append(("replace", None)) or real_replace(a, b))
    atomic.write_text(tmp_path / "f.txt", "new")
    assert calls[calls.index(("replace", None)) - 1] == ("fsync", False)  # the file's contents, then the rename
    if os.path.isdir("/proc/self/fd"):
        assert calls[-1] == ("fsync", True)  # then the folder


def test_a_temp_file_is_beside_its_target_and_a_rename_replaces(tmp_path):
    tmp = atomic.temp_path(tmp_path / "sub" / "f.pt")
    assert tmp.parent == tmp_path / "sub" and tmp.is_file() and tmp.name.endswith(atomic.TMP_SUFFIX)
    tmp.write_text(json.dumps([1]))
    atomic.replace(tmp, tmp_path / "sub" / "f.pt")
    assert json.loads((tmp_path / "sub" / "f.pt").read_text()) == [1] and not tmp.exists()
