"""Stand-in with the compiled extension's names; fails as the extension does on a machine without CUDA."""


def ms_deform_attn_forward(*args):
    raise RuntimeError("Not implemented on the CPU")


def ms_deform_attn_backward(*args):
    raise RuntimeError("Not implemented on the CPU")
