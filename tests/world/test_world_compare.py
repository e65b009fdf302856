"""diff/verify under one virtual world size: runs on different numbers of processes are compared on the
V-run's state (their data, loss and RNG records are each process's share), a differing V is a named cause,
and without V a different world size still parts the runs as before."""

from __future__ import annotations

from pathlib import Path

from yolo_det.proof.causes import header_causes
from yolo_det.proof.compare import compare_logs, compare_ranked
from support.builders import fingerprint_log


def _log(path: Path, world: int, v, data: str, param: str = "0" * 32, rank: int = 0) -> Path:
    header = {"torch": "2.14.1", "world_size": world, "virtual_world_size": v, "rank": rank, "seed": 0,
              "command": ["train.py", "--virtual-world-size", str(v)]}
    return fingerprint_log(path, header, 2, {"data": (["batch"], data), "loss": (["loss"], data[::-1]),
                                             "grad": (["w"], "a" * 32), "param": (["w"], param),
                                             "rng": (["torch"], data)},
                           lr={"group0.lr": 0.1}, losses=[float(len(data) + world)], final=(["w"], param))


def test_one_v_on_other_process_counts_compares_the_v_runs_state_and_names_no_world_size_cause(tmp_path):
    one = _log(tmp_path / "n1.jsonl", 1, 4, "1" * 32)
    two = _log(tmp_path / "n2.jsonl", 2, 4, "2" * 32)  # rank 0 of two processes loads half the batch
    comparison = compare_logs(one, two)
    assert comparison.identical, comparison.to_json()
    assert not comparison.causes
    assert any("one virtual world size V=4 on 1 and 2 processes" in note for note in comparison.notes)
    ranked = compare_ranked({0: one}, {0: two, 1: _log(tmp_path / "n2r1.jsonl", 2, 4, "3" * 32, rank=1)})
    assert ranked.identical


def test_the_v_runs_weights_still_part_the_runs(tmp_path):
    comparison = compare_logs(_log(tmp_path / "a.jsonl", 1, 4, "1" * 32),
                              _log(tmp_path / "b.jsonl", 2, 4, "2" * 32, param="f" * 32))
    assert not comparison.identical
    assert (comparison.first_divergence.step, comparison.first_divergence.kind) == (1, "param")


def test_a_differing_v_is_the_named_cause_and_without_v_world_size_still_counts(tmp_path):
    comparison = compare_logs(_log(tmp_path / "v2.jsonl", 1, 2, "1" * 32), _log(tmp_path / "v4.jsonl", 2, 4, "2" * 32))
    assert not comparison.identical and comparison.first_divergence.kind == "data"
    whats = [c.what for c in comparison.causes]
    assert whats[0] == "virtual_world_size"
    assert "runs used different virtual world sizes (V): 2 vs 4" in comparison.causes[0].message
    assert "world_size" in whats  # different V: the process counts are a difference too
    stock = compare_logs(_log(tmp_path / "s1.jsonl", 1, None, "1" * 32), _log(tmp_path / "s2.jsonl", 2, None, "2" * 32))
    assert not stock.identical and stock.first_divergence.kind == "data"
    assert [c.what for c in header_causes({"world_size": 1}, {"world_size": 2})] == ["world_size"]
    assert [c.what for c in header_causes({"world_size": 1}, {"world_size": 1, "virtual_world_size": 4})] == [
        "virtual_world_size"]


def test_the_header_records_v_only_where_the_engine_runs(tmp_path):
    from types import SimpleNamespace

    from yolo_det.record.log import read_log
    from yolo_det.record.recorder import Recorder
    from yolo_det.world import WorldPlan

    headers = []
    for name, plan in (("engine", WorldPlan(4, 1, 0, 16)), ("setting_only", None)):
        session = SimpleNamespace(rank=-1, seed=0, settings=SimpleNamespace(mode="warn", virtual_world_size=4),
                                  world_plan=plan)
        recorder = Recorder(tmp_path / f"{name}.jsonl", session=session)
        recorder.close()
        headers.append(read_log(recorder.path).header)
    assert (headers[0]["virtual_world_size"], headers[0]["world_size"]) == (4, 1)
    assert headers[1]["virtual_world_size"] is None  # a stock run never claims V, or its world size would hide
