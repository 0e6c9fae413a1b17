"""Opening a checkpoint: the one place that picks the reader, and the one config -> Spec.

    open_config(path)      -> CheckpointConfig (kind, config, its sha256): tracer cost, tracer capture's checks
    checkpoint_spec(cc)    -> Spec, pooling included: the only config -> Spec (load_model, cost, capture)
    open_checkpoint(path)  -> Checkpoint: the above, then the weight files and the tokenizer (load_model)

Readers by kind:
    "folder"   config.json + *.safetensors (one file or a sharded set) + tokenizer.json (optional)
    "config"   a config.json given directly (open_config only: counting needs no weights)
A `.gguf` file becomes one more kind here: its reader fills the same Checkpoint (a config dict, a
sha256 of what it was read from, an object with WeightFiles' interface, a tokenizer or None).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from tracer.arch.pooling import read_pooling
from tracer.arch.registry import adapter_for
from tracer.arch.spec import PoolingSpec, Spec
from tracer.checkpoint.config import read_config
from tracer.checkpoint.jsonload import load_json_file
from tracer.checkpoint.tokenizer import Tokenizer
from tracer.checkpoint.weights import WeightFiles
from tracer.errors import TracerError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


@dataclass(frozen=True)
class CheckpointConfig:
    """A checkpoint's config as its reader found it, before any weight is opened."""

    path: Path
    kind: str  # "folder" | "config" (next: "gguf")
    config: dict
    config_sha256: str  # of the bytes the config was read from (the trace's model identity)

    @property
    def name(self) -> str:
        """How traces and screens name the model: the folder's name."""
        return (self.path.parent.name or self.path.stem) if self.kind == "config" else self.path.name

    @property
    def folder(self) -> Path:
        """The folder the checkpoint's side files live in (generation_config.json, modules.json, ...)."""
        return self.path.parent if self.kind == "config" else self.path


@dataclass(frozen=True)
class Checkpoint(CheckpointConfig):
    """An opened checkpoint. `files` has WeightFiles' interface (names, `in`, shape, get, raw, storage_dtype,
    storage_dtypes, n_float_parameters, folder), whatever the reader."""

    spec: Spec | None = None
    files: WeightFiles | None = None
    tokenizer: Tokenizer | None = None


def open_config(path: str | Path) -> CheckpointConfig:
    """The reader for this path, and the config it reads: a checkpoint folder, or (for counting) a config.json."""
    path = Path(path)
    if path.is_file():
        if path.suffix in PICKLE_SUFFIXES:
            raise TracerError(f"{path}: a pickle checkpoint; tracer never unpickles files",
                              hint="convert it once in a trusted environment with save_pretrained(), which writes safetensors")
        if path.suffix == ".json":
            cfg = load_json_file(path, constants=True)
            if not isinstance(cfg, dict):
                raise TracerError(f"{path}: not a JSON object")
            return CheckpointConfig(path, "config", cfg, hashlib.sha256(path.read_bytes()).hexdigest())
        raise TracerError(f"{path}: expected a checkpoint folder (config.json, *.safetensors, tokenizer.json), got a file")
    if not path.is_dir():
        raise TracerError(f"{path}: no such checkpoint folder")
    cfg, sha = read_config(path)
    return CheckpointConfig(path, "folder", cfg, sha)


def checkpoint_spec(cc: CheckpointConfig) -> Spec:
    """The one config -> Spec: the family's adapter, then the sentence embedding a headless encoder declares
    (sentence-transformers' modules.json beside the config; mean pooling without one)."""
    spec = adapter_for(cc.config).spec_from_config(cc.config)
    if spec.head == "none":
        spec = replace(spec, pooling=read_pooling(cc.folder) if cc.kind in ("folder", "config") else PoolingSpec())
    return spec


def open_checkpoint(path: str | Path) -> Checkpoint:
    """A checkpoint to run: config, Spec, weight files, tokenizer (checked in that order)."""
    cc = open_config(path)
    if cc.kind != "folder":
        raise TracerError(f"{cc.path}: expected a checkpoint folder (config.json, *.safetensors, tokenizer.json), got a file")
    spec = checkpoint_spec(cc)
    files = WeightFiles(cc.path)
    tok_path = cc.path / "tokenizer.json"
    tokenizer = Tokenizer(tok_path) if tok_path.exists() or tok_path.is_symlink() else None  # special files refused
    return Checkpoint(cc.path, cc.kind, cc.config, cc.config_sha256, spec, files, tokenizer)
