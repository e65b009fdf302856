"""The patched YOLOv5 train.py under a virtual world size V, and DDP on CPU (gloo) through torchrun.

Real PyPI yolov5 7.0.14 (a patched copy), yolov5n from scratch (``--weights ''``) on the synthetic dataset:
128 px (``--multi-scale``: 64-192 px per step; at 32 px one image per micro-batch
would leave BatchNorm one value per channel), 24 training images, batch 4, 1 epoch: 6 batches, and ``nbs`` 64 makes the warm-up's ``accumulate`` reach 2
at batch 5, so the last optimizer steps gather two batches. One shared module fixture: V=4 on one process, V=4 on
two and on four gloo processes under torchrun (four on 2 cores: slow, about 30-40 s, but the issue's case), V=2 on one process (another
run), and two runs refused under strict that leave nothing behind (``--sync-bn``, refused before the release writes
anything; a batch the release caps at the dataset's size, found after train() began writing). All strict,
fingerprints on.
"""

from __future__ import annotations

import argparse
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conftest import PYTHON, run
from support.patch import report
from support.verify import script_env
from support.cli import cli

from yolo_det.integrations.yolov5 import script as v5
from yolo_det.integrations.yolov5 import world
from yolo_det.integrations.resume import sidecar_path
from yolo_det.patch import apply_patch
from yolo_det.proof import compare
from yolo_det.proof.compare import compare_logs
from yolo_det.record.log import read_log
from yolo_det.session import current as current_session
from yolo_det.synthetic import make_dataset

ARGS = ["--cfg", "yolov5n.yaml", "--weights", "", "--img", "128", "--batch-size", "4", "--workers", "0", "--epochs",
        "1", "--noplots", "--device", "cpu", "--exist-ok", "--deterministic", "strict", "--save-period", "1",
        "--multi-scale"]  # each step's size from (seed, step): one size on every process


@pytest.fixture(scope="module")
def runs(tmp_path_factory, patched_yolov5, train_env):
    root = tmp_path_factory.mktemp("world5")
    repo = patched_yolov5  # read only: every run writes under --project root
    data = make_dataset(root / "data", n_train=24, n_val=4, imgsz=128)
    env = script_env(train_env, OMP_NUM_THREADS="1")

    def train(name: str, *extra: str, processes: int = 1):
        launcher = [PYTHON] if processes == 1 else [PYTHON, "-m", "torch.distributed.run", "--standalone",
                                                    f"--nproc_per_node={processes}"]
        command = [*launcher, "train.py", "--data", data, *ARGS, "--project", root, "--name", name,
                   "--fingerprint", root / f"{name}.jsonl", *extra]
        return run(command, cwd=repo, env=env)

    # The one-process runs are single-threaded (OMP_NUM_THREADS=1): two at a time use the two cores CI has. A run
    # that trains shares the dataset's label caches only with runs that read them after it built them (the refused
    # --sync-bn run stops before it reads any data); the gloo runs start their own processes and run alone.
    pairs = [{"n1v4": ("--virtual-world-size", "4"), "syncbn": ("--virtual-world-size", "4", "--sync-bn")},
             # V divides 32, but YOLOv5 caps the train loader's batch at the 24 images: found once train() has
             # begun writing
             {"n1v2": ("--virtual-world-size", "2"), "capped": ("--virtual-world-size", "4", "--batch-size", "32")}]
    procs = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for pair in pairs:
            started = {name: pool.submit(train, name, *extra) for name, extra in pair.items()}
            procs.update({name: future.result() for name, future in started.items()})
    procs["n2v4"] = train("n2v4", "--virtual-world-size", "4", processes=2)
    procs["n4v4"] = train("n4v4", "--virtual-world-size", "4", processes=4)
    return SimpleNamespace(root=root, repo=repo, procs=procs, env=env)


def ok(runs, name: str) -> Path:
    proc = runs.procs[name]
    assert proc.returncode == 0, f"{name}\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
    return runs.root / name


def tensors(path: Path, key: str) -> dict:
    value = torch.load(path, weights_only=False, map_location="cpu")[key]
    return (value.float().state_dict() if hasattr(value, "state_dict") else value)


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("other, processes", [("n2v4", 2), ("n4v4", 4)])
def test_one_process_with_v4_is_the_multi_process_run_bit_for_bit(runs, monkeypatch, other, processes):
    one, two = ok(runs, "n1v4"), ok(runs, other)
    logs = [runs.root / "n1v4.jsonl", runs.root / f"{other}.jsonl"]
    assert [(log.header["virtual_world_size"], log.world_size, log.complete) for log in map(read_log, logs)] == \
        [(4, 1, True), (4, processes, True)]
    result = compare_logs(*logs)  # as diff and verify compare one V on different process counts
    assert result.identical, result.first_divergence
    monkeypatch.setattr(compare, "PER_PROCESS_KINDS", ())  # the data, loss and RNG records: the same too
    result = compare_logs(*logs)
    assert result.identical, result.first_divergence
    steps = read_log(logs[0]).steps
    assert result.steps == len(steps) == 5  # 6 batches: the last two optimizer steps gather 2 batches each
    assert any(name.startswith("batch1") for name in steps[-1].names["data"])
    assert all(step.names.get("ema") for step in steps)  # the EMA is compared at every step
    for name in ("last.pt", "best.pt"):  # the release strips the optimizer and saves the EMA as the model
        assert same(tensors(one / "weights" / name, "model"), tensors(two / "weights" / name, "model")), name
    sidecars = [torch.load(sidecar_path(run / "weights" / "last.pt"), weights_only=False) for run in (one, two)]
    for key in ("model", "ema"):  # full precision, beside last.pt
        assert same(sidecars[0][key], sidecars[1][key]), key
    # the optimizer: last.pt's is stripped at the end; --save-period 1 keeps epoch0.pt whole
    optimizers = [tensors(run / "weights" / "epoch0.pt", "optimizer") for run in (one, two)]
    assert optimizers[0]["param_groups"] == optimizers[1]["param_groups"]
    states = [o["state"] for o in optimizers]
    assert states[0].keys() == states[1].keys() and len(states[0]) > 100
    assert all(same(states[0][k], states[1][k]) for k in states[0])  # the momenta
    # results.csv: metrics, learning rates and the train losses rank 0 logs (virtual rank 0's on every N)
    assert (one / "results.csv").read_text() == (two / "results.csv").read_text()
    diff = cli("diff", *logs, env=runs.env)
    assert diff.returncode == 0, diff.stdout + diff.stderr
    sizes = {int(size) for size in re.findall(r"0/0\s+0G(?:\s+\S+){4}\s+(\d+):", runs.procs["n1v4"].stderr)}
    assert len(sizes) > 1, sizes  # --multi-scale trained steps at other sizes than --img


@pytest.mark.slow
@pytest.mark.parametrize("name, processes", [("n2v4", 2), ("n4v4", 4)])
def test_the_gloo_ranks_agree_and_the_reports_say_how_they_ran(runs, name, processes):
    ok(runs, name)
    for rank in range(1, processes):
        log = read_log(runs.root / f"{name}.rank{rank}.jsonl")
        assert log.rank == rank and log.complete
        assert all(step.ddp == {"world_size": processes, "ok": True} for step in log.steps)
    facts = report(runs.root / name)["yolov5"]
    assert facts["ddp"]["backend"] == "gloo" and facts["ddp"]["world_size"] == processes
    plan = facts["world"]
    assert (plan["virtual_world_size"], plan["world_size"], plan["per_rank"], plan["micro_batch"]) == \
        (4, processes, 4 // processes, 1)
    assert plan["loss_multiplier"] == 4
    single = report(runs.root / "n1v4")["yolov5"]
    assert "ddp" not in single and single["world"]["per_rank"] == 4
    assert single["train_loader"]["streams"]["virtual_world_size"] == 4


@pytest.mark.slow
def test_v2_is_another_run_and_diff_names_v_as_the_cause(runs):
    ok(runs, "n1v2")
    logs = [runs.root / "n1v2.jsonl", runs.root / "n1v4.jsonl"]
    result = compare_logs(*logs)
    assert not result.identical and result.first_divergence.step == 1
    assert not same(tensors(runs.root / "n1v2" / "weights" / "last.pt", "model"),
                    tensors(runs.root / "n1v4" / "weights" / "last.pt", "model"))
    diff = cli("diff", "--json", *logs, env=runs.env)
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "virtual_world_size" in diff.stdout


@pytest.mark.slow
def test_a_refused_setting_exits_before_the_release_writes_anything(runs):
    proc = runs.procs["syncbn"]
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "virtual_world_size cannot make sync-bn invariant" in proc.stderr and "Traceback" not in proc.stderr
    assert not (runs.root / "syncbn").exists()  # no hyp.yaml/opt.yaml, no weights/ ...
    assert not (runs.root / "syncbn.jsonl").exists()  # ... and no fingerprint log
    proc = runs.procs["capped"]  # found after train() began: what the run wrote is removed, the exit hooks too
    assert proc.returncode == 2 and "batch of 24 per process is not batch/N = 32" in proc.stderr, proc.stderr[-2000:]
    assert "removed what this run wrote" in proc.stderr and "Traceback" not in proc.stderr
    assert not (runs.root / "capped").exists() and not (runs.root / "capped.jsonl").exists()


def train_with_the_loop(opt, hyp):
    """Stands in for a patched train(): start() runs V only where the caller has the micro-batch loop."""
    session = v5.start(opt, hyp)
    if False:  # pragma: no cover - the loop the patch inserts, never run here
        v5.micro_batches(None, None)
    return session


def train_with_the_scale_stream(opt, hyp):
    """A patched train() whose multi-scale draw runs inside ``multi_scale_stream`` (the PyPI 7.0 shape)."""
    session = v5.start(opt, hyp)
    if False:  # pragma: no cover - never run here
        for _ in v5.micro_batches(None, None):
            with v5.multi_scale_stream(0):
                pass
    return session


def test_multi_scale_trains_where_the_size_comes_from_seed_and_step(capsys):
    opt = argparse.Namespace(batch_size=8, seed=0, multi_scale=True)
    session = train_with_the_scale_stream(opt, {"deterministic": "strict", "virtual_world_size": 4})
    assert "invariant" not in capsys.readouterr().err and session.world_plan.virtual_world_size == 4
    import random

    world.current().engine = object()  # the engine parallel() installs
    random.seed(123)
    before = random.getstate()
    draws = []
    for _ in range(2):
        with world.multi_scale_stream(7):
            draws.append([random.randrange(32, 128) for _ in range(4)])
    with world.multi_scale_stream(8):
        other = [random.randrange(32, 128) for _ in range(4)]
    assert draws[0] == draws[1] != other  # a function of (seed, step) ...
    assert random.getstate() == before  # ... and the process's own stream is untouched
    world.current().engine = None
    v5.finish(opt)


@pytest.mark.parametrize("option", ["sync_bn", "multi_scale", "rect", "quad", "image_weights"])
def test_what_v_cannot_make_invariant_is_refused_under_strict_and_warned_under_warn(option, capsys):
    opt = argparse.Namespace(batch_size=8, seed=0, **{option: True})
    with pytest.raises(SystemExit) as info:
        train_with_the_loop(opt, {"deterministic": "strict", "virtual_world_size": 4})
    assert info.value.code == 2
    assert f"virtual_world_size cannot make {option.replace('_', '-')} invariant" in capsys.readouterr().err
    session = train_with_the_loop(opt, {"deterministic": "warn", "virtual_world_size": 4})
    assert f"cannot make {option.replace('_', '-')} invariant" in capsys.readouterr().err
    assert any(option.replace("_", "-") in note for note in session.report.notes)
    assert session.world_plan.virtual_world_size == 4
    v5.finish(opt)


def test_the_train_loader_samples_per_virtual_rank_with_b_over_n_images_or_the_run_stops(capsys):
    from torch.utils.data import DataLoader, Sampler, TensorDataset

    from yolo_det.world import VirtualSampler

    opt = argparse.Namespace(batch_size=8, seed=0)
    data = TensorDataset(torch.arange(32))
    train_with_the_loop(opt, {"deterministic": "off", "virtual_world_size": 4})  # V samples under off too
    with v5.seeded_loaders(opt):
        loader = DataLoader(data, batch_size=8, shuffle=True)
    assert isinstance(loader.sampler, VirtualSampler) and loader.sampler.plan.virtual_world_size == 4
    with pytest.raises(SystemExit) as info:
        with v5.seeded_loaders(opt):
            DataLoader(data, batch_size=4, shuffle=True)  # capped by the dataset's size: another micro-batch
    assert info.value.code == 2 and "batch of 4 per process is not batch/N = 8" in capsys.readouterr().err
    train_with_the_loop(opt, {"deterministic": "off", "virtual_world_size": 4})  # the refusal ended the session

    class Custom(Sampler):
        def __iter__(self):
            return iter(range(32))

        def __len__(self):
            return 32

    with pytest.raises(SystemExit) as info:
        with v5.seeded_loaders(opt):
            DataLoader(data, batch_size=8, sampler=Custom())
    assert info.value.code == 2 and "could not sample per virtual rank (custom sampler" in capsys.readouterr().err
    v5.finish(opt)


def main_opt(tmp_path, **settings) -> argparse.Namespace:
    """``opt`` as the release's main() holds it at its DDP block: --hyp a file, nothing resumed."""
    hyp = tmp_path / "hyp.yaml"
    hyp.write_text("lr0: 0.01\n")
    values = dict(batch_size=8, seed=0, deterministic="strict", virtual_world_size=4, hyp=str(hyp), weights="",
                  resume=False, device="cpu")
    values.update(settings)
    return argparse.Namespace(**values)


REFUSED = [({"sync_bn": True}, "cannot make sync-bn invariant"), ({"image_weights": True}, "cannot make image-weights"),
           ({"rect": True}, "cannot make rect invariant"), ({"quad": True}, "cannot make quad invariant"),
           ({"evolve": 300}, "cannot make evolve invariant"),
           ({"batch_size": 6}, "batch size 6 does not divide into virtual_world_size 4"),
           ({"batch_size": -1}, "needs an explicit batch size"), ({"virtual_world_size": 3}, "3 is not a power of two"),
           ({"deterministic": "stric"}, "'stric' is not one of")]


@pytest.mark.parametrize("settings, needle", REFUSED, ids=[next(iter(s)) + str(i) for i, (s, _) in enumerate(REFUSED)])
def test_main_refuses_what_start_would_before_train_writes_anything(settings, needle, tmp_path, capsys):
    opt = main_opt(tmp_path, **settings)
    with pytest.raises(SystemExit) as info:
        v5.preflight(opt, train_with_the_scale_stream)
    assert info.value.code == 2 and needle in capsys.readouterr().err
    assert current_session() is None  # no session: no fingerprint log, nothing recorded
    assert [path.name for path in tmp_path.iterdir()] == ["hyp.yaml"]  # no run folder, no log


def test_a_refusal_after_train_began_removes_what_the_run_created_and_nothing_else(tmp_path, capsys):
    earlier = tmp_path / "earlier"  # an earlier run's folder and log, trained into again with --exist-ok
    earlier.mkdir()
    (earlier / "results.csv").write_text("the earlier run's")
    (tmp_path / "earlier.jsonl").write_text("the earlier run's")
    for save_dir in (tmp_path / "project" / "new", earlier):  # --project made by this run too
        log = tmp_path / f"{save_dir.name}.jsonl"
        opt = main_opt(tmp_path, save_dir=str(save_dir), fingerprint=str(log))
        v5.preflight(opt, train_with_the_scale_stream)
        train_with_the_loop(opt, {"deterministic": "strict", "virtual_world_size": 4})  # writes the log's header
        (save_dir / "weights").mkdir(parents=True, exist_ok=True)  # what the release writes before its loader
        (save_dir / "hyp.yaml").write_text("this run's")
        assert log.exists()
        with pytest.raises(SystemExit) as info:
            with v5.seeded_loaders(opt):
                torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(6)), batch_size=6)
        err = capsys.readouterr().err
        assert info.value.code == 2 and "batch of 6 per process is not batch/N = 8" in err
        assert current_session() is None and not (save_dir / "determinism.json").exists()
        v5.finish(opt)
    assert not (tmp_path / "project").exists() and not (tmp_path / "new.jsonl").exists()
    assert (earlier / "results.csv").read_text() == "the earlier run's" and (earlier / "hyp.yaml").exists()
    assert (tmp_path / "earlier.jsonl").exists() and "existed before this run: not removed" in err


def test_main_reads_v_and_the_mode_from_the_hyp_file_or_a_resumed_dict_and_waits_with_warnings(tmp_path, capsys):
    opt = main_opt(tmp_path, deterministic=None, virtual_world_size=None, sync_bn=True)
    v5.preflight(opt, train_with_the_scale_stream)  # no V anywhere: nothing to refuse
    Path(opt.hyp).write_text("lr0: 0.01\ndeterministic: strict\nvirtual_world_size: 4\n")
    with pytest.raises(SystemExit) as info:
        v5.preflight(opt, train_with_the_scale_stream)
    assert info.value.code == 2 and "cannot make sync-bn invariant" in capsys.readouterr().err
    resumed = main_opt(tmp_path, deterministic=None, virtual_world_size=None, rect=True,
                       hyp={"lr0": 0.01, "deterministic": "strict", "virtual_world_size": 4})  # opt.yaml's hyp dict
    with pytest.raises(SystemExit):
        v5.preflight(resumed, train_with_the_scale_stream)
    assert "cannot make rect invariant" in capsys.readouterr().err
    v5.preflight(main_opt(tmp_path, deterministic="warn", sync_bn=True), train_with_the_scale_stream)
    assert capsys.readouterr().err == ""  # start() warns, once per train() call
    with pytest.raises(SystemExit):  # a train() without the V loop: "not supported" under strict, now
        v5.preflight(main_opt(tmp_path), lambda: None)
    assert "is not supported by this train.py" in capsys.readouterr().err
    assert current_session() is None


@pytest.mark.parametrize("batch, needle", [(6, "batch size 6 does not divide into virtual_world_size 4"),
                                           (-1, "needs an explicit batch size")])
def test_the_batch_must_divide_into_v(batch, needle, capsys):
    with pytest.raises(SystemExit) as info:
        train_with_the_loop(argparse.Namespace(batch_size=batch, seed=0), {"virtual_world_size": 4})
    assert info.value.code == 2 and needle in capsys.readouterr().err


@pytest.mark.parametrize("v", [4, 2, 1])
def test_the_release_logs_the_first_micro_batchs_loss_after_the_loop(v):
    """results.csv's train losses: the release reads ``loss_items`` after the micro-batch loop (the last one's)."""
    plan = world.YoloV5World(v, argparse.Namespace(batch_size=8, seed=0))
    plan.engine = object()  # the engine parallel() installs
    world.begin(plan)
    try:
        for batch in range(2):
            items = []
            for j in range(v):
                plan.current = j
                items.append(torch.tensor([10.0 * batch + j, 1.0, 2.0]))
                with v5.backward(items[-1]):
                    pass
            plan.current = None
            assert torch.equal(items[-1], torch.tensor([10.0 * batch, 1.0, 2.0]))  # the first micro-batch's
            assert [float(t[0]) for t in items[1:-1]] == [10.0 * batch + j for j in range(1, v - 1)]
    finally:
        world.begin(None)


def test_a_cpu_rank_checks_what_the_release_asserts_and_others_keep_the_release_block():
    assert world.ddp_launch(False, argparse.Namespace(device="cpu")) is False
    assert world.ddp_launch(True, argparse.Namespace(device="0,1")) is True  # GPUs: the release's own block
    assert world.cpu_ddp_problem(argparse.Namespace(batch_size=6), 4) == "--batch-size 6 must be multiple of WORLD_SIZE"
    assert "--image-weights" in world.cpu_ddp_problem(argparse.Namespace(image_weights=True, batch_size=8), 2)
    assert world.cpu_ddp_problem(argparse.Namespace(batch_size=8), 2) is None


def test_the_validation_loader_gets_one_gpus_batch(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    asked = []
    def release(*args, **kwargs):
        asked.append((args, kwargs))

    names = {"create_dataloader": release}
    plan = world.YoloV5World(8, argparse.Namespace(batch_size=16, seed=0))
    assert (plan.plan.world_size, plan.plan.virtual_ranks, plan.plan.local_batch) == (2, [0, 1, 2, 3], 8)
    plan.size_validation(names)
    with world.loading_train():
        names["create_dataloader"]("train", 64, 8)  # the train loader: B/N as the release asks
    names["create_dataloader"]("val", 64, 16, 32)  # the release's 2 * B/N: one GPU's 2 * B/V
    names["create_dataloader"]("val", 64, batch_size=16)
    assert [a[0][2] if len(a[0]) > 2 else a[1]["batch_size"] for a in asked] == [8, 4, 4]
    plan.close()
    assert names["create_dataloader"] is release


# -- the patch: release shapes (written here, reproducing the trees the patch must meet) --------------------

SHAPE = '''\
import argparse
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from utils.torch_utils import ModelEMA, init_seeds, select_device

LOCAL_RANK = -1
RANK = -1
WORLD_SIZE = 1


def train(hyp, opt, device):
    init_seeds(1 + RANK)
    model, compute_loss, scaler, train_loader, cuda = build(opt)
    ema = ModelEMA(model) if RANK in [-1, 0] else None
    if cuda and RANK != -1:
        model = {wrap}
    for epoch in range(0, opt.epochs):
        for i, (imgs, targets, paths, _) in enumerate(train_loader):
            ni = i
            if opt.multi_scale:
                imgs = resize(imgs)

            # Forward
            with torch.cuda.amp.autocast(enabled=cuda):
                pred = model(imgs)  # forward
                loss, loss_items = compute_loss({loss_args})
                if RANK != -1:
                    loss *= WORLD_SIZE

            # Backward
            scaler.scale(loss).backward()


def parse_opt():
    parser = argparse.ArgumentParser()
    parser.add_argument('--seed', type=int, default=0)
    return parser.parse_args()


def main(opt):
    device = select_device(opt.device, batch_size=opt.batch_size)
    if {launch} != -1:
        msg = 'is not compatible with YOLOv5 Multi-GPU DDP training'
        assert not opt.evolve, f'--evolve {{msg}}'
        assert torch.cuda.device_count() > LOCAL_RANK, 'insufficient CUDA devices for DDP command'
        torch.cuda.set_device(LOCAL_RANK)
        device = torch.device('cuda', LOCAL_RANK)
        dist.init_process_group(backend="nccl" if dist.is_nccl_available() else "gloo")
{tail}
    train(opt.hyp, opt, device)
'''

V62 = dict(wrap="smart_DDP(model)", loss_args="pred, targets.to(device)", launch="LOCAL_RANK", tail="")
V61 = dict(wrap="DDP(model, device_ids=[LOCAL_RANK], output_device=LOCAL_RANK)",
           loss_args="pred, targets.to(device)", launch="LOCAL_RANK", tail="")
V50 = dict(V61, launch="opt.local_rank", tail="        opt.batch_size = opt.total_batch_size // opt.world_size")
SEGMENT = dict(V62, loss_args="pred, targets.to(device), masks=masks.to(device).float()")
CALLS = ("yolo_det_v5.ddp_launch(", "yolo_det_v5.parallel(model)", "yolo_det_v5.micro_batches(imgs, targets, ni)",
         "yolo_det_v5.world_loss(loss)", "yolo_det_v5.multi_scale_stream(ni)")


@pytest.mark.parametrize("shape, wired", [(V62, True), (V61, True), (V50, False), (SEGMENT, False)],
                         ids=["smart_DDP", "DDP", "v5.0-launch", "segment-loss"])
def test_the_patch_wires_v_where_the_tree_has_the_shapes_and_reverts_byte_for_byte(shape, wired, tmp_path):
    from yolo_det.patch import revert_patch

    script = tmp_path / "train.py"
    source = SHAPE.format(**shape)
    script.write_text(source)
    apply_patch(tmp_path)
    patched = script.read_text()
    compile(patched, str(script), "exec")
    assert [call in patched for call in CALLS] == [wired] * len(CALLS)
    if wired:  # the whole forward ... backward runs per micro-batch, the loss scaled before the backward
        loop = patched[patched.index("for imgs, targets in"):]
        assert loop.index("pred = model(imgs)") < loop.index("world_loss(loss)") < loop.index("backward()")
        assert patched.split("for imgs, targets in")[0].splitlines()[-2].strip() == "# Forward"  # above the loop
    revert_patch(tmp_path)
    assert script.read_text() == source
