"""`yolo-det verify --locate` and `yolo-det locate`: from the step where runs part to the op,
module and phase that made them part, and why (cause first: set-up differences need no re-run).

Nondeterminism is injected as a kernel would cause it: one op's output changed by one ULP in
one step of run 2 only, by a dispatch mode loaded through ``sitecustomize`` below any capture
(the injector family of tests/support/injectors.py).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import torch
from torch import nn

from support.injectors import injector_env
from support.locate import write_script
from support.verify import script_env, yolo_det_cmd
from support.cli import cli

from yolo_det.record.capture import CaptureMode, ModulePaths, read_capture
from yolo_det.record.digest import Digester, StreamDigests
from yolo_det.record.digest import _meta
from yolo_det.record.log import read_log
from yolo_det.synthetic import make_dataset


def _json(proc):
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def _where(located):
    return {k: located[k] for k in ("step", "phase", "op", "module", "cause")}


def _kernel(step, phase, op, module):
    return {"step": step, "phase": phase, "op": op, "module": module, "cause": "kernel"}


def _env(train_env, tmp_path, site=None):
    env = script_env(train_env)
    return injector_env(env, tmp_path / "inject", site) if site else env


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    return write_script(tmp_path_factory.mktemp("locate"))


# -- capture internals ---------------------------------------------------------------------------
def test_capture_digests_equal_the_fingerprint_digest():
    """One digest: the stream reader the capture uses gives the Digester's digests, one by one and batched."""
    tensors = [torch.randn(3, 5), torch.randn(70000), torch.zeros(0), torch.tensor(3.0), torch.randn(4, 6).t(),
               torch.arange(10), torch.tensor([True, False]), torch.randn(600_000).half()]
    expected = Digester().hex(tensors)
    stream = StreamDigests()
    handles = [stream.add(t) for t in tensors]
    assert [stream.hexes()[h] for h in handles] == expected
    alone = StreamDigests()
    for t, hexed in zip(tensors, expected):  # the path of tensors too large for a batch
        w = alone.words(t).numpy().view(np.uint64)
        meta = np.array(_meta(t.dtype, tuple(t.shape), t.numel() * t.element_size()), dtype=np.int64).view(np.uint64)
        assert (w + meta).astype(">u8").tobytes().hex() == hexed


def test_bytes_outside_a_view_are_never_read():
    """A view's digest depends on its own elements only, never on the storage around them."""
    for make in (lambda b: b[3:9], lambda b: b[1:, 2:5], lambda b: b.view(-1)[5:4000].view(-1, 5)[:, 1],
                 lambda b: b[2:-1].t()):
        a = torch.randn(64, 64)
        b = a.clone()
        b.view(-1)[0] += 1.0  # bytes before every view differ
        b.view(-1)[-1] += 1.0  # and after
        va, vb = make(a), make(b)
        assert torch.equal(va, vb) and va.data_ptr() != vb.data_ptr()
        assert Digester().hex([va]) == Digester().hex([vb])
        stream = StreamDigests()
        ha, hb = stream.add(va), stream.add(vb)
        assert stream.hexes()[ha] == stream.hexes()[hb]
        ra, rb = _capture(lambda: torch.flip(va, [0])), _capture(lambda: torch.flip(vb, [0]))
        assert ra[0]["in"] == rb[0]["in"] and ra[0]["out"] == rb[0]["out"]


def test_captured_op_digests_equal_the_fingerprint_digest_of_their_outputs():
    inputs = [torch.randn(3, 5), torch.randn(70000), torch.randn(600_000), torch.randn(40, 30).t(),
              torch.arange(12).view(3, 4), torch.zeros(0)] + [torch.randn(250_000) for _ in range(6)]  # > one stage
    inputs += [torch.randn(16 * 256 + 3),  # 16 whole rows read in place, the 12-byte tail copied
               torch.randn(300, 700).half(), torch.randn(5000) > 0, torch.randn(3000, dtype=torch.complex64),
               torch.tensor(2.5), torch.randint(0, 255, (70001,), dtype=torch.uint8), torch.randn(64, 512).t()]
    inputs += [torch.randn(9 << 18) for _ in range(4)] + [torch.randn(9 << 20)]  # 36 MiB: batches end; 36 MiB alone
    mode = CaptureMode(ModulePaths())
    with mode:
        outputs = [torch.flip(x, [0]) for x in inputs]  # not pointwise: its outputs are read
    records = mode.records()
    assert [r["op"] for r in records] == ["aten.flip.default"] * len(inputs)
    assert [r["out"][0] for r in records] == Digester().hex(outputs)
    assert [r["in"][0] for r in records] == Digester().hex(inputs)


def _capture(fn):
    mode = CaptureMode(ModulePaths())
    with mode:
        fn()
    return mode.records()


def test_pointwise_outputs_are_derived_from_their_inputs_and_stay_exact():
    """Pointwise ops and copies are not read: their digests follow from the inputs'. A chain of
    them still tells a one-ULP difference in its input apart, and resolves without recursion."""
    base = torch.randn(64, 64)
    nudged = base.clone()
    nudged.view(torch.int32)[7, 7] += 1  # one ULP in one element

    def chain(x):
        def run():
            y = x.clone()
            for _ in range(3000):  # deeper than Python's recursion limit
                y = torch.neg(y.mul_(1.0))  # exact: every step keeps the one-ULP difference
            torch.flip(y, [0])  # read: its input is the chain's last derived digest
        return run

    a, b, c = _capture(chain(base)), _capture(chain(base.clone())), _capture(chain(nudged))
    assert [r["out"] for r in a] == [r["out"] for r in b]
    assert a[-1]["in"] != c[-1]["in"] and a[-1]["out"] != c[-1]["out"]
    assert all(ra["out"] != rc["out"] for ra, rc in zip(a, c))
    mode = CaptureMode(ModulePaths())
    with mode:
        torch.sigmoid(base)
        torch.flip(base, [0])
    assert mode.tensors_read == 2  # base, read once as an input, and flip's output; sigmoid's is derived
    mode = CaptureMode(ModulePaths())
    with mode:
        y = base.clone()
        y.mul_(2.0)  # changed in place: its derived digest is found again once the version counter moved
        torch.flip(y, [0])
    assert mode.tensors_read == 2
    assert mode.records()[-1]["out"] == Digester().hex([torch.flip(base * 2.0, [0])])


def test_uninitialised_memory_is_not_a_difference_and_non_tensor_arguments_count():
    def empty_after(fill):
        def run():
            junk = torch.full((4096,), fill)
            del junk  # its memory is likely reused by empty: different bytes each time
            torch.empty(4096).fill_(1.0).sum()
        return run

    a, b = _capture(empty_after(1.0)), _capture(empty_after(2.0))
    assert [r["out"] for r in a if "empty" in r["op"] or "sum" in r["op"]] == \
        [r["out"] for r in b if "empty" in r["op"] or "sum" in r["op"]]
    x = torch.arange(-5.0, 5.0)
    floor, trunc = (_capture(lambda mode=m: torch.div(x, 3, rounding_mode=mode)) for m in ("floor", "trunc"))
    assert floor[0]["in"] != trunc[0]["in"] and floor[0]["out"] != trunc[0]["out"]


def test_ops_that_alias_memory_or_draw_from_the_same_state_are_never_named():
    """Same inputs, different output only for ops that compute: never ``set_`` from a storage,
    ``resize_``, ``empty``, views or ops without tensor inputs, whose bytes are whatever the memory
    held; a random op is named (cause rng) only when its generator state differed; ops before the
    step's first batch are never named. In the first pass and in a confirming pass that reads all."""
    from yolo_det.proof.locate import compare_captures, locate_step, step_window

    def memory(fill, seed):
        def run():
            junk = torch.full((4096,), fill)
            alias = torch.empty(0)
            alias.set_(junk.untyped_storage())  # the same (empty) input, other bytes
            grown = torch.zeros(2)
            grown.resize_(4096)  # new bytes: whatever the allocator had
            torch.empty(4096).sum()
            torch.rand(8, generator=torch.Generator().manual_seed(0)).sum()  # same state: same numbers
            torch.flip(torch.arange(6.0), [0])  # numbers only in, a computation out
            torch.rand(3, generator=torch.Generator().manual_seed(seed))
        return run

    def runs(fills, seeds):
        def capture(run, read):  # locate_step's re-run of run 1 or 2, first pass (read None) or confirming
            mode = CaptureMode(ModulePaths(), read)
            with mode:
                memory(fills[run - 1], seeds[run - 1])()
            return mode.records()
        return capture

    capture = runs((1.0, 2.0), (0, 0))
    a, b = capture(1, None), capture(2, None)
    assert any(ra["out"] != rb["out"] for ra, rb in zip(a, b))  # the aliases did differ
    suspect = compare_captures(a, b, 1)  # the first pass may suspect the sum of empty's bytes, never an alias
    assert suspect.op not in ("aten.set_.source_Storage", "aten.resize_.default", "aten.empty.memory_format")
    location = locate_step(capture, (1, 2), 1)
    assert location.op is None, location.describe()
    location = locate_step(runs((1.0, 1.0), (0, 1)), (1, 2), 1)  # the last random op's generator state differs
    assert (location.op, location.cause) == ("aten.rand.generator", "rng"), location.describe()
    c = runs((1.0, 1.0), (0, 1))(2, None)
    before = [dict(r, pre=1) for r in a]  # the same ops, before the step's first batch
    assert compare_captures(before, [dict(r, pre=1) for r in c], 1).op is None
    assert step_window(before) == (len(before), len(before))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_record_and_collects_garbage_again():
    """A DataLoader worker forked during a capture inherits the mode: it must neither record ops
    nor keep the garbage collector off, which the capture holds off in its own process."""
    import gc

    mode = CaptureMode(ModulePaths())
    with mode:
        assert not gc.isenabled()
        torch.ones(3).sum()
        pid = os.fork()
        if pid == 0:  # the child: ops pass through, unrecorded; gc is back on
            torch.ones(3).sum()
            os._exit(0 if gc.isenabled() and len(mode.ops) == 2 else 3)
        _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert gc.isenabled()
    assert len(mode.records()) == 2


def test_module_paths_come_from_the_call_chain_also_for_a_shared_activation():
    act = nn.SiLU()  # shared, like YOLOv5's Conv.default_act: an identity lookup would name it model.0.act

    class Conv(nn.Module):
        def __init__(self, c1, c2):
            super().__init__()
            self.conv, self.act = nn.Conv2d(c1, c2, 3, padding=1), act

        def forward(self, x):
            return self.act(self.conv(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = nn.Sequential(Conv(3, 4), Conv(4, 4))

        def forward(self, x):
            for m in self.model:
                x = m(x)
            return x

    net = Net()
    paths = ModulePaths([(net, "")]).start()
    mode = CaptureMode(paths)
    with mode:
        net(torch.randn(2, 3, 8, 8)).square().mean().backward()
    paths.stop()
    ops = [(r["phase"], r["module"], r["op"]) for r in mode.records()]
    assert ("forward", "model.1.act", "aten.silu.default") in ops
    assert ("backward", "model.1.act", "aten.silu_backward.default") in ops
    assert ("backward", "model.1.conv", "aten.convolution_backward.default") in ops
    assert ("backward", "model.0.conv", "aten.detach.default") in ops  # AccumulateGrad of model.0.conv.weight
    assert ("backward", "(outside)", "aten.pow.Tensor_Scalar") in ops  # square()'s backward: made outside modules
    assert ops.index(("forward", "model.0.act", "aten.silu.default")) < ops.index(
        ("forward", "model.1.conv", "aten.convolution.default"))


# -- verify --locate ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def forward_located(script, tmp_path_factory, train_env):
    tmp = tmp_path_factory.mktemp("forward")
    env = _env(train_env, tmp, "forward:convolution:model.1.conv:3")
    proc = cli("verify", "--locate", "--json", "--workdir", tmp / "w", "--", sys.executable, script, cwd=tmp, env=env)
    return tmp, env, proc


@pytest.mark.slow  # verify runs of the tiny script: 30-60 s
def test_an_injected_forward_kernel_difference_is_named_with_module_op_and_phase(forward_located):
    tmp, _, proc = forward_located
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = _json(proc)
    assert result["first_divergence"]["step"] == 3 and result["causes"] == []
    located = result["locate"]
    assert _where(located) == _kernel(3, "forward", "aten.convolution.default", "model.1.conv")
    assert located["kernel"] is None and located["known_nondeterministic"] is False  # not in the op table
    for i in (1, 2):  # the re-runs stopped right after step 3; the capture holds that step's ops only
        assert len(read_log(tmp / "w" / "locate" / f"run{i}" / "fingerprint.jsonl").steps) == 3
        header, records = read_capture(tmp / "w" / "locate" / f"run{i}" / "capture.jsonl")
        assert header["step"] == 3 and header["complete"]
        phases = {r["phase"] for r in records}
        assert {"forward", "backward", "optimizer"} <= phases
        assert sum(r["op"] == "aten.convolution.default" and r["phase"] == "forward" for r in records) == 3


@pytest.mark.slow  # verify runs of the tiny script: 30-60 s
def test_an_injected_backward_difference_is_located_from_logs_made_earlier(script, tmp_path, train_env):
    env = _env(train_env, tmp_path, "backward:convolution_backward:model.2.conv:3")
    made = cli("verify", "--workdir", tmp_path / "w", "--", sys.executable, script, cwd=tmp_path, env=env)
    assert made.returncode == 1 and "diverged at step 3" in made.stdout, made.stderr[-3000:]
    logs = [tmp_path / "w" / f"run{i}" / "fingerprint.jsonl" for i in (1, 2)]
    proc = cli("locate", *logs, "--workdir", tmp_path / "again", "--json", "--", sys.executable, script,
               cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    located = _json(proc)["locate"]
    assert _where(located) == _kernel(3, "backward", "aten.convolution_backward.default", "model.2.conv")
    text = cli("locate", *logs, "--workdir", tmp_path / "again", "--", sys.executable, script,
               cwd=tmp_path, env=script_env(train_env))  # without the injector: the re-runs agree
    assert text.returncode == 1 and "did not recur in the re-runs" in text.stdout and "cause: unknown" in text.stdout


@pytest.mark.slow  # verify runs of the tiny script: 30-60 s
def test_different_seeds_are_the_cause_and_nothing_is_re_run(script, tmp_path, train_env):
    proc = cli("verify", "--locate", "--workdir", tmp_path / "w", "--", sys.executable, script,
               "--seed", "{run}", "--steps", "2", "--name", "r{run}", cwd=tmp_path, env=script_env(train_env))
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    cause = lines.index("likely cause (config): runs used different seeds: 1 vs 2")
    assert cause < next(i for i, line in enumerate(lines) if line.startswith("diverged at step 1"))  # first
    assert sum(line.startswith("likely cause") for line in lines) == 1  # --name r{run} is no cause
    assert "cause: config" in lines and not (tmp_path / "w" / "locate").exists()


@pytest.mark.slow  # verify runs of the tiny script: 30-60 s
def test_a_different_data_file_is_a_data_cause(script, tmp_path, train_env):
    (tmp_path / "data1.txt").write_text("images: a\n")
    (tmp_path / "data2.txt").write_text("images: b\n")
    proc = cli("verify", "--locate", "--json", "--workdir", tmp_path / "w", "--", sys.executable, script,
               "--data", "data{run}.txt", "--steps", "2", cwd=tmp_path, env=script_env(train_env))
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = _json(proc)
    assert result["locate"]["cause"] == "data" and result["first_divergence"]["kind"] == "data"
    assert result["causes"][0]["message"] == "the file given as --data differs: data1.txt vs data2.txt " \
                                             "(their contents differ)"
    assert not (tmp_path / "w" / "locate").exists()


# -- the real training programs (injectors of tests/support/injectors.py, below any capture) -----------------------
@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    """4+2 images at 64 px: one step an epoch at batch 4, two at batch 2 -- as many as the faults below need."""
    return make_dataset(tmp_path_factory.mktemp("locate-data"), n_train=4, n_val=2, imgsz=64)


def _yolov5_train(dataset, tmp_path, *extra, batch=4):
    return [sys.executable, "train.py", "--data", dataset, "--cfg", "yolov5n.yaml", "--weights", "", "--img", "64",
            "--batch-size", str(batch), "--noplots", "--device", "cpu", "--project", tmp_path / "runs", "--name",
            "v{run}", "--seed", "1", *extra]


#: An Ultralytics detection model as small as the BatchNorm site needs: ``model.2`` is a C2f block (as in
#: yolov8n.yaml) whose ``cv1`` is a Conv with its BatchNorm; three strided Convs feed Detect.
TINY_ULTRALYTICS = """nc: 2
backbone:
  - [-1, 1, Conv, [8, 3, 2]]
  - [-1, 1, Conv, [8, 3, 2]]
  - [-1, 1, C2f, [8, True]]
  - [-1, 1, Conv, [8, 3, 2]]
  - [-1, 1, Conv, [8, 3, 2]]
  - [-1, 1, Conv, [8, 3, 2]]
head:
  - [[3, 4, 5], 1, Detect, [nc]]
"""


@pytest.mark.slow
def test_patched_yolov5_names_a_fault_inside_an_in_place_activation_after_a_validation(patched_yolov5, small_data,
                                                                                         train_env, tmp_path):
    """The issue's case: a one-ULP change inside ``silu_`` of ``model.4.cv3.act`` in the forward of step 2
    (one step an epoch: the first of epoch 2, so the capture also holds epoch 1's validation): the op itself
    is named, not the next op that reads its output, nor an op of the previous validation."""
    train = _yolov5_train(small_data, tmp_path, "--epochs", "2", "--workers", "2")
    env = injector_env(script_env(train_env), tmp_path / "inject", "forward:silu|silu_:model.4.cv3.act:2",
                       log=tmp_path / "hit.json")
    proc = cli("verify", "--locate", "--json", "--workdir", tmp_path / "w", "--", *train, cwd=patched_yolov5, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = _json(proc)
    assert result["first_divergence"]["step"] == 2 and result["causes"] == []  # --name v{run} is no cause
    hit = json.loads((tmp_path / "hit.json").read_text())
    assert _where(result["locate"]) == _kernel(2, "forward", hit["op"], "model.4.cv3.act")
    assert hit["op"] == "aten.silu_.default"
    _, records = read_capture(tmp_path / "w" / "locate" / "run1" / "capture.jsonl")
    # epoch 1's validation: captured, never named
    assert any(r["phase"] == "validation" and r.get("pre") for r in records)
    header = read_log(result["logs"][0]).header
    assert header["seed"] == 1 and header["hyp"]["lr0"] == 0.01  # the seed init_seeds got: --seed 1 + 1 + RANK(-1)
    assert header["report"].endswith("determinism.json")


@pytest.mark.slow
def test_patched_yolov5_a_fault_in_the_collate_is_named_in_the_data_phase(patched_yolov5, small_data, train_env,
                                                                            tmp_path):
    """The DataLoader's collate (``torch.stack`` of the images, main process) changes step 2's batch:
    the logs say the batch differs; re-runs capturing the loader's fetches of step 2 name the op."""
    train = _yolov5_train(small_data, tmp_path, "--epochs", "1", "--workers", "0", batch=2)  # two steps
    env = injector_env(script_env(train_env), tmp_path / "inject", "collate:stack:-:2", log=tmp_path / "hit.json")
    proc = cli("verify", "--locate", "--json", "--workdir", tmp_path / "w", "--", *train, cwd=patched_yolov5, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = _json(proc)
    assert json.loads((tmp_path / "hit.json").read_text())["op"] == "aten.stack.default"
    assert result["first_divergence"]["kind"] == "data" and result["first_divergence"]["step"] == 2
    assert _where(result["locate"]) == {"step": 2, "phase": "data", "op": "aten.stack.default",
                                        "module": "(data) collate_fn LoadImagesAndLabels.collate_fn",
                                        "cause": "kernel"}
    header, records = read_capture(tmp_path / "w" / "locate" / "run1-data" / "capture.jsonl")
    assert header["through"] == "data" and header["workers"] == 0
    assert {r["phase"] for r in records} == {"data"}  # the fetches only: the step's own ops are not captured


@pytest.mark.slow
def test_the_ultralytics_trainer_names_a_fault_in_batchnorm_running_statistics(small_data, train_env, tmp_path):
    """BatchNorm writes its running statistics into arguments it does not return: they are outputs too."""
    pytest.importorskip("ultralytics")
    model = tmp_path / "tiny.yaml"  # model.2.cv1.bn: the first C2f's cv1 BatchNorm, as in yolov8n.yaml
    model.write_text(TINY_ULTRALYTICS)
    train = [*yolo_det_cmd("ultralytics", "train"), f"model={model}", f"data={small_data}", "epochs=1",
             "imgsz=64", "batch=4", "workers=2", "plots=False", "val=False", "amp=False", "device=cpu",
             f"project={tmp_path / 'runs'}", "name=u{run}", "exist_ok=True", "seed=0"]
    env = injector_env(script_env(train_env), tmp_path / "inject",
                       "forward:native_batch_norm:model.2.cv1.bn:1:running_mean", log=tmp_path / "hit.json")
    proc = cli("verify", "--locate", "--json", "--workdir", tmp_path / "w", "--", *train, cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    located = _json(proc)["locate"]
    assert _where(located) == _kernel(1, "forward", "aten.native_batch_norm.default", "model.2.cv1.bn")
