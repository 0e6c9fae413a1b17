"""Small pieces the conventions share: framework error text, option refusal, generated causal/window parts."""

from __future__ import annotations

import numpy as np

from tracer.errors import TracerError
from tracer.masks.canon import Builder
from tracer.masks.generated import causal_keep, window_keep, window_lr_keep
from tracer.masks.literal import MaskSource
from tracer.masks.warnings import warn_window

# Options whose default is "off": a convention that has no use for one refuses it rather than ignoring it.
OPTIONAL_FLAGS = {
    "is_causal": "--is-causal",
    "window": "--window",
    "window_lr": "--window-lr",
    "positions": "--positions",
    "kpm": "--kpm",
    "q_lengths": "--q-lengths",
    "bidirectional": "--bidirectional",
    "ggml_ne_order": "--ggml-ne-order",
    "keras2": "--keras2",
    "alibi": "--alibi",
    "fill": "--fill",
    "past": "--past",
    "causal_align": "--causal-align",
    "heads": "--heads",
}

TORCH_DTYPE_NAMES = {
    "bool": "bool", "float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
    "int64": "long int", "int32": "int", "uint8": "unsigned char", "int8": "signed char", "int16": "short int",
}


def refuse_unused(b: Builder, allowed: set[str], why: str = "") -> None:
    """Raise for an option this convention has no meaning for (never ignore what the user asked for)."""
    for name, flag in OPTIONAL_FLAGS.items():
        value = getattr(b.opts, name)
        if name in allowed or value in (None, False):
            continue
        raise TracerError(f"{flag} has no meaning for --convention {b.convention}{': ' + why if why else ''}",
                          hint="tracer mask --list shows what each convention takes")


def framework_error(api: str, exc: str, text: str, why: str, hint: str | None = None) -> TracerError:
    """One line: what the framework would raise, and why it does."""
    return TracerError(f"{api} rejects this mask: {exc}: {text} (why: {why})", hint)


def dtype_of(a: np.ndarray) -> str:
    return "bfloat16" if "bfloat16" in str(a.dtype) else str(a.dtype)


def is_float(a: np.ndarray) -> bool:
    return dtype_of(a) in ("float16", "bfloat16", "float32", "float64")


def is_bool(a: np.ndarray) -> bool:
    return a.dtype == bool


def float_pref(opts) -> tuple[str, ...]:
    """Dtype preference for an unsuffixed literal under an additive convention: the score dtype."""
    return (opts.score_dtype,)


def refuse_mask(b: Builder, src: MaskSource, why: str) -> None:
    if not src.is_none:
        raise TracerError(f"--convention {b.convention} takes no mask tensor: {why}", hint="use --mask none")


def as_f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def apply_causal(b: Builder, default_align: str, how: str | float = "-inf", label: str | None = None) -> int:
    """AND a causal part at the convention's corner (or --causal-align); returns the offset used."""
    B, H, Q, K = b.shape
    offset, align = b.causal_offset_for(default_align, Q, K)
    b.causal_offset = offset
    b.block(causal_keep(Q, K, offset), how)
    b.step(label or f"∧ causal({align}, keep k <= q + {offset})", (Q, K), b.shape, ("Q", "K"))
    return offset


def apply_window(b: Builder, offset: int, how: str | float = "-inf", label: str = "", lr_allowed: bool = True) -> None:
    """AND --window W (keys incl. self) or --window-lr L,R at the given offset; ML011 names the equivalents."""
    B, H, Q, K = b.shape
    if b.opts.window is not None:
        w = b.opts.window
        b.block(window_keep(Q, K, w, offset), how)
        b.step(f"∧ window(W={w}, keep k > q + {offset} - {w}){label}", (Q, K), b.shape, ("Q", "K"))
        warn_window(b, w)
    elif b.opts.window_lr is not None:
        if not lr_allowed:
            raise TracerError(f"--convention {b.convention} takes a window as --window W (keys incl. self), not --window-lr")
        left, right = b.opts.window_lr
        b.block(window_lr_keep(Q, K, left, right, offset), how)
        b.step(f"∧ window(left={left}, right={right}, offset {offset}){label}", (Q, K), b.shape, ("Q", "K"))
        warn_window(b, None, left, right)
