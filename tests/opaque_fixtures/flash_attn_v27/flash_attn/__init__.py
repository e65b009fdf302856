from .flash_attn_interface import flash_attn_func  # noqa: F401
