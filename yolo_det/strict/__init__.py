"""Making ``strict`` actually run: which ops raise on CUDA, and exact replacements for them.

Owns: ``optable`` (the op table as data), ``audit`` (the CPU audit of a model),
``cuda_emulation`` (raising on CPU where CUDA would), ``replacements`` (deterministic ops),
``swap`` (putting them into a model), ``models`` (building models to audit), ``opaque``
(kernels PyTorch's switch cannot see), ``opaque_replacements`` (their stand-ins), ``probe``
(running an op twice and comparing bits), ``compiled`` (``torch.compile`` under strict: Inductor made
deterministic). May import :mod:`yolo_det.core`.
"""
