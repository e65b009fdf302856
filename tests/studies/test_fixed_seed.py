"""A seed study whose command fixes its own seed (`--seed 0`, `seed=0`) is refused before the first seed trains:
every run would train with that one seed (issue 60, item 9)."""

from __future__ import annotations

import sys

from hypothesis import given, settings, strategies as st

from support.cli import cli
from yolo_det.studies.study import fixed_seed

WORDS = st.sampled_from(["train.py", "--data", "d.yaml", "--epochs", "3", "model=yolov8n.yaml", "epochs=3", "--name",
                         "s{run}", "name=s{run}", "--seeds", "seeds=2", "--seedling"])


@settings(max_examples=300, deadline=None)
@given(words=st.lists(WORDS, max_size=8), seed=st.one_of(st.integers(0, 99).map(str), st.just("{seed}")),
       form=st.sampled_from(["--seed {}", "--seed={}", "seed={}", None]), at=st.integers(0, 8))
def test_a_seed_the_command_sets_itself_is_found_and_the_studys_own_is_not(words, seed, form, at):
    cmd = list(words)
    if form is not None:
        cmd[at:at] = form.format(seed).split(" ")
    found = fixed_seed(cmd)
    fixed = form is not None and seed != "{seed}"  # the oracle: a literal seed was written in
    assert (found is not None) == fixed, (cmd, found)
    if fixed:
        assert seed in found


def test_yolo_det_seeds_refuses_it_before_the_first_seed(tmp_path):
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('the study should not have started this')\n")
    proc = cli("seeds", "--n", "2", "--workdir", tmp_path / "study", "--", sys.executable, script, "--name", "s{run}",
               "--seed", "0")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "sets its own seed (--seed 0)" in proc.stderr and "should not have started" not in proc.stderr + proc.stdout
    assert not (tmp_path / "study" / "run1").exists()
