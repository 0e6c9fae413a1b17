"""The port-side recorder: a hand-written port (NumPy, JAX, MLX, CuPy, torch) dumps its steps under tracer's names.

    rec = tracer.dump.Recorder("port.safetensors", model="./hf-folder")   # model: optional, for sizes
    rec("input.ids", ids)                      # [batch, pos]
    rec("blocks.0.attn.q", q)                  # [batch, heads, pos, d_head], as tracer lays it out
    rec("blocks.0.attn.k", k, layout="bshd")   # the port's own [batch, pos, heads, d_head]: transposed here
    rec.close()                                # writes the file; `with Recorder(...) as rec:` closes too

Every call is checked at once against the step contract (tracer.steps): the name must be one of its
templates, the array must have the step's named axes, sizes must agree with the model's config (when
`model` is given) and with the earlier calls (one `pos`, one `batch`). A misnamed or transposed step is
a TracerError at the call, with the expected axes and, when a permutation of the array fits, the layout
to declare. The file is the format `tracer run --save` writes, so `tracer diff ref.safetensors
port.safetensors` reads it directly, and `tracer steps --check port.safetensors` reviews it.

Anything `np.asarray` accepts is taken (torch tensors need `.detach().cpu()` first when they require
grad); bfloat16 arrays are widened to float32 (exactly) and the step's dtype is noted as bfloat16.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracer import __version__
from tracer.errors import TracerError
from tracer.steps import StepDoc, block_of, decode_step, describe, stack_of
from tracer.trace import Step, Trace, tensor_stats

# The head axes a `layout` string names: b = batch, h = heads (or kv_heads), s = positions, d = d_head.
TRACER_LAYOUT = "bhsd"
_SEQ_AXES = ("pos", "q_len", "kv_len", "enc_pos", "dec_pos")
_STORABLE = {np.dtype(t) for t in ("float64", "float32", "float16", "int64", "int32", "int8", "uint8", "bool")}


@dataclass(frozen=True)
class Sizes:
    """The model's fixed axis sizes (from its config) and its depth; empty when no model is given."""
    axes: dict[str, int] = field(default_factory=dict)
    n_layers: int | None = None
    family: str | None = None
    name: str | None = None
    config_sha256: str | None = None

    @classmethod
    def of_model(cls, model: str | Path | None) -> "Sizes":
        if model is None:
            return cls()
        from tracer.arch.registry import adapter_for
        from tracer.checkpoint.config import read_config

        folder = Path(model)
        if not (folder / "config.json").is_file():
            raise TracerError(f"{folder}: no config.json (the dump recorder reads the model's sizes from it)")
        cfg, sha = read_config(folder)
        spec = adapter_for(cfg).spec_from_config(cfg)
        axes = {"d_model": spec.d_model, "heads": spec.n_heads, "kv_heads": spec.n_kv_heads, "d_head": spec.d_head,
                "d_ff": spec.d_ff, "vocab": spec.vocab_size}
        if spec.d_embed:
            axes["d_embed"] = spec.d_embed
        if spec.moe is not None:
            axes |= {"experts": spec.moe.n_experts, "top_k": spec.moe.top_k}
        return cls(axes, spec.n_layers, spec.family, folder.name, sha)


def layout_permutation(layout: str) -> tuple[int, ...]:
    """The transpose that takes an array laid out as `layout` (a permutation of "bhsd") to tracer's b, h, s, d."""
    if sorted(layout) != sorted(TRACER_LAYOUT):
        raise TracerError(f"layout {layout!r} is not a permutation of {TRACER_LAYOUT!r}",
                          hint="b = batch, h = heads, s = positions, d = d_head; e.g. 'bshd' for [batch, pos, heads, d_head]")
    return tuple(layout.index(c) for c in TRACER_LAYOUT)


def is_head_step(doc: StepDoc) -> bool:
    """Steps laid out [batch, heads or kv_heads, positions, d_head]: the ones a `layout` applies to."""
    return (len(doc.axes) == 4 and doc.axes[0] == "batch" and doc.axes[1] in ("heads", "kv_heads")
            and doc.axes[2] in _SEQ_AXES and doc.axes[3] == "d_head")


def as_numpy(value) -> np.ndarray:
    """Any array-like as a NumPy array; ml_dtypes' bfloat16 (JAX, MLX) widened to float32 exactly."""
    arr = np.asarray(value)
    if arr.dtype.name == "bfloat16":
        arr = arr.astype(np.float32)
    return arr


class StepChecker:
    """Checks steps one at a time against the contract, the model's sizes and the steps checked before."""

    def __init__(self, sizes: Sizes):
        self.sizes = sizes
        self.bound: dict[tuple[str, str], int] = {}  # (stack, axis) -> size, from the first step that shows it
        self.seen: set[str] = set()

    def doc(self, name: str) -> StepDoc:
        doc = describe(name)
        if doc is None:
            raise TracerError(f"{name!r} is not a tracer step name", hint=_closest_hint(name))
        i = block_of(name)
        if i is not None and self.sizes.n_layers is not None and i >= self.sizes.n_layers:
            raise TracerError(f"{name!r}: block {i} does not exist; the model has {self.sizes.n_layers} blocks "
                              f"(0-{self.sizes.n_layers - 1})")
        if name in self.seen:
            raise TracerError(f"step {name!r} was recorded twice")
        return doc

    def dtype(self, name: str, dtype: np.dtype) -> None:
        _, bare = decode_step(name)
        if bare.endswith("attn.mask"):
            if dtype != np.bool_:
                raise TracerError(f"{name!r} is a boolean keep-mask (True = attend), got {dtype}",
                                  hint="an additive mask (0 / -inf) becomes a keep-mask with `mask == 0`")
            return
        wants_int = bare.startswith("input.") or bare.endswith("mlp.router.experts")
        if wants_int and not np.issubdtype(dtype, np.integer):
            raise TracerError(f"{name!r} holds integers (int64), got {dtype}")
        if not wants_int and not np.issubdtype(dtype, np.floating):
            raise TracerError(f"{name!r} holds floating-point values, got {dtype}")

    def shape(self, name: str, doc: StepDoc, shape: tuple[int, ...]) -> None:
        expected = [self.sizes.axes.get(axis, self.bound.get(_key(name, axis))) for axis in doc.axes]
        broadcasts = name.endswith("attn.mask")  # a keep-mask may leave any axis at size 1
        if len(shape) != len(doc.axes) or any(e is not None and e != n and not (broadcasts and n == 1)
                                              for e, n in zip(expected, shape)):
            raise TracerError(f"{name!r} has shape {tuple(shape)}, but its axes are {_axes_text(doc.axes, expected)}",
                              hint=_layout_hint(doc, expected, shape))
        for axis, n in zip(doc.axes, shape):
            if axis not in self.sizes.axes and not (broadcasts and n == 1):
                self.bound.setdefault(_key(name, axis), n)

    def check(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> StepDoc:
        doc = self.doc(name)
        self.dtype(name, dtype)
        self.shape(name, doc, shape)
        self.seen.add(name)
        return doc


def _key(name: str, axis: str) -> tuple[str, str]:
    """Which earlier size an axis must agree with: self-attention's q_len and kv_len are the stack's
    positions; cross-attention's kv_len is the encoder's; a decoding step's lengths are its own."""
    t, bare = decode_step(name)
    stack = stack_of(name)
    if t is not None and axis in _SEQ_AXES:
        return (f"decode.{t}.{stack}", "pos" if axis == "q_len" else axis)
    if axis in ("q_len", "pos", "dec_pos"):
        return (stack, "pos")
    if axis == "kv_len":
        return ("encoder", "pos") if ".cross_attn." in bare else (stack, "pos")
    if axis == "enc_pos":
        return ("encoder", "pos")
    return ("", axis)


class Recorder:
    """Collects a port's steps, checks each as it arrives, writes one trace file on close()."""

    def __init__(self, path: str | Path, model: str | Path | None = None, layout: str = TRACER_LAYOUT):
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise TracerError(f"{self.path.parent}: no such folder for the dump")
        layout_permutation(layout)
        self.layout = layout
        self.checker = StepChecker(Sizes.of_model(model))
        self.steps: list[Step] = []
        self.closed = False

    def __enter__(self) -> "Recorder":
        return self

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            self.close()  # after an exception in the port no file is written

    def __call__(self, name: str, value, layout: str | None = None) -> np.ndarray:
        """Check and keep one step; returns the array as stored (in tracer's layout)."""
        if self.closed:
            raise TracerError(f"the dump {self.path} is closed; record steps before close()")
        given = np.asarray(value)
        arr = as_numpy(given)
        doc = describe(name)
        if doc is not None and is_head_step(doc) and arr.ndim == 4:
            perm = layout_permutation(layout or self.layout)
            arr = np.ascontiguousarray(arr.transpose(perm)) if perm != (0, 1, 2, 3) else arr
        elif layout is not None and layout != TRACER_LAYOUT and doc is not None:
            raise TracerError(f"{name!r} has axes [{', '.join(doc.axes)}]: a head layout does not apply to it")
        doc = self.checker.check(name, arr.dtype, tuple(arr.shape))
        if arr.dtype not in _STORABLE:
            raise TracerError(f"{name!r}: dtype {arr.dtype} cannot be stored", hint="cast it to float32")
        op = "dump" if given.dtype == arr.dtype else f"dump ({given.dtype} widened to {arr.dtype})"
        self.steps.append(Step(name, doc.axes, op, None, tuple(arr.shape), str(arr.dtype), tensor_stats(arr), arr))
        return arr

    def close(self) -> Path:
        """Write the trace file (atomically: an error leaves no partial file) and return its path."""
        if self.closed:
            return self.path
        if not self.steps:
            raise TracerError(f"nothing was recorded for {self.path}")
        Trace(self.steps, self.meta()).save(self.path)
        self.closed = True
        return self.path

    def meta(self) -> dict:
        s = self.checker.sizes
        model = {k: v for k, v in (("name", s.name), ("family", s.family), ("config_sha256", s.config_sha256))
                 if v is not None}
        floats = [st.dtype for st in self.steps if st.dtype.startswith("float")]
        return {"tracer_version": __version__, "source": "dump", "model": model,
                "dtype": max(sorted(set(floats)), key=floats.count) if floats else None,
                "prompts": [], "tokens": [], "keep": ["*"], "reduced_to_stats": []}


def _axes_text(axes: tuple[str, ...], sizes: list[int | None]) -> str:
    return "[" + ", ".join(a if n is None else f"{a}={n}" for a, n in zip(axes, sizes)) + "]"


def _layout_hint(doc: StepDoc, expected: list[int | None], shape: tuple[int, ...]) -> str:
    """For a head step whose array is a permutation of the expected shape: the layout to declare."""
    if is_head_step(doc) and len(shape) == 4:
        from itertools import permutations

        for layout in ("".join(p) for p in permutations(TRACER_LAYOUT)):
            moved = [shape[p] for p in layout_permutation(layout)]
            if layout != TRACER_LAYOUT and all(e is None or e == n for e, n in zip(expected, moved)):
                return f"if the port lays it out as {layout!r}, pass layout={layout!r}"
    return "record the array in tracer's layout (tracer steps lists every step with its axes)"


def _closest_hint(name: str) -> str:
    import difflib

    from tracer.steps import CATALOGUE

    templates = [d.template for d in CATALOGUE]
    i = block_of(name)
    generic = name.replace(f"blocks.{i}.", "blocks.{i}.") if i is not None else name
    close = difflib.get_close_matches(generic.split("encoder.", 1)[-1].split("decoder.", 1)[-1], templates, n=1)
    return (f"did you mean {close[0].replace('{i}', str(i) if i is not None else '{i}')!r}? " if close else "") + \
        "`tracer steps` lists the names"


def check_file(trace: Trace, model: str | Path | None = None) -> "FileCheck":
    """What `tracer steps --check FILE` reports before any diff: steps that are not tracer names, misshaped
    (against the model's sizes or the file's other steps) or of an unexpected dtype, and, with a model,
    the steps the model records that the file lacks."""
    checker = StepChecker(Sizes.of_model(model))
    unknown, misshaped, wrong_dtype, named = [], [], [], []
    for s in trace.steps:
        doc = describe(s.name)
        if doc is None:
            unknown.append(s.name)
            continue
        named.append(s.name)
        try:
            checker.dtype(s.name, _dtype_of(s.dtype))
        except TracerError as e:
            wrong_dtype.append((s.name, e.message))
        try:
            checker.shape(s.name, doc, s.shape)
        except TracerError as e:
            misshaped.append((s.name, e.message + (f" ({e.hint})" if e.hint else "")))
    missing = [n for n in expected_steps(model) if n not in set(named)] if model is not None else []
    return FileCheck(len(trace.steps), tuple(named), tuple(unknown), tuple(misshaped), tuple(wrong_dtype),
                     tuple(missing))


@dataclass(frozen=True)
class FileCheck:
    n_steps: int
    named: tuple[str, ...]
    unknown: tuple[str, ...]  # not tracer step names
    misshaped: tuple[tuple[str, str], ...]  # (name, why)
    wrong_dtype: tuple[tuple[str, str], ...]
    missing: tuple[str, ...]  # recorded by the model, absent from the file (needs the model)

    @property
    def ok(self) -> bool:
        return not (self.unknown or self.misshaped or self.wrong_dtype)

    def to_dict(self) -> dict:
        return {"steps": self.n_steps, "named": len(self.named), "unknown": list(self.unknown),
                "misshaped": [{"name": n, "why": w} for n, w in self.misshaped],
                "wrong_dtype": [{"name": n, "why": w} for n, w in self.wrong_dtype],
                "missing": list(self.missing), "ok": self.ok}


def expected_steps(model: str | Path) -> list[str]:
    """The step names a prefill of this model records, in the engine's order (tracer.arch.steps_of)."""
    from tracer.arch.registry import adapter_for
    from tracer.arch.steps_of import pass_steps
    from tracer.checkpoint.config import read_config

    cfg, _ = read_config(Path(model))
    return [s.name for s in pass_steps(adapter_for(cfg).spec_from_config(cfg))]


def _dtype_of(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(np.float32) if "float" in name else np.dtype(object)
