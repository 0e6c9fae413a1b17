"""The weight files of a checkpoint folder (one safetensors file or a sharded set), and LazyWeights: the
canonical tensors made from them when a step reads one."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from tracer.checkpoint.jsonload import load_json
from tracer.checkpoint.safetensors_file import SafetensorsFile, check_regular_file, widen
from tracer.errors import TracerError

_MAX_INDEX = 64 * 1024 * 1024
_PICKLE_NAMES = ("pytorch_model.bin", "model.bin", "model.pt", "model.pth", "pytorch_model.bin.index.json")


class WeightFiles:
    """Name -> tensor over every safetensors file of a folder, memory-mapped."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.files = _open_files(folder)
        self._where: dict[str, SafetensorsFile] = {}
        for f in self.files:
            for name in f.keys():
                self._where[name] = f

    def names(self) -> list[str]:
        return list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def get(self, name: str) -> np.ndarray:
        """The tensor, floats widened to float32 (bf16 bit-exactly); a view of the file when stored as float32."""
        f = self._where.get(name)
        if f is None:
            raise TracerError(f"{self.folder}: weight {name!r} is missing from the safetensors files")
        return f.array(name)

    def raw(self, name: str) -> np.ndarray:
        """The stored tensor as a read-only view of the file, unwidened (bf16 as uint16 bits)."""
        f = self._where.get(name)
        if f is None:
            raise TracerError(f"{self.folder}: weight {name!r} is missing from the safetensors files")
        return f.raw(name)

    def shape(self, name: str) -> tuple[int, ...]:
        """The stored shape, from the header (no data read)."""
        f = self._where.get(name)
        if f is None:
            raise TracerError(f"{self.folder}: weight {name!r} is missing from the safetensors files")
        return tuple(f.entries[name].shape)

    def storage_dtype(self, name: str) -> str:
        return self._where[name].entries[name].dtype

    def n_float_parameters(self) -> int:
        """Parameters stored in floating point (buffers such as int64 position ids excluded)."""
        return sum(
            math.prod(f.entries[name].shape)
            for name, f in self._where.items()
            if f.entries[name].dtype in ("F64", "F32", "F16", "BF16")
        )

    def storage_dtypes(self) -> dict[str, int]:
        """How many tensors are stored in each dtype, e.g. {"BF16": 20}."""
        counts: dict[str, int] = {}
        for name, f in self._where.items():
            d = f.entries[name].dtype
            counts[d] = counts.get(d, 0) + 1
        return counts


def _open_files(folder: Path) -> list[SafetensorsFile]:
    index = folder / "model.safetensors.index.json"
    single = folder / "model.safetensors"
    if index.exists() or index.is_symlink():
        check_regular_file(index, "safetensors index")
        if index.stat().st_size > _MAX_INDEX:
            raise TracerError(f"{index}: {index.stat().st_size} bytes is too large for a safetensors index")
        data = load_json(index.read_bytes(), str(index))
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise TracerError(f"{index}: not a valid safetensors index (needs a weight_map object of tensor -> file name)")
        shards = sorted(set(weight_map.values()))
        for s in shards:
            check_shard_name(folder, s)
        missing = [s for s in shards if not (folder / s).is_file()]
        if missing:
            raise TracerError(f"{folder}: shard {missing[0]} named in model.safetensors.index.json is missing")
        files = [SafetensorsFile(folder / s) for s in shards]
        _check_index(index, weight_map, files)
        return files
    if single.exists() or single.is_symlink():
        return [SafetensorsFile(single)]
    others = sorted(folder.glob("model*.safetensors"))
    if others:
        return [SafetensorsFile(p) for p in others]
    pickles = [n for n in _PICKLE_NAMES if (folder / n).is_file()] + [p.name for p in folder.glob("*.pt")]
    if pickles:
        raise TracerError(
            f"{folder}: only a pickle checkpoint ({pickles[0]}); tracer never unpickles files",
            hint="convert it once in a trusted environment: "
            "AutoModelForCausalLM.from_pretrained(dir).save_pretrained(dir) writes model.safetensors",
        )
    if not folder.is_dir():
        raise TracerError(f"{folder}: no such checkpoint folder")
    raise TracerError(f"{folder}: no model.safetensors (nor a sharded set with model.safetensors.index.json)")


def check_shard_name(folder: Path, name: str) -> None:
    """A shard is a plain file name inside the checkpoint folder: no path separators, no .., no absolute path."""
    p = Path(name)
    if (not name or p.is_absolute() or len(p.parts) != 1 or name in (".", "..") or "\\" in name or "\0" in name
            or not name.endswith(".safetensors")):
        raise TracerError(f"{folder / 'model.safetensors.index.json'}: shard name {name[:80]!r} is not a .safetensors "
                          "file name inside the checkpoint folder", hint="tracer reads shards only from the folder itself")
    # a symlink inside the folder may point elsewhere (the Hugging Face cache links snapshots to blobs): allowed


def _check_index(index: Path, weight_map: dict, files: list[SafetensorsFile]) -> None:
    by_name = {f.path.name: f for f in files}
    for name, shard in weight_map.items():
        if name not in by_name[shard]:
            raise TracerError(f"{index}: says {name!r} is in {shard}, but that shard does not hold it")


class LazyWeights(Mapping):
    """The model's weights, made on each read from the memory-mapped files and dropped by the reader.

    float32 files in a float32 run are views of the map (no copy, as before). bfloat16/float16 files, or a
    float64 run, are widened when a step reads the tensor, so a forward pass holds the weights of the step
    it is computing, not a widened copy of the whole model: memory stays near the mapped file plus one
    block's widened weights plus activations."""

    def __init__(self, files: WeightFiles, resolved: dict[str, tuple[str, object]], dtype):
        self.files, self._resolved, self.dtype = files, resolved, np.dtype(dtype)

    def __getitem__(self, name: str) -> np.ndarray:
        hf_name, transform = self._resolved[name]
        arr = transform(self.files.get(hf_name))
        return arr if arr.dtype == self.dtype else arr.astype(self.dtype)

    def __iter__(self):
        return iter(self._resolved)

    def __len__(self) -> int:
        return len(self._resolved)

    def __contains__(self, name) -> bool:  # no tensor read (affine_op asks whether a bias exists)
        return name in self._resolved

    def rows(self, name: str, index: np.ndarray) -> np.ndarray:
        """W[name][index] without making the whole tensor: an embedding lookup widens only the rows it reads
        (a 32,000-row bf16 table is not widened whole for 512 tokens)."""
        hf_name, transform = self._resolved[name]
        raw = self.files.raw(hf_name)
        if transform(raw) is not raw:  # a transposed or sliced source: rows of the made tensor
            return self[name][index]
        picked = widen(raw[index], self.files.storage_dtype(hf_name))
        return picked if picked.dtype == self.dtype else picked.astype(self.dtype)

    def made_bytes(self) -> int:
        """Bytes of the tensors a read makes anew (widened or cast); float32 views of the map cost nothing."""
        total = 0
        for hf_name, _ in self._resolved.values():
            stored = self.files.storage_dtype(hf_name)
            if _ST_WIDTHS.get(stored) != self.dtype:
                total += math.prod(self.files.shape(hf_name)) * self.dtype.itemsize
        return total

    def held(self, budget: int) -> Mapping:
        """For many passes over the same weights (decoding a token at a time): a mapping that makes each
        tensor once and keeps it, when the tensors a read makes fit in `budget` bytes; else this one."""
        return _Held(self) if self.made_bytes() <= budget else self


_ST_WIDTHS = {"F32": np.dtype(np.float32), "F64": np.dtype(np.float64)}


class _Held(Mapping):
    """LazyWeights whose tensors are made on first read and then kept (see LazyWeights.held)."""

    def __init__(self, lazy: LazyWeights):
        self.lazy, self.dtype, self._made = lazy, lazy.dtype, {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._made:
            self._made[name] = self.lazy[name]
        return self._made[name]

    def rows(self, name: str, index: np.ndarray) -> np.ndarray:
        return self[name][index]

    def __iter__(self):
        return iter(self.lazy)

    def __len__(self) -> int:
        return len(self.lazy)

    def __contains__(self, name) -> bool:
        return name in self.lazy
