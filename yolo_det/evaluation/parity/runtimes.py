"""The export's runtime, run deterministically where it allows: ONNX Runtime and OpenVINO on CPU, TensorRT on CUDA.

ONNX Runtime: one intra/inter-op thread, sequential, ``use_deterministic_compute``; OpenVINO: f32 inference
precision, one stream, one thread; TensorRT: a built engine (its build is not deterministic, said in its notes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

from .export import ExportInfo, ParityInputError, engine_header


class Runtime:
    """One exported model in its runtime on CPU, run deterministically where the runtime allows."""

    name = ""
    settings: Dict[str, Any] = {}
    notes: List[str] = []

    def __call__(self, x: np.ndarray) -> List[np.ndarray]:  # pragma: no cover - interface
        raise NotImplementedError


class OnnxRuntime(Runtime):
    """ONNX Runtime, CPU execution provider, one thread, sequential, deterministic compute."""

    name = "onnxruntime"

    def __init__(self, file: Path):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.use_deterministic_compute = True
        so.log_severity_level = 3
        self.session = ort.InferenceSession(str(file), so, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0]
        self.settings = {"version": ort.__version__, "providers": self.session.get_providers(),
                         "intra_op_num_threads": 1, "inter_op_num_threads": 1, "execution_mode": "sequential",
                         "use_deterministic_compute": True,
                         "graph_optimization_level": str(so.graph_optimization_level)}
        self.notes = ["CPU kernels repeat bit for bit at a fixed thread count; use_deterministic_compute changes only "
                      "GPU kernels (CUDA EP), where atomics-based ops otherwise have no deterministic mode"]

    def __call__(self, x: np.ndarray) -> List[np.ndarray]:
        dtype = np.float16 if "float16" in self.input.type else np.float32
        return [np.asarray(o) for o in self.session.run(None, {self.input.name: x.astype(dtype)})]


class OpenVinoRuntime(Runtime):
    """OpenVINO CPU plugin, f32 inference precision, one stream, one thread."""

    name = "openvino"

    def __init__(self, file: Path):
        import openvino as ov

        config = {"INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": "1",
                  "PERFORMANCE_HINT": "LATENCY"}
        core = ov.Core()
        self.compiled = core.compile_model(str(file), "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.settings = {"version": ov.__version__, "device": "CPU", **config}
        self.notes = ["OpenVINO has no deterministic switch; with one stream, one thread and f32 precision its CPU "
                      "plugin repeats bit for bit (checked each run: the first image twice). Without "
                      "INFERENCE_PRECISION_HINT=f32 CPUs with bf16/fp16 units compute in lower precision"]

    def __call__(self, x: np.ndarray) -> List[np.ndarray]:
        result = self.request.infer({0: x.astype(np.float32)})
        return [np.asarray(result[o]) for o in self.compiled.outputs]


class TensorRtRuntime(Runtime):
    """TensorRT on the first CUDA GPU (torch's CUDA tensors as its buffers); TensorRT 10's named-tensor API, else
    the bindings API of 8.x. Not run in CI (no GPU): ``scripts/gpu_check.py`` exercises it."""

    name = "tensorrt"

    def __init__(self, file: Path):
        try:
            import tensorrt as trt
        except ImportError as exc:
            raise ParityInputError(f"{file}: a TensorRT engine, but the tensorrt package is not installed ({exc}); "
                                   "install NVIDIA's tensorrt wheel matching the engine's version on a machine with "
                                   "a CUDA GPU, or compare the ONNX export it was built from") from exc
        import torch

        if not torch.cuda.is_available():
            raise ParityInputError(f"{file}: a TensorRT engine needs a CUDA GPU, and torch sees none "
                                   "(compare the ONNX export it was built from on CPU instead)")
        self.torch, self.device = torch, torch.device("cuda", 0)
        start, _ = engine_header(file)
        blob = file.read_bytes()[start:]
        self.runtime = trt.Runtime(trt.Logger(trt.Logger.ERROR))
        self.engine = self.runtime.deserialize_cuda_engine(blob)
        if self.engine is None:
            raise ParityInputError(f"{file}: TensorRT {trt.__version__} cannot deserialize this engine (built by "
                                   "another TensorRT version or for another GPU: rebuild it here)")
        self.context = self.engine.create_execution_context()
        self.trt10 = hasattr(self.engine, "num_io_tensors")
        if self.trt10:
            names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
            is_input = lambda n: self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT  # noqa: E731
            dtype_of = self.engine.get_tensor_dtype
        else:  # TensorRT 8.x bindings
            names = [self.engine.get_binding_name(i) for i in range(self.engine.num_bindings)]
            is_input = lambda n: self.engine.binding_is_input(n)  # noqa: E731
            dtype_of = self.engine.get_binding_dtype
        self.inputs = [n for n in names if is_input(n)]
        self.outputs = [n for n in names if not is_input(n)]
        self.names = names
        self.dtypes = {n: torch.from_numpy(np.zeros(0, trt.nptype(dtype_of(n)))).dtype for n in names}
        self.settings = {"version": trt.__version__, "device": torch.cuda.get_device_name(0),
                         "api": "named tensors (TensorRT 10)" if self.trt10 else "bindings (TensorRT 8)",
                         "engine_bytes": len(blob)}
        self.notes = ["a built engine runs repeatably for a fixed input on one GPU (checked: the first image twice); "
                      "building is not deterministic: tactic selection times kernels, so two builds from one ONNX can "
                      "pick different kernels and differ (NVIDIA/TensorRT #4730, #3316); compare each build with the "
                      ".pt, or reuse one timing cache / one engine",
                      "fp16/int8 engines (half=True, int8=True) compute in reduced precision by design"]

    def _shape(self, name: str) -> Tuple[int, ...]:
        return tuple(self.context.get_tensor_shape(name) if self.trt10 else self.context.get_binding_shape(
            self.engine.get_binding_index(name)))

    def __call__(self, x: np.ndarray) -> List[np.ndarray]:
        torch = self.torch
        inp = torch.from_numpy(np.ascontiguousarray(x)).to(self.device, self.dtypes[self.inputs[0]])
        if self.trt10:
            self.context.set_input_shape(self.inputs[0], tuple(inp.shape))
        else:
            self.context.set_binding_shape(self.engine.get_binding_index(self.inputs[0]), tuple(inp.shape))
        outs = {n: torch.empty(self._shape(n), dtype=self.dtypes[n], device=self.device) for n in self.outputs}
        buffers = {self.inputs[0]: inp, **outs}
        stream = torch.cuda.current_stream(self.device)
        if self.trt10:
            for n, t in buffers.items():
                self.context.set_tensor_address(n, t.data_ptr())
            ok = self.context.execute_async_v3(stream.cuda_stream)
        else:
            ok = self.context.execute_v2([buffers[n].data_ptr() for n in self.names])
        stream.synchronize()
        if not ok:
            raise RuntimeError("TensorRT execution failed")
        return [outs[n].float().cpu().numpy() for n in self.outputs]


def open_runtime(info: ExportInfo) -> Runtime:
    """The runtime that runs this export: ONNX Runtime or OpenVINO on CPU, TensorRT on CUDA."""
    if info.format == "engine":
        return TensorRtRuntime(info.file)
    return OnnxRuntime(info.file) if info.format == "onnx" else OpenVinoRuntime(info.file)


__all__ = ["OnnxRuntime", "OpenVinoRuntime", "Runtime", "TensorRtRuntime", "open_runtime"]
