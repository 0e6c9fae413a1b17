"""Open a GGUF file as a Model: metadata -> config -> the family's Spec, tensors -> HF names -> canonical
weights, dequantized a tensor at a time when a step reads it; the tokenizer from the file's own metadata.

Entry points (for tracer.model.open.open_checkpoint): `load_gguf_model(path, dtype, allow_unused)` and, for
commands that need the shape only (`tracer cost`), `gguf_spec(path)`, which reads the metadata alone."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tracer.arch.canonical import expected_shapes
from tracer.arch.gguf_config import consumed_tensors, gguf_family, gguf_pieces, hf_config, metadata_snapshot
from tracer.arch.registry import adapter_for
from tracer.arch.spec import Spec
from tracer.checkpoint.gguf import GGUFFile, GGUFLazyWeights, GGUFWeightFiles
from tracer.errors import TracerError
from tracer.model.model import DTYPES, Model, load_weights
from tracer.trace import Trace

GGUF_SUFFIX = ".gguf"
# transformers config keys the family tables read -> the GGUF key they come from (for the error naming it)
GGUF_KEYS = {"num_hidden_layers": "block_count", "hidden_size": "embedding_length",
             "num_attention_heads": "attention.head_count", "intermediate_size": "feed_forward_length",
             "rope_parameters": "rope.freq_base"}


def is_gguf(path: str | Path) -> bool:
    """A GGUF by name, or by its first four bytes ('GGUF')."""
    p = Path(path)
    if p.suffix.lower() == GGUF_SUFFIX:
        return True
    try:
        if not p.is_file():  # never open a FIFO or a device to sniff it
            return False
        with p.open("rb") as fh:
            return fh.read(4) == b"GGUF"
    except OSError:
        return False


class GGUFModel(Model):
    """A Model read from a GGUF file: its trace meta also records the file's quantization (model.meta.ModelMeta)."""

    quantization: dict = {}
    tokenizer_note: str = ""  # why there is no tokenizer, when there is none

    def batch(self, text=None, ids=None, *args, **kwargs):
        if text is not None and self.tokenizer is None:
            raise TracerError(f"{self.folder}: {self.tokenizer_note}", hint="pass exact token ids with --ids")
        return super().batch(text, ids, *args, **kwargs)


def open_gguf(path: str | Path) -> tuple[GGUFFile, dict, str, object, Spec]:
    """The file, its config, that config's hash, the family adapter and the Spec."""
    f = GGUFFile(Path(path))
    try:
        family = gguf_family(f.arch)
    except TracerError as exc:
        raise TracerError(f"{f.path}: {exc.message}", hint=exc.hint) from None
    try:
        cfg = hf_config(f, family)
    except KeyError as exc:  # a family table needs a size the metadata lacks
        missing = GGUF_KEYS.get(exc.args[0], exc.args[0])
        raise TracerError(f"{f.path}: the GGUF metadata has no {f.arch}.{missing}",
                          hint="the file is incomplete or was not written by convert_hf_to_gguf.py") from None
    adapter = adapter_for(cfg)
    try:
        spec = adapter.spec_from_config(cfg)
    except TracerError as exc:
        raise TracerError(f"{f.path}: the GGUF metadata ({f.arch}) does not make a {family.model_type} model: "
                          f"{exc.message}", hint=exc.hint) from None
    sha = hashlib.sha256(json.dumps({"config": cfg, "metadata": metadata_snapshot(f.metadata)}, sort_keys=True,
                                    default=str).encode()).hexdigest()
    return f, cfg, sha, adapter, spec


def gguf_spec(path: str | Path) -> tuple[Spec, str]:
    """The Spec from the file's metadata and tensor headers (no tensor data read but the small rope tables)."""
    _, _, _, _, spec = open_gguf(path)
    return spec, Path(path).name


def load_gguf_model(path: str | Path, dtype: str = "float32", allow_unused: bool = False,
                    tokenizer_choice: str | None = None) -> GGUFModel:
    if dtype not in DTYPES:
        raise TracerError(f"dtype {dtype!r} is not supported", hint="use float32 or float64")
    f, cfg, sha, adapter, spec = open_gguf(path)
    sources = adapter.weight_sources(spec)
    shapes = expected_shapes(spec)
    hf_names = [n for name in shapes for n in (sources[name].hf_name, *sources[name].aliases)]
    files = GGUFWeightFiles(f, gguf_pieces(f, gguf_family(f.arch), cfg, hf_names))
    missing = [sources[n].hf_name for n in shapes if sources[n].hf_name not in files
               and not any(a in files for a in sources[n].aliases)]
    if missing:
        raise TracerError(f"{f.path}: the GGUF file ({f.arch}) has no tensor for {missing[0]!r}",
                          hint="the file may come from a converter tracer does not know, or be incomplete")
    used: set[str] = set()
    try:
        lazy = load_weights(files, sources, spec, DTYPES[dtype], used)
    except TracerError as exc:  # said in the terms of a folder: the GGUF's config is its metadata
        raise TracerError(f"{f.path}: " + exc.message.replace("config.json disagrees with the weights",
                                                             "the GGUF metadata disagrees with its tensors"),
                          hint=exc.hint) from None
    weights = GGUFLazyWeights(files, lazy._resolved, DTYPES[dtype])
    unused = sorted(set(f.tensors) - {files.pieces[n].gguf_name for n in used} - consumed_tensors(f))
    if unused and not allow_unused:
        raise TracerError(f"{f.path}: {len(unused)} tensors of the GGUF file are not read by the {spec.family} "
                          f"model tracer builds, e.g. {unused[0]}",
                          hint="--allow-unused runs anyway, ignoring them")
    tokenizer, note = gguf_tokenizer(f, tokenizer_choice)
    model = GGUFModel(f.path, cfg, sha, spec, weights, files, tokenizer, dtype)
    model.unused_weights = tuple(unused)
    model.quantization = f.quantization()
    model.tokenizer_note = note
    return model


TOKENIZER_CHOICES = ("gguf", "json")


def gguf_tokenizer(f: GGUFFile, choice: str | None = None):
    """(Tokenizer, "") or (None, why not). choice "gguf" (the default: what llama.cpp runs) reads the file's
    tokenizer.ggml.* metadata; "json" the tokenizer.json beside the file (what transformers runs)."""
    from tracer.checkpoint.tokenizer import Tokenizer

    if choice not in (None, *TOKENIZER_CHOICES):
        raise TracerError(f"--tokenizer {choice!r}: choose gguf (the file's own) or json (tokenizer.json beside it)")
    if choice == "json":
        beside = f.path.parent / "tokenizer.json"
        if not beside.is_file():
            raise TracerError(f"--tokenizer json: no tokenizer.json beside {f.path}",
                              hint="copy the model's tokenizer.json next to the GGUF file, or use its own (--tokenizer gguf)")
        return Tokenizer(beside), ""
    if "tokenizer.ggml.model" not in f.metadata or "tokenizer.ggml.tokens" not in f.metadata:
        return None, "the GGUF file holds no tokenizer (no tokenizer.ggml.model / tokenizer.ggml.tokens metadata)"
    from tracer.checkpoint.gguf_tokenizer import tokenizer_spec_from_gguf

    return Tokenizer.from_spec(tokenizer_spec_from_gguf(f.metadata), str(f.path)), ""
