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

import numpy as np

from tracer.checkpoint.jsonload import load_json
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
    array: np.ndarray | None = None  # None when only statistics were kept
    seconds: float | None = None  # with a Recorder clock: engine time since the previous step (never saved)

    @property
    def kept(self) -> bool:
        return self.array is not None

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
        }


def _shape_text(axes, shape) -> str:
    return "[" + ", ".join(f"{a}={n}" for a, n in zip(axes, shape)) + "]"


def _size_text(n_bytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{n_bytes} B"


@dataclass(repr=False)
class Trace:
    steps: list[Step]
    meta: dict = field(default_factory=dict)

    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    def __repr__(self) -> str:
        """A few lines, never the arrays: model, input, steps with their shapes, dtype, size in memory."""
        meta = self.meta
        kept = [s for s in self.steps if s.kept]
        size = sum(s.array.nbytes for s in kept)
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
            raise KeyError(f"{name} was recorded as statistics only (widen --keep to keep it)")
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
        tensors = {s.name: s.array for s in self.steps if s.array is not None}
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
        steps = []
        for d in described:
            arr = f.array(d["name"]) if d["name"] in f else None
            if arr is not None and list(arr.shape) != d["shape"]:
                raise TracerError(f"{path}: step {d['name'][:60]!r} is described as {d['shape']} but its tensor is "
                                  f"{list(arr.shape)}")
            steps.append(
                Step(d["name"], tuple(d["axes"]), d["op"], d.get("hf_module"), tuple(d["shape"]), d["dtype"], d["stats"], arr)
            )
        return cls(steps, meta)


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
