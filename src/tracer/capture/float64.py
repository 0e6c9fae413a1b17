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

import functools

from tracer.errors import TracerError


def recompute_rotary_in_float64(model) -> int:
    """Recompute every rotary module's inv_freq in float64; returns how many there were.

    transformers builds inv_freq in float32 outright (`dtype=torch.float`), so its
    own init function is rerun under `float32_as_float64`: the same code,
    widened, not a reimplementation. The forward must run under that mode too.
    """
    import torch
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    changed = 0
    for module in model.modules():
        if not (type(module).__name__.endswith("RotaryEmbedding") and hasattr(module, "inv_freq")):
            continue
        if module.rope_type == "default":
            init = module.compute_default_rope_parameters
        elif module.rope_type in ("linear", "llama3"):  # static inv_freq; dynamic types rescale per call
            init = ROPE_INIT_FUNCTIONS[module.rope_type]
        else:
            raise TracerError(f"cannot widen rope type {module.rope_type!r} to float64", hint="pass widen_float32=False")
        with float32_as_float64():
            inv_freq, module.attention_scaling = init(module.config)
        module.inv_freq = inv_freq.to(torch.float64)
        changed += 1
    return changed


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
