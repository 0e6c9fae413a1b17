"""Trace and Step: the in-memory record of one run, and its file form.

File form: one .safetensors file. Every kept tensor is stored under its step
name; `__metadata__["tracer"]` holds JSON with the format version, the model,
the prompts and tokens, and per step its axes, op, HF module and statistics
(also for steps whose tensor was not kept). A file written by anyone else
(for example `safetensors.torch.save_file` over a port's activations) loads
too: its steps are its tensors, in header order, with no metadata.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from tracer.checkpoint.jsonload import load_json
from tracer.steps import MASKED_OP
from tracer.errors import TracerError
from tracer.outputs import write_output
from tracer.trace.schema import check_meta
from tracer.trace.stats import tensor_stats

FORMAT = "tracer-trace"
FORMAT_VERSION = 1


@dataclass
class Step:
    name: str
    axes: tuple[str, ...]
    op: str
    hf_module: str | None
    shape: tuple[int, ...]
    dtype: str
    stats: dict[str, float]
    array: np.ndarray | None = None  # None when only statistics were kept (see _read_array for derived steps)
    seconds: float | None = None  # with a Recorder clock: engine time since the previous step (never saved)
    derived: str | None = None  # a DERIVED recipe: the tensor is recomputed from other kept steps when read
    source: Callable[[], np.ndarray] | None = field(default=None, repr=False, compare=False)

    @property
    def kept(self) -> bool:
        return self.__dict__.get("_stored") is not None or self.source is not None

    @property
    def stored(self) -> np.ndarray | None:
        """The array held in memory (None for a derived step, whose `array` is recomputed on each read)."""
        return self.__dict__.get("_stored")

    def __repr__(self) -> str:
        kept = "" if self.kept else ", statistics only"
        return f"Step({self.name!r}, {_shape_text(self.axes, self.shape)} {self.dtype}{kept})"

    def describe(self) -> dict:
        """JSON-ready description (no array)."""
        return {
            "name": self.name,
            "axes": list(self.axes),
            "shape": list(self.shape),
            "dtype": self.dtype,
            "op": self.op,
            "hf_module": self.hf_module,
            "kept": self.kept,
            "stats": self.stats,
            **({"derived": self.derived} if self.derived is not None and self.source is not None else {}),
        }


def _read_array(step: Step) -> np.ndarray | None:
    stored = step.__dict__.get("_stored")
    if stored is None and step.source is not None:
        return step.source()
    return stored


def _write_array(step: Step, value: np.ndarray | None) -> None:
    step.__dict__["_stored"] = value


Step.array = property(_read_array, _write_array)  # dataclass fields stay as they are; reads go through here


# Steps a trace need not hold because they are exact functions of other kept steps of the same prefix.
# recipe -> (the op text that identifies the step, the steps it reads, the function)
DERIVED: dict[str, tuple[str, tuple[str, ...], Callable[..., np.ndarray]]] = {
    "where(mask, scores, -inf)": (MASKED_OP, ("scores", "mask"),
                                  lambda scores, mask: np.where(mask, scores, -np.inf).astype(scores.dtype, copy=False)),
}


def derivation(step_name: str, op: str) -> tuple[str, tuple[str, ...]] | None:
    """(recipe, the full names of the steps it reads) when this step can be recomputed instead of held."""
    prefix, _, last = step_name.rpartition(".")
    if last != "masked_scores":
        return None
    for recipe, (recipe_op, inputs, _) in DERIVED.items():
        if op == recipe_op:
            return recipe, tuple(f"{prefix}.{n}" for n in inputs)
    return None


def derive_from(recipe: str, inputs: list[Step]) -> Callable[[], np.ndarray]:
    fn = DERIVED[recipe][2]
    return lambda: fn(*(s.array for s in inputs))


def _shape_text(axes, shape) -> str:
    return "[" + ", ".join(f"{a}={n}" for a, n in zip(axes, shape)) + "]"


def _size_text(n_bytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{n_bytes} B"


class StepNames(list):
    """The step names of a trace, in order: a list (`"logits" in trace.names`), and callable as the method it
    used to be (`trace.names()` gives the same list)."""

    def __call__(self) -> list[str]:
        return list(self)


@dataclass(repr=False)
class Trace:
    """Step name -> array, in the order the forward made them: `trace["logits"]`, `trace.step(name).stats`,
    `trace.names` (or `keys()`), `len(trace)`, `name in trace`; `meta` describes the run; `save`/`load`."""

    steps: list[Step]
    meta: dict = field(default_factory=dict)

    @property
    def names(self) -> StepNames:
        """Every step's name, in order (statistics-only steps too)."""
        return StepNames(s.name for s in self.steps)

    def keys(self) -> list[str]:
        """The step names, as a mapping's keys (`trace[name]` reads a kept step's array)."""
        return [s.name for s in self.steps]

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        """A few lines, never the arrays: model, input, steps with their shapes, dtype, size in memory."""
        meta = self.meta
        kept = [s for s in self.steps if s.kept]
        size = sum(s.stored.nbytes for s in kept if s.stored is not None)
        model = meta.get("model", {})
        head = f"Trace({len(self.steps)} steps, {len(kept)} kept whole, {_size_text(size)}"
        if model.get("name"):
            head += f", model {model['name']!r} ({model.get('family', '?')})"
        if meta.get("dtype"):
            head += f", {meta['dtype']}"
        prompts = meta.get("prompts") or []
        if prompts and prompts[0] is not None:
            first = prompts[0] if len(prompts[0]) <= 40 else prompts[0][:39] + "…"
            head += f", prompt {first!r}" + (f" and {len(prompts) - 1} more" if len(prompts) > 1 else "")
        lines = [head + ")"]
        shown = self.steps if len(self.steps) <= 8 else self.steps[:4] + [None] + self.steps[-3:]
        for s in shown:
            lines.append("  ..." if s is None else f"  {s.name} {_shape_text(s.axes, s.shape)} {s.dtype}"
                         + ("" if s.kept else " (statistics only)"))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """Jupyter's display hook: the HTML report of this trace, inline, in a frame sized for a notebook cell.

        A facade over tracer.report.html (imported here, lazily: the report sits above the trace)."""
        import html

        from tracer.report import html as report_page

        page = report_page(self)
        return (f'<iframe class="tracer-report" srcdoc="{html.escape(page, quote=True)}" '
                'style="width:100%;height:640px;border:1px solid #d6dbe1;border-radius:4px" '
                'sandbox="allow-scripts"></iframe>')

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    def __contains__(self, name: str) -> bool:
        return any(s.name == name for s in self.steps)

    def __getitem__(self, name: str) -> np.ndarray:
        s = self.step(name)
        if s.array is None:
            raise KeyError(f"{name} was recorded as statistics only (keep it whole with keep=[{name!r}], "
                           "or a glob that matches it)")
        return s.array

    # ---------- file form ----------

    def save(self, path: str | Path) -> Path:
        """Write atomically: on any failure no partial file is left behind."""
        path = Path(path)
        write_output(path, self.writer())
        return path

    def writer(self):
        """The file form as a writer for tracer.outputs (to stage it with other outputs)."""
        meta = dict(self.meta)
        meta["format"] = FORMAT
        meta["format_version"] = FORMAT_VERSION
        meta["steps"] = [s.describe() for s in self.steps]
        tensors = {s.name: s.stored for s in self.steps if s.stored is not None}  # derived steps: their recipe
        header_meta = {"tracer": json.dumps(meta, sort_keys=True, ensure_ascii=False, separators=(",", ":"))}
        return safetensors_writer(tensors, header_meta)

    @classmethod
    def load(cls, path: str | Path) -> "Trace":
        from tracer.checkpoint.safetensors_file import SafetensorsFile

        f = SafetensorsFile(path)
        raw = f.metadata.get("tracer")
        if raw is not None and not isinstance(raw, str):
            raise TracerError(f"{path}: trace metadata is not a JSON string")
        if raw is None:
            steps = []
            for name in f.keys():
                a = f.array(name)
                axes = tuple(f"dim{i}" for i in range(a.ndim))
                steps.append(Step(name, axes, "", None, tuple(a.shape), str(a.dtype), tensor_stats(a), a))
            return cls(steps, {"format": "foreign", "source": Path(path).name})
        meta = load_json(raw, f"{path}: trace metadata", constants=True)  # stats may hold NaN
        described = check_meta(path, meta, FORMAT_VERSION)
        meta.pop("steps")
        steps, by_name = [], {}
        for d in described:
            arr = f.array(d["name"]) if d["name"] in f else None
            if arr is not None and list(arr.shape) != d["shape"]:
                raise TracerError(f"{path}: step {d['name'][:60]!r} is described as {d['shape']} but its tensor is "
                                  f"{list(arr.shape)}")
            step = Step(d["name"], tuple(d["axes"]), d["op"], d.get("hf_module"), tuple(d["shape"]), d["dtype"], d["stats"], arr)
            if arr is None and d.get("derived") is not None:
                _restore_derived(step, d["derived"], by_name)
            steps.append(step)
            by_name[step.name] = step
        return cls(steps, meta)


def _restore_derived(step: Step, recipe: str, earlier: dict[str, Step]) -> None:
    """A derived step of a loaded trace reads its inputs again (when the file holds them)."""
    found = derivation(step.name, step.op)
    if found is None or found[0] != recipe or not all(n in earlier and earlier[n].kept for n in found[1]):
        return  # statistics only
    step.derived, step.source = recipe, derive_from(recipe, [earlier[n] for n in found[1]])


_ST_CODES = {
    np.dtype("float64"): "F64",
    np.dtype("float32"): "F32",
    np.dtype("float16"): "F16",
    np.dtype("int64"): "I64",
    np.dtype("int32"): "I32",
    np.dtype("int8"): "I8",
    np.dtype("uint8"): "U8",
    np.dtype("bool"): "BOOL",
}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """A deterministic safetensors writer: sorted names, 8-byte aligned header, no timestamps; atomic."""
    write_output(Path(path), safetensors_writer(tensors, metadata))


def safetensors_writer(tensors: dict[str, np.ndarray], metadata: dict[str, str]):
    """A function that writes the file to an open binary stream (checks dtypes before anything is written)."""
    header: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    order = sorted(tensors)
    for name in order:
        a = tensors[name]
        code = _ST_CODES.get(a.dtype)
        if code is None:
            raise TracerError(f"cannot save step {name!r}: dtype {a.dtype} has no safetensors code")
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    blob = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    blob += b" " * (-len(blob) % 8)

    def write(out) -> None:
        out.write(len(blob).to_bytes(8, "little"))
        out.write(blob)
        for name in order:
            out.write(np.ascontiguousarray(tensors[name]).astype(tensors[name].dtype.newbyteorder("<"), copy=False).tobytes())

    return write
