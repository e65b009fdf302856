"""No verdict stronger than its evidence: cases found by reviewing this round's comparisons.

Each test builds the logs, folders or studies it needs (no training) and asserts the verdict a user
relies on: never "identical" from a log compared with itself, never a set-up left unnamed because only
the first seeds were looked at, never a hardware split against seeds whose hardware nobody recorded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from yolo_det.cli import main as cli_main
from yolo_det.proof.run_dirs import compare_runs
from yolo_det.proof.compare import compare_ranked
from support.builders import HEX, fingerprint_log, run_folder
from yolo_det.record.log import rank_path, rank_paths
from yolo_det.studies.compare import compare_studies, split_by_hardware
from yolo_det.studies.study import Study, StudyError, StudyRun

A100, H100 = "1 x NVIDIA A100", "1 x NVIDIA H100"


def _log(path: Path, steps: int = 2, run_dir=None) -> Path:
    return fingerprint_log(path, {"rank": 0, "world_size": 1}, steps, {"data": (["x"], HEX), "param": (["w"], HEX)},
                           lr={"group0.lr": 0.01}, final=(["w"], HEX), run_dir=run_dir)


def _run_folder(path: Path, log: Path) -> Path:
    return run_folder(path, opt={"epochs": 1, "lr0": 0.01}, report={"fingerprint_log": str(log)})


def test_run_folders_naming_one_log_are_not_proven_identical_by_it(tmp_path, capsys):
    """Two runs made with one YOLO_DET_FINGERPRINT path point at the same file (the later run overwrote the
    earlier's log): comparing it with itself is no evidence, so without weights the verdict is not proven."""
    shared = _log(tmp_path / "fp.jsonl")
    a, b = _run_folder(tmp_path / "a", shared), _run_folder(tmp_path / "b", shared)
    result = compare_runs(a, b)
    assert result.steps is None and not result.identical and result.verdict == "not proven"
    assert any("same fingerprint log" in note for note in result.notes)
    assert cli_main(["diff", str(a), str(b)]) == 3
    assert "not proven" in capsys.readouterr().out
    # A names a log that a third run wrote since (its final line's run_dir): not A's evidence either
    third = tmp_path / "third"
    third.mkdir()
    e = _run_folder(tmp_path / "e", _log(tmp_path / "e.jsonl", run_dir=str(third)))
    f = _run_folder(tmp_path / "f", _log(tmp_path / "f.jsonl", run_dir=str(tmp_path / "f")))
    result = compare_runs(e, f)
    assert result.steps is None and result.verdict == "not proven"
    assert any("which another run" in note and str(third) in note for note in result.notes)
    # two logs of their own (equal contents) are still compared and prove the runs identical
    c = _run_folder(tmp_path / "c", _log(tmp_path / "c.jsonl"))
    d = _run_folder(tmp_path / "d", _log(tmp_path / "d.jsonl"))
    assert compare_runs(c, d).verdict == "identical"


def _study(values, modes=None, hardware=None) -> Study:
    runs = []
    for i, value in enumerate(values):
        placement = None if hardware is None or hardware[i] is None else {"hardware": hardware[i]}
        runs.append(StudyRun(i + 1, i, {}, f"/nonexistent/{i}.jsonl", None, {"fitness": value}, {}, None,
                             (modes or ["strict"] * len(values))[i], placement=placement))
    return Study({"seeds": list(range(len(values))), "vary": "all"}, runs)


def test_seeds_run_under_another_mode_are_a_set_up_cause_not_only_a_note():
    """The first runs' headers agree (both strict), later seeds of B ran under warn: the verdict is about
    the mode too, so the mode is named as a set-up difference (it was only a note on B's spread)."""
    a = _study([0.50, 0.51, 0.52, 0.53, 0.54, 0.55])
    b = _study([0.40, 0.42, 0.41, 0.44, 0.43, 0.45], modes=["strict", "warn", "warn", "warn", "warn", "warn"])
    result = compare_studies(a, b, "fitness")
    causes = [c for c in result.setup if c.what == "mode"]
    assert len(causes) == 1 and causes[0].cls == "config" and "warn (seeds 1, 2, 3, 4, 5)" in causes[0].message
    same = compare_studies(a, _study([0.40, 0.42, 0.41, 0.44, 0.43, 0.45]), "fitness")
    assert not any(c.what == "mode" for c in same.setup)


def test_split_by_hardware_refuses_seeds_whose_hardware_is_unknown():
    """Seeds on A100 and seeds whose hardware was never recorded are not two kinds of hardware: a split would
    credit "the hardware" with a difference nobody knows exists."""
    study = _study([0.1, 0.2, 0.3, 0.4], hardware=[A100, None, A100, None])
    with pytest.raises(StudyError, match="2 seed\\(s\\) \\(run 2, 4\\) have none recorded"):
        split_by_hardware(study)
    a, b = split_by_hardware(_study([0.1, 0.2, 0.3, 0.4], hardware=[A100, H100, A100, H100]))
    assert (a.settings["hardware"], b.settings["hardware"]) == (A100, H100)
    assert a.complete and b.complete  # each half holds its own seeds: not "incomplete: 2 of 4 seeds"
    assert not any("incomplete" in n for n in compare_studies(a, b, "fitness", expected=("hardware",)).notes)


def _evaluation_log(path: Path, images: int, mAP: float = 0.25) -> Path:
    """A standalone evaluation's log: one validation record, no steps; ``images`` predictions digested."""
    validation = dict(epoch=None, after_step=0, names=[f"batch0.image{i}" for i in range(images)], hexes=HEX * images,
                      metrics={"mAP50": mAP, "fitness": mAP}, best=None, stop=None)
    return fingerprint_log(path, {"rank": 0, "world_size": 1}, validations=[validation])


def test_evaluations_without_recorded_predictions_are_not_proven_identical(tmp_path, capsys):
    """Two evaluation logs whose validation holds metrics but no image (the NMS output was never digested):
    equal metrics are not "predictions of every image identical"; with the images recorded they are."""
    a, b = _evaluation_log(tmp_path / "a.jsonl", 0), _evaluation_log(tmp_path / "b.jsonl", 0)
    assert cli_main(["diff", str(a), str(b)]) == 3
    out = capsys.readouterr().out
    assert out.startswith("not proven:") and "0 images" in out and "identical" not in out
    c, d = _evaluation_log(tmp_path / "c.jsonl", 2), _evaluation_log(tmp_path / "d.jsonl", 2)
    assert cli_main(["diff", str(c), str(d)]) == 0
    assert "identical: 1 evaluation(s)" in capsys.readouterr().out
    e = _evaluation_log(tmp_path / "e.jsonl", 0, mAP=0.5)  # metrics that differ stay a finding
    assert cli_main(["diff", str(a), str(e)]) == 1


def _ddp_logs(folder: Path, rng: str) -> Path:
    """Rank 0's and rank 1's logs of a two-process run; rank 1's RNG record is ``rng``."""
    folder.mkdir()
    for rank, value in ((0, HEX), (1, rng)):
        fingerprint_log(rank_path(folder / "fp.jsonl", rank), {"rank": rank, "world_size": 2}, 1,
                        {"param": (["w"], HEX), "rng": (["torch"], value)}, lr={"group0.lr": 0.01}, final=(["w"], HEX))
    return folder / "fp.jsonl"


def test_diff_of_rank_0_logs_says_the_other_ranks_were_not_compared(tmp_path, capsys):
    """Rank 1's own records differ between the runs; diff of the rank-0 logs cannot see it and must say so,
    while comparing every rank (as verify does) finds it."""
    a, b = _ddp_logs(tmp_path / "a", HEX), _ddp_logs(tmp_path / "b", "1" * 32)
    assert cli_main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "only rank 0's logs were compared" in out and "fp.rank1.jsonl" in out
    every = compare_ranked(rank_paths(a), rank_paths(b))
    assert every.first_divergence is not None and every.first_divergence.rank == 1
    assert not any("only rank 0" in n for n in every.notes)


def _training_log(path: Path, steps: int, final: bool = True, last_validation: bool = True) -> Path:
    """A compact training log validating every second step (full lines there), cut before its final line when
    ``final`` is False; ``last_validation`` False leaves the validation after the last step out."""
    validations = [dict(epoch=step // 2, after_step=step, names=["batch0.image0"], hexes=HEX, metrics={"mAP50": 0.1},
                        best=False, stop=False)
                   for step in range(2, steps + 1, 2) if step < steps or last_validation]
    return fingerprint_log(path, {"rank": 0, "world_size": 1}, steps, {"data": (["x"], HEX), "param": (["w"], HEX)},
                           lr={"group0.lr": 0.01}, full=lambda step: step % 2 == 0, compact=True,
                           validations=validations, final=(["w"], HEX) if final else None)


def test_a_killed_run_is_inconclusive_not_a_validation_divergence(tmp_path, capsys):
    """A run killed after step 4 against the same run finished at step 6: the validations the killed log never
    reached are no divergence ("validation only in B", exit 1 before); the comparison is inconclusive (exit 2)."""
    complete = _training_log(tmp_path / "b.jsonl", 6)
    killed = _training_log(tmp_path / "a.jsonl", 4, final=False)
    assert cli_main(["diff", str(killed), str(complete)]) == 2
    printed = capsys.readouterr()
    assert "cannot decide: the logs have different lengths" in printed.err
    assert "validation only" not in printed.out + printed.err
    cut = _training_log(tmp_path / "c.jsonl", 6, final=False, last_validation=False)  # killed while validating
    assert cli_main(["diff", str(cut), str(complete)]) == 2
    capsys.readouterr()
    # both finished, one validated after its last step and the other did not: that is a divergence
    skipped = _training_log(tmp_path / "d.jsonl", 6, last_validation=False)
    assert cli_main(["diff", str(skipped), str(complete)]) == 1
    assert "validation only in B" in capsys.readouterr().out


def test_a_ddp_rank_resumes_with_its_rng_of_the_checkpoint_a_kill_kept(tmp_path):
    """Rank 1 saved its RNG states of epoch 4, rank 0 was killed before its epoch-4 checkpoint was in place: the
    resume state is epoch 3's (by digest), and rank 1 resumes with its own epoch-3 states, kept as .prev, not a
    refusal; states of no matching epoch are still refused."""
    import torch

    from yolo_det.integrations import resume

    checkpoint = tmp_path / "weights" / "last.pt"
    checkpoint.parent.mkdir()
    torch.manual_seed(3)
    resume.write_rank_state(checkpoint, 3, 1)
    epoch3 = torch.get_rng_state()
    torch.manual_seed(4)
    resume.write_rank_state(checkpoint, 4, 1)
    got = resume.rank_rng(checkpoint, {"epoch": 3}, 1)
    assert not isinstance(got, str), got
    assert torch.equal(got["torch"], epoch3)
    assert torch.equal(resume.rank_rng(checkpoint, {"epoch": 4}, 1)["torch"], torch.get_rng_state())
    assert "the sidecar is of epoch 2" in resume.rank_rng(checkpoint, {"epoch": 2}, 1)


def test_an_explanation_without_both_numbers_is_not_proven_neither_reproduced_nor_differs():
    from yolo_det.evaluation.logged import Explanation

    logged = {"mAP50": 0.5, "mAP50-95": 0.25}
    for training, yours in ((logged, {"mAP50": 0.5}), ({"mAP50-95": 0.25}, dict(logged))):
        result = Explanation("best", 3, training, yours, [], [])
        assert result.missing and not result.reproduced and result.to_json()["not_proven"]
        first = result.describe()[0]
        assert "not proven: no " in first and "your command differs" not in first
    assert Explanation("best", 3, logged, dict(logged), [], []).missing == []


def test_coco_agreement_without_predictions_says_not_compared_not_bit_for_bit():
    from yolo_det.evaluation.coco import agreement, agreement_text

    truth = {"images": [{"id": 1, "width": 64, "height": 64, "file_name": "1.jpg"}],
             "annotations": [{"id": 1, "image_id": 1, "category_id": 0, "bbox": [1, 1, 10, 10], "area": 100,
                              "iscrowd": 0}],
             "categories": [{"id": 0, "name": "a"}]}
    empty = agreement(truth, [])
    assert empty["identical"] is None and "not compared" in agreement_text(empty)
    some = agreement(truth, [{"image_id": 1, "category_id": 0, "bbox": [1, 1, 10, 10], "score": 0.9}])
    assert some["identical"] is not None and "not compared" not in agreement_text(some)  # both ran and were compared
