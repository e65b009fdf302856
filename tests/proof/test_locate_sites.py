"""`locate` names the op that made the difference, for a family of injected faults (tests/support/injectors.py)
in the real PyPI YOLOv5 and Ultralytics models: the first op whose real output differs for real
identical inputs, also when the op is pointwise (its first-pass digest is derived, not read).

One training step (forward, loss, backward, optimizer update with foreach kernels, as on CUDA)
of each release's real model, loss and optimizer runs under the real :class:`StepCapture`, twice
per run: the first pass and the confirming pass of :func:`locate_step`. Run 1 never has an
injector, so its first pass is shared by every site; each site's run 2 has one.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from support.injectors import Injector

from yolo_det.record.capture import StepCapture, read_capture
from yolo_det.proof.locate import compare_captures, locate_data, locate_step

pytestmark = pytest.mark.slow


class Trainer:
    """One training step of a model, captured: ``capture(run, read)`` for :func:`locate_step`."""

    def __init__(self, model, loss, optimizer, batch, tmp: Path) -> None:
        self.model, self.loss, self.batch, self.tmp = model, loss, batch, tmp
        loss(model, batch).backward()  # lazy set-up (a loss's criterion) happens here, not in one capture only
        optimizer.zero_grad(set_to_none=True)
        self.model_state = copy.deepcopy(model.state_dict())
        self.optimizer = optimizer
        self.optimizer_state = copy.deepcopy(optimizer.state_dict())
        self.cache = {}
        self.site = None
        self.hits = []

    def for_site(self, site):
        """The capture function of a pair of runs whose run 2 has the injector of ``site`` (None: none)."""
        def capture(run, read):
            key = ("plain", read) if run == 1 else (site or "plain again", read)
            if key not in self.cache:
                self.cache[key] = self._capture(site if run == 2 else None, read, len(self.cache))
            return self.cache[key]
        return capture

    def _capture(self, site, read, n):
        self.model.load_state_dict(self.model_state)
        self.optimizer.load_state_dict(self.optimizer_state)
        for group in self.optimizer.param_groups:
            group["foreach"] = True  # the multi-tensor kernels CUDA runs use by default
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        injector = Injector(site).start() if site else None
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        path = self.tmp / f"capture{n}.jsonl"
        capture = StepCapture(1, path, lambda: [(self.model, "")], exit_when_done=False, read=read)
        hooks = [register_optimizer_step_pre_hook(capture.around_pre(lambda *a: None)),
                 register_optimizer_step_post_hook(capture.around_post(lambda *a: None))]
        try:
            capture.on_batch("train")
            loss = self.loss(self.model, self.batch)
            loss.backward()
            self.optimizer.step()
        finally:
            for hook in hooks:
                hook.remove()
            capture.finish(exit_process=False)
            if injector is not None:
                injector.stop()
                assert injector.hit is not None, f"the injector of {site} found no op to change"
                self.hits.append(injector.hit)
        return read_capture(path)[1]


def _where(location):
    return (location.step, location.phase, location.module, location.op, location.cause)


# -- YOLOv5 (PyPI yolov5: the model, ComputeLoss and smart_optimizer of train.py) -------------------------
@pytest.fixture(scope="module")
def yolov5_trainer(tmp_path_factory):
    yolov5 = pytest.importorskip("yolov5")
    import yaml
    from yolov5.models.yolo import Model
    from yolov5.utils.loss import ComputeLoss
    from yolov5.utils.torch_utils import smart_optimizer

    root = Path(yolov5.__file__).parent
    torch.manual_seed(0)
    model = Model(str(root / "models" / "yolov5n.yaml"), ch=3, nc=2)
    model.hyp = yaml.safe_load((root / "data" / "hyps" / "hyp.scratch-low.yaml").read_text())
    model.nc = 2
    compute_loss = ComputeLoss(model)
    optimizer = smart_optimizer(model, "SGD", 0.01, 0.937, 5e-4)
    imgs = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    targets = torch.tensor([[0, 0, 0.5, 0.5, 0.4, 0.5], [1, 1, 0.3, 0.6, 0.5, 0.4]])

    def loss(m, batch):
        return compute_loss(m(batch[0]), batch[1])[0]

    return Trainer(model, loss, optimizer, (imgs, targets), tmp_path_factory.mktemp("yolov5_sites"))


YOLOV5_SITES = [
    # (site, expected phase, module, op)
    ("forward:convolution:model.2.cv1.conv:1", "forward", "model.2.cv1.conv", "aten.convolution.default"),
    ("forward:silu|silu_:model.4.cv3.act:1", "forward", "model.4.cv3.act", "aten.silu_.default"),
    ("forward:native_batch_norm:model.3.bn:1:running_var", "forward", "model.3.bn", "aten.native_batch_norm.default"),
    ("backward:silu_backward:model.2.cv3.act:1", "backward", "model.2.cv3.act", "aten.silu_backward.default"),
    ("optimizer:_foreach_add_|add_:-:1", "optimizer", "(outside)", "aten._foreach_add_.List"),
]


@pytest.mark.parametrize("site,phase,module,op", YOLOV5_SITES, ids=[s[0].split(":")[0] + ":" + s[0].split(":")[1]
                                                                   for s in YOLOV5_SITES])
def test_yolov5_each_injected_op_is_named(yolov5_trainer, site, phase, module, op):
    location = locate_step(yolov5_trainer.for_site(site), (1, 2), 1)
    hit = yolov5_trainer.hits[-1]
    assert hit["op"] == op  # the injector changed the op the test expects (the release's own op)
    assert _where(location) == (1, phase, module, op, "kernel"), location.describe()
    assert location.detail.startswith("same inputs, different output")


def test_yolov5_the_first_pass_alone_names_the_wrong_op_for_a_pointwise_fault(yolov5_trainer):
    """Why the confirming pass exists: a derived digest cannot show a fault inside a pointwise op."""
    capture = yolov5_trainer.for_site("forward:silu|silu_:model.4.cv3.act:1")
    first = compare_captures(capture(1, None), capture(2, None), 1)
    assert first.op is not None and (first.module, first.op) != ("model.4.cv3.act", "aten.silu_.default")


def test_yolov5_identical_runs_locate_nothing(yolov5_trainer):
    location = locate_step(yolov5_trainer.for_site(None), (1, 2), 1)
    assert location.op is None and location.cause == "unknown" and "identical" in location.detail


# -- Ultralytics (its DetectionModel and v8DetectionLoss) -----------------------------------------------
@pytest.fixture(scope="module")
def ultralytics_trainer(tmp_path_factory):
    pytest.importorskip("ultralytics")
    from ultralytics.cfg import get_cfg
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(0)
    model = DetectionModel("yolov8n.yaml", nc=2, verbose=False)
    model.args = get_cfg()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.001)
    batch = {"img": torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)),
             "batch_idx": torch.tensor([0.0, 1.0]), "cls": torch.tensor([[0.0], [1.0]]),
             "bboxes": torch.tensor([[0.5, 0.5, 0.4, 0.5], [0.3, 0.6, 0.5, 0.4]])}

    def loss(m, b):
        return m(b)[0].sum()  # forward(dict) -> loss, as the trainer calls it

    return Trainer(model, loss, optimizer, batch, tmp_path_factory.mktemp("ultralytics_sites"))


ULTRALYTICS_SITES = [  # a pointwise forward op (not in place here) and AdamW's foreach update of the parameters
    ("forward:silu|silu_:model.2.cv1.act:1", "forward", "model.2.cv1.act", "aten.silu.default"),
    ("optimizer:_foreach_mul_|_foreach_add_|_foreach_addcdiv_|mul_|addcdiv_:-:1", "optimizer", "(outside)", None),
]


@pytest.mark.parametrize("site,phase,module,op", ULTRALYTICS_SITES, ids=["forward", "optimizer"])
def test_ultralytics_each_injected_op_is_named(ultralytics_trainer, site, phase, module, op):
    location = locate_step(ultralytics_trainer.for_site(site), (1, 2), 1)
    hit = ultralytics_trainer.hits[-1]
    assert op is None or hit["op"] == op
    assert hit["op"].startswith("aten._foreach_") or phase != "optimizer"  # the multi-tensor kernel
    assert _where(location) == (1, phase, module, hit["op"], "kernel"), location.describe()


# -- a DataLoader's collate: each release's own collate function, the loader in the training process ----
class Items(torch.utils.data.Dataset):
    """Dataset items shaped as each release's dataset gives them (``shape``: "yolov5" -> (CHW uint8
    image, labels (n, 6), path, shapes); "ultralytics" -> a dict); ``other``: other images."""

    def __init__(self, shape, other=None):
        self.shape, self.other = shape, other

    def __len__(self):
        return 8

    def __getitem__(self, i):
        pixels = np.random.default_rng(i + 100 * bool(self.other)).integers(0, 255, (3, 16, 16), dtype=np.uint8)
        img = torch.from_numpy(pixels)
        box = torch.tensor([[0.5, 0.5, 0.4, 0.5]])
        if self.shape == "yolov5":
            labels = torch.zeros((1, 6))
            labels[:, 2:] = box
            return img, labels, f"im{i}.jpg", None
        return {"img": img, "cls": torch.zeros((1, 1)), "bboxes": box, "batch_idx": torch.zeros(1), "im_file": f"{i}"}


class LoaderRuns:
    """Runs of a few training steps fed by a real DataLoader (``workers`` processes) under the real
    recorder, with the data capture of step 2 on: ``capture(run, read)`` for :func:`locate_data`."""

    def __init__(self, collate, shape, tmp: Path, site=None, other=None, workers=0) -> None:
        self.collate, self.shape, self.tmp, self.site = collate, shape, tmp, site
        self.other, self.workers = other, workers
        self.cache, self.headers, self.hits = {}, [], []

    def capture(self, run, read):
        if (run, read) not in self.cache:
            self.cache[run, read] = self._run(run, read, len(self.cache))
        return self.cache[run, read]

    def _run(self, run, read, n):
        from unittest import mock

        from yolo_det.record import fingerprint
        from yolo_det.record.capture import PATH_VAR, READ_VAR, STEP_VAR, THROUGH_VAR, CaptureComplete

        torch.manual_seed(0)
        model = torch.nn.Conv2d(3, 4, 3)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        dataset = Items(self.shape, self.other if run == 2 else None)
        loader = torch.utils.data.DataLoader(dataset, batch_size=2, shuffle=True, num_workers=self.workers,
                                             collate_fn=self.collate, generator=torch.Generator().manual_seed(0))
        path = self.tmp / f"capture{n}.jsonl"
        env = {STEP_VAR: "2", PATH_VAR: str(path), THROUGH_VAR: "data",
               READ_VAR: f"{read[0]}:{read[1]}" if read else ""}
        injector = Injector(self.site).start() if self.site and run == 2 else None
        try:
            with mock.patch.dict(os.environ, env), pytest.raises(CaptureComplete):
                with fingerprint.fingerprinting(self.tmp / f"log{n}.jsonl", model=model):
                    for batch in loader:
                        imgs = batch["img"] if isinstance(batch, dict) else batch[0]
                        model(imgs.float() / 255).mean().backward()
                        optimizer.step()
                        optimizer.zero_grad()
        finally:
            if injector is not None:
                injector.stop()
                self.hits.append(injector.hit)
        header, records = read_capture(path)
        self.headers.append(header)
        return records

    def locate(self):
        from yolo_det.proof.locate import Location

        found = Location(2, "data", phase="data", detail="the step's input batch differs")
        return locate_data(self.capture, (1, 2), found, lambda: max(h["workers"] for h in self.headers))


def _collates():
    yolov5 = pytest.importorskip("yolov5.utils.dataloaders")
    ultralytics = pytest.importorskip("ultralytics.data.dataset")
    return [("yolov5", yolov5.LoadImagesAndLabels.collate_fn, "LoadImagesAndLabels.collate_fn"),
            ("ultralytics", ultralytics.YOLODataset.collate_fn, "YOLODataset.collate_fn")]


@pytest.mark.parametrize("release", ["yolov5", "ultralytics"])
def test_a_fault_in_the_collate_of_the_step_is_named_in_the_data_phase(release, tmp_path):
    shape, collate, name = next(c for c in _collates() if c[0] == release)
    runs = LoaderRuns(collate, shape, tmp_path, site="collate:stack:-:2")
    location = runs.locate()
    assert runs.hits[-1]["op"] == "aten.stack.default"
    assert _where(location) == (2, "data", f"(data) collate_fn {name}", "aten.stack.default", "kernel"), \
        location.describe()
    assert location.detail.startswith("same inputs, different output")
    records = runs.cache[1, None]
    assert {r["phase"] for r in records} == {"data"}  # the loader's fetches only, not the model's ops
    assert any(r["module"] == "(data) dataset Items" for r in records)


def test_a_batch_whose_items_differ_names_no_loader_op_and_identical_runs_nothing(tmp_path):
    """An op whose inputs differ is no culprit: a different image read makes ``stack`` differ, the
    dataset made it so; two identical runs differ nowhere."""
    shape, collate, _ = _collates()[0]
    runs = LoaderRuns(collate, shape, tmp_path / "other", other=True)
    location = runs.locate()
    assert (location.op, location.cause, location.phase) == (None, "data", "data"), location.describe()
    assert "what the loader read" in location.notes[-1]
    assert any(r["op"] == "aten.stack.default" and r["in"] != s["in"] for r, s in
               zip(runs.cache[1, None], runs.cache[2, None]))  # the batches did differ
    same = LoaderRuns(collate, shape, tmp_path / "same").locate()
    assert same.op is None and same.cause == "data" and "what the loader read" in same.notes[-1]


def test_a_loader_with_worker_processes_says_to_locate_with_none(tmp_path):
    shape, collate, _ = _collates()[0]
    runs = LoaderRuns(collate, shape, tmp_path, site="collate:stack:-:2", workers=1)
    location = runs.locate()
    assert location.op is None and location.cause == "data"
    assert "1 DataLoader worker process:" in location.notes[-1] and "--workers 0" in location.notes[-1]
    assert sorted(runs.cache) == [(1, None), (2, None)]  # no confirming pass: it could name nothing
