"""A GGUF file (ggml's single-file checkpoint), read with the `gguf` package: metadata, tensors memory-mapped,
each dequantized to float32 when a step reads it. Never unpickles anything.

ggml lists a tensor's sizes fastest axis first (`ne`); NumPy's shape is that list reversed, so a GGUF
`attn_q.weight` with ne = (n_embd, n_out) is the [n_out, n_embd] matrix transformers stores. The reader
here speaks NumPy order only.

GGUFWeightFiles puts an HF-named face on the file (names, get, raw, shape, storage_dtype, ...: the
WeightFiles interface), given where each HF tensor lives in the file and how to undo what the converter did
to it (a `Piece`, built by the family's GGUF table in tracer.arch)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from tracer.checkpoint.gguf_dequant import dequantize
from tracer.checkpoint.weights import LazyWeights
from tracer.errors import TracerError

EXTRA_HINT = "install the optional extra from this checkout: pip install -e '.[gguf]'"
_FLOAT_TYPES = ("F32", "F16", "BF16", "F64")


def gguf_module():
    """The `gguf` package, or one clear error naming the extra."""
    try:
        import gguf
    except ImportError:
        raise TracerError("reading a GGUF file needs the `gguf` package (the tracer[gguf] extra)",
                          hint=EXTRA_HINT) from None
    return gguf


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor's header: name, ggml type name, NumPy shape, where its bytes are."""

    name: str
    qtype: str  # "F32", "Q4_K", ...
    shape: tuple[int, ...]  # NumPy order (ggml's ne reversed)
    n_bytes: int
    offset: int


class GGUFFile:
    """The file's metadata (decoded on read) and tensors (memory-mapped, raw bytes for quantized types)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise TracerError(f"{self.path}: no such GGUF file")
        self._gguf = gguf_module()
        self._reader = _open_reader(self.path, self._gguf)
        self._raw = {t.name: t for t in self._reader.tensors}
        self.tensors = {t.name: GGUFTensor(t.name, t.tensor_type.name, tuple(int(n) for n in reversed(t.shape.tolist())),
                                           int(t.n_bytes), int(t.data_offset)) for t in self._reader.tensors}
        _check_layout(self.path, list(self.tensors.values()), self.path.stat().st_size, int(self._reader.data_offset))
        self.metadata = GGUFMetadata(self._reader.fields)
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str) or not arch:
            raise TracerError(f"{self.path}: the GGUF metadata has no general.architecture")
        self.arch = arch

    def raw(self, name: str) -> np.ndarray:
        """The stored tensor, a read-only view of the map: typed for F32/F16, bytes [..., row_bytes] otherwise."""
        return self._raw[name].data

    def dequantized(self, name: str, index: int | None = None) -> np.ndarray:
        """float32 in NumPy shape; `index` picks one slice of the leading axis first (one stacked expert),
        so only that slice is dequantized."""
        t = self._raw[name]
        data = t.data if index is None else t.data[index]
        if t.tensor_type.name in ("F32", "F64"):
            return data  # F64: the compute dtype decides (LazyWeights casts)
        try:
            return dequantize(data, t.tensor_type, self._gguf)
        except NotImplementedError:
            raise TracerError(f"{self.path}: tensor {name} is stored as {t.tensor_type.name}, which the gguf package "
                              "cannot dequantize", hint="requantize the file to a type gguf.quants reads (Q8_0, Q4_K, ...)") from None

    def rows(self, name: str, index: np.ndarray) -> np.ndarray:
        """Rows of a 2-D tensor, float32, dequantizing only the rows read (an embedding lookup)."""
        t = self._raw[name]
        picked = t.data[index]
        if t.tensor_type.name in ("F32", "F64"):
            return picked
        return dequantize(picked, t.tensor_type, self._gguf)

    def quantization(self) -> dict:
        """Per ggml type: tensors, parameters and bytes; bits per weight over the whole file."""
        types: dict[str, dict] = {}
        for t in self.tensors.values():
            row = types.setdefault(t.qtype, {"tensors": 0, "params": 0, "bytes": 0})
            row["tensors"] += 1
            row["params"] += math.prod(t.shape)
            row["bytes"] += t.n_bytes
        params = sum(r["params"] for r in types.values())
        bits = 8 * sum(r["bytes"] for r in types.values()) / params if params else 0.0
        for r in types.values():
            r["bits_per_weight"] = round(8 * r["bytes"] / r["params"], 4) if r["params"] else 0.0
        ftype = self.metadata.get("general.file_type")
        out = {"format": "gguf", "types": dict(sorted(types.items(), key=lambda kv: -kv[1]["params"])),
               "bits_per_weight": round(bits, 4)}
        name = _file_type_name(self._gguf, ftype)
        if name:
            out["file_type"] = name
        return out


class GGUFMetadata(Mapping):
    """Key -> decoded value (str, int, float, bool, list), decoded when read (a 150k-token list only if asked)."""

    def __init__(self, fields: Mapping):
        self._fields = fields
        self._cache: dict[str, object] = {}

    def __getitem__(self, key: str):
        if key not in self._cache:
            self._cache[key] = self._fields[key].contents()
        return self._cache[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


def _open_reader(path: Path, gguf):
    try:
        return gguf.GGUFReader(path)
    except (ValueError, IndexError, KeyError, OverflowError, TypeError, UnicodeDecodeError) as exc:
        raise TracerError(f"{path}: {_reader_problem(str(exc), path)}") from None


def _reader_problem(msg: str, path: Path) -> str:
    """The gguf reader's exception, in the file's terms."""
    if "magic" in msg:
        return "not a GGUF file (bad magic: the file does not start with 'GGUF')"
    version = re.search(r"version (\d+)", msg)
    if version:
        return f"GGUF version {version.group(1)} is not one the gguf package reads (versions 2 and 3)"
    unknown = re.search(r"(\d+)\)? is not a valid GGMLQuantizationType", msg)
    if unknown:
        return f"a tensor has ggml type {unknown.group(1)}, which is not a known quantization type"
    row = re.search(r"row size \((\d+)\) is not a multiple of (\w+) block size \((\d+)\)", msg)
    if row:
        return (f"a tensor's rows of {row.group(1)} values are not a multiple of {row.group(2)}'s block of "
                f"{row.group(3)}: its byte size disagrees with its type and shape")
    if "reshape" in msg or "out of bounds" in msg or "index" in msg.lower():
        return f"truncated or corrupt GGUF ({path.stat().st_size:,} bytes): the headers or tensor data run past the end"
    return f"not a readable GGUF file ({msg.splitlines()[0][:120] if msg else 'corrupt header'})"


def _check_layout(path: Path, tensors: list[GGUFTensor], size: int, data_start: int) -> None:
    """Each tensor's bytes (from its type and shape) fit before the next tensor and inside the file."""
    ordered = sorted(tensors, key=lambda t: t.offset)
    for t, nxt in zip(ordered, ordered[1:] + [None]):
        end = nxt.offset if nxt is not None else size
        if t.offset < data_start or t.offset + t.n_bytes > end:
            room = max(end - t.offset, 0)
            what = ("the file ends" if nxt is None else f"{nxt.name} starts")
            raise TracerError(f"{path}: tensor {t.name} ({t.qtype} {list(t.shape)}) needs {t.n_bytes:,} bytes, but "
                              f"{what} {room:,} bytes after its start: its byte size disagrees with its type and "
                              "shape, or the file is truncated")


def _file_type_name(gguf, ftype) -> str | None:
    if not isinstance(ftype, int):
        return None
    try:
        return gguf.LlamaFileType(ftype).name.removeprefix("MOSTLY_")
    except ValueError:
        return None


@dataclass(frozen=True)
class Piece:
    """Where an HF tensor lives in a GGUF file and how to undo the converter's change (on float32 NumPy)."""

    gguf_name: str
    index: int | None = None  # one slice of a stacked tensor (ffn_gate_exps[e])
    undo: Callable[[np.ndarray], np.ndarray] | None = None
    shape: tuple[int, ...] | None = None  # the HF shape, when undo changes it (a transpose)


@dataclass
class GGUFWeightFiles:
    """HF name -> tensor over a GGUF file (the WeightFiles interface LazyWeights reads)."""

    gguf: GGUFFile
    pieces: dict[str, Piece]
    folder: Path = field(init=False)

    def __post_init__(self):
        self.folder = self.gguf.path

    def names(self) -> list[str]:
        return list(self.pieces)

    def __contains__(self, name: str) -> bool:
        return name in self.pieces

    def _piece(self, name: str) -> Piece:
        p = self.pieces.get(name)
        if p is None:
            raise TracerError(f"{self.folder}: the GGUF file has no tensor for {name!r}")
        return p

    def get(self, name: str) -> np.ndarray:
        """float32, dequantized and un-converted (a fresh array unless a float32 tensor needs no undo)."""
        p = self._piece(name)
        arr = self.gguf.dequantized(p.gguf_name, p.index)
        return p.undo(arr) if p.undo is not None else arr

    def raw(self, name: str) -> np.ndarray:
        return self.get(name)

    def rows(self, name: str, index: np.ndarray) -> np.ndarray | None:
        """Rows of a tensor stored as is (no undo, no slice): dequantize just those; None when not possible."""
        p = self._piece(name)
        if p.undo is not None or p.index is not None or len(self.gguf.tensors[p.gguf_name].shape) != 2:
            return None
        return self.gguf.rows(p.gguf_name, index)

    def shape(self, name: str) -> tuple[int, ...]:
        p = self._piece(name)
        if p.shape is not None:
            return p.shape
        stored = self.gguf.tensors[p.gguf_name].shape
        return stored[1:] if p.index is not None else stored

    def storage_dtype(self, name: str) -> str:
        return self.gguf.tensors[self._piece(name).gguf_name].qtype

    def n_float_parameters(self) -> int:
        return sum(math.prod(self.shape(n)) for n in self.pieces)

    def storage_dtypes(self) -> dict[str, int]:
        """Tensors of the file per ggml type (a stacked expert tensor counts once, as in the file)."""
        counts: dict[str, int] = {}
        for t in {p.gguf_name for p in self.pieces.values()}:
            q = self.gguf.tensors[t].qtype
            counts[q] = counts.get(q, 0) + 1
        return counts


class GGUFLazyWeights(LazyWeights):
    """LazyWeights over GGUFWeightFiles: an embedding lookup dequantizes only the rows it reads."""

    def rows(self, name: str, index: np.ndarray) -> np.ndarray:
        hf_name, transform = self._resolved[name]
        probe = np.empty((1, 1), np.float32)
        picked = self.files.rows(hf_name, index) if transform(probe) is probe else None
        if picked is None:
            return self[name][index]
        return picked if picked.dtype == self.dtype else picked.astype(self.dtype)
