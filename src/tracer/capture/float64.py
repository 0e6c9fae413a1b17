"""Run transformers in true float64.

`model.to(torch.float64)` is not enough: transformers' eager code upcasts to
float32 on purpose in a few places (RMSNorm's `.to(torch.float32)`, rotary's
`.float()` and float32 `inv_freq`, `softmax(..., dtype=torch.float32)`), which in
a float64 model is a downcast, capping agreement at about 1e-7. Under
`float32_as_float64()` those casts give float64, and the rotary tables are
rebuilt by transformers' own init code in float64, so the reference is float64
throughout and tracer's float64 mode can be held to 1e-10.
"""

from __future__ import annotations

import contextlib
import functools

from tracer.errors import TracerError


def recompute_rotary_in_float64(model) -> int:
    """Recompute every rotary module's inv_freq in float64; returns how many tables were rebuilt.

    transformers builds inv_freq in float32 outright (`dtype=torch.float`), so its
    own init function is rerun under `float32_as_float64`: the same code,
    widened, not a reimplementation. The forward must run under that mode too.
    Modules with one table per layer type (Gemma-3: `sliding_attention_inv_freq`)
    are rebuilt table by table. Length-dependent types (dynamic, longrope) keep
    their float64 table as the `original_inv_freq` they fall back to; see
    `needs_float64_default` for what they recompute during the forward.
    """
    changed = 0
    for module in model.modules():
        if not type(module).__name__.endswith("RotaryEmbedding"):
            continue
        if isinstance(getattr(module, "rope_type", None), dict):
            for layer_type, kind in module.rope_type.items():
                _rebuild(module, kind, f"{layer_type}_", layer_type=layer_type)
                changed += 1
        elif hasattr(module, "inv_freq"):
            _rebuild(module, module.rope_type, "")
            changed += 1
    return changed


_WIDENABLE = ("default", "linear", "llama3", "yarn", "longrope", "dynamic")


def _rebuild(module, kind: str, prefix: str, **layer) -> None:
    import torch
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if kind not in _WIDENABLE:
        raise TracerError(f"cannot widen rope type {kind!r} to float64", hint="pass widen_float32=False")
    init = module.compute_default_rope_parameters if kind == "default" else ROPE_INIT_FUNCTIONS[kind]
    with float32_as_float64():
        inv_freq, scaling = init(module.config, **layer)
    inv_freq = inv_freq.to(torch.float64)
    if prefix:
        setattr(module, f"{prefix}attention_scaling", scaling)
    else:
        module.attention_scaling = scaling
    setattr(module, f"{prefix}inv_freq", inv_freq)
    if hasattr(module, f"{prefix}original_inv_freq"):
        setattr(module, f"{prefix}original_inv_freq", inv_freq.clone())


def needs_float64_default(model) -> bool:
    """A dynamic rope recomputes inv_freq in the forward from `factor * seq_len`, which torch types by its
    default dtype: a float64 capture must make that float64 too."""
    return any(type(m).__name__.endswith("RotaryEmbedding") and "dynamic" in str(getattr(m, "rope_type", ""))
               for m in model.modules())


def float32_as_float64():
    """A torch function mode in which `x.float()`, `dtype=torch.float32` and `.to(torch.float32)` give float64."""
    return _float32_as_float64_class()()


@functools.cache
def _float32_as_float64_class():
    import torch
    from torch.overrides import TorchFunctionMode

    class Float32AsFloat64(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.float:
                return args[0].double()
            args = tuple(torch.float64 if a is torch.float32 else a for a in args)
            kwargs = {k: (torch.float64 if v is torch.float32 else v) for k, v in (kwargs or {}).items()}
            return func(*args, **kwargs)

    return Float32AsFloat64


@contextlib.contextmanager
def default_dtype(dtype):
    """torch's default dtype set for the duration (restored after)."""
    import torch

    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
