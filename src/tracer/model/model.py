"""A loaded checkpoint: Spec, canonical weights in the compute dtype, tokenizer; `run` gives a Trace."""

from __future__ import annotations

import math
import re

from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np

from tracer import __version__
from tracer.arch.canonical import Source, expected_shapes, superseded
from tracer.names.hf import hf_module
from tracer.arch.registry import adapter_for
from tracer.arch.spec import Spec
from tracer.model.inputs import Batch, pad_rows, rows_from_ids, rows_from_text, with_token_types
from tracer.checkpoint.agreement import check_sizes, check_unused
from tracer.checkpoint.config import read_config
from tracer.arch.pooling import read_pooling
from tracer.checkpoint.tokenizer import Tokenizer
from tracer.checkpoint.weights import LazyWeights, WeightFiles
from tracer.engine.forward import ForwardInputs, MaskOverride, forward, layer_masks
from tracer.errors import TracerError
from tracer.model.keep import auto_keep
from tracer.model.inputs import PositionLimit, check_positions, input_words, stack_limit
from tracer.trace import Recorder, Trace

DTYPES = {"float32": np.float32, "float64": np.float64}
POSITION_RULES = ("auto", "mask", "index")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


class Model:
    unused_weights: tuple[str, ...] = ()  # float tensors no step reads (only with allow_unused)

    def __init__(self, folder: Path, cfg: dict, config_sha256: str, spec: Spec, weights: dict, files: WeightFiles,
                 tokenizer: Tokenizer | None, dtype: str):
        self.folder, self.config, self.config_sha256 = folder, cfg, config_sha256
        self.spec, self.weights, self.files, self.tokenizer, self.dtype = spec, weights, files, tokenizer, dtype

    @property
    def family(self) -> str:
        return self.spec.family

    @property
    def n_params(self) -> int:
        return self.files.n_float_parameters()

    @property
    def max_positions(self) -> int | None:
        """The longest input the model allows: its position table, else the config's or the tokenizer's
        declared maximum (T5's relative positions have no table; its tokenizer says 512). A dynamic rope
        rescales past max_position_embeddings by design: no limit. Rotary and relative positions may go
        past the others with allow_long (see tracer.model.inputs)."""
        return self.position_limit().n

    def position_limit(self, encoder: bool = False) -> PositionLimit:
        """The limit of the stack that makes the output (an encoder-decoder's decoder), or of the encoder."""
        stack = "encoder" if encoder else "decoder" if self.route == "encoder-decoder" else ""
        return stack_limit(self.spec, self.config, self.folder, stack)

    @property
    def route(self) -> str:
        return self.spec.route

    def batch(self, text: str | Sequence[str] | None = None, ids: Sequence[Sequence[int]] | None = None,
              pad_side: str = "right", special_tokens: bool = True, pair: str | None = None,
              token_types: Sequence[Sequence[int]] | None = None, decoder_text: str | None = None,
              decoder_ids: Sequence[int] | None = None, positions: str = "auto", allow_long: bool = False) -> Batch:
        """Tokenize (or take ids), pad and build the inputs of every stack the model has.

        pair: a second text per row (BERT family: marked by the tokenizer's template, token type 1).
        token_types: segment ids per row, one per token. decoder_text / decoder_ids: the decoder's input
        of an encoder-decoder model (default: just the decoder start token). positions: "auto" follows the
        family (transformers' rule), "mask" counts real tokens (cumsum(mask) - 1), "index" is 0..n-1.
        allow_long: rotary and relative positions may run past max_position_embeddings; the batch then carries
        a warning (learned position tables are refused all the same; see tracer.model.inputs).
        """
        if (text is None) == (ids is None):
            raise TracerError("give either text or token ids (not both, not neither)")
        if pair is not None and text is None:
            raise TracerError("a text pair goes with prompt text, not with --ids")
        if positions not in POSITION_RULES:
            raise TracerError(f"--positions must be from-mask or index, not {positions!r}")
        if (decoder_text is not None or decoder_ids is not None) and self.route != "encoder-decoder":
            raise TracerError(f"this {self.spec.route_text.split(',')[0]} model has no decoder input",
                              hint="--decoder-text/--decoder-ids apply to encoder-decoder models (t5, bart)")
        if text is not None:
            rows, prompts = rows_from_text([text] if isinstance(text, str) else list(text), self.tokenizer, special_tokens, pair)
        else:
            rows, prompts = rows_from_ids([list(r) for r in ids], self.tokenizer, self.spec.vocab_size), [None] * len(ids)
        too_big = [t["id"] for r in rows for t in r if t["id"] >= self.spec.vocab_size]
        if too_big:
            raise TracerError(f"the tokenizer gave id {too_big[0]}, outside the model's vocabulary of {self.spec.vocab_size}")
        stack = self.spec.encoder or self.spec
        if token_types is not None:
            rows = with_token_types(rows, [list(t) for t in token_types], stack.token_types)
        elif pair is not None and not stack.token_types and self.route != "encoder":
            raise TracerError("a text pair needs a model that reads two segments (the BERT family)")
        warnings = [check_positions(max(len(r) for r in rows), self.position_limit(encoder=stack is not self.spec),
                                    allow_long, input_words(text is not None, len(rows)))]
        rule = stack.position_rule if positions == "auto" else positions
        inputs, tokens = pad_rows(rows, self._pad_id(), pad_side, rule)
        decoder_tokens = None
        if self.route == "encoder-decoder":
            dec, decoder_tokens = self._decoder_inputs(len(rows), decoder_text, decoder_ids)
            warnings.append(check_positions(dec.ids.shape[1], self.position_limit(), allow_long, "the decoder input"))
            inputs = replace(inputs, decoder=dec)
        return Batch(inputs, tokens, list(prompts), decoder_tokens, rule, tuple(w for w in warnings if w))

    def _decoder_inputs(self, n_rows: int, text: str | None, ids: Sequence[int] | None) -> tuple[ForwardInputs, list]:
        """The decoder's input, the same on every row: the start token, then the given text or ids."""
        start = self.spec.extras.get("decoder_start_token_id")
        if not isinstance(start, int) or not 0 <= start < self.spec.vocab_size:
            start = self._pad_id()
        if text is not None and ids is not None:
            raise TracerError("give --decoder-text or --decoder-ids, not both")
        if ids is not None:
            row = rows_from_ids([list(ids)], self.tokenizer, self.spec.vocab_size)[0]
        else:
            row = rows_from_ids([[start]], self.tokenizer, self.spec.vocab_size)[0]
            if text is not None:
                if not text.strip():
                    raise TracerError("--decoder-text is empty")
                # as transformers' shift_tokens_right of labels = tokenizer(text): the start token, then the
                # text tokenized with its specials (BART: <s> ... ), less the last token (the </s> it predicts)
                rest = rows_from_text([text], self.tokenizer, special_tokens=True)[0][0][:-1]
                row += [{**t, "pos": 1 + j} for j, t in enumerate(rest)]
        inputs, tokens = pad_rows([row] * n_rows, self._pad_id(), "right", self.spec.position_rule)
        return inputs, tokens

    def run(self, text: str | Sequence[str] | None = None, ids: Sequence[Sequence[int]] | None = None,
            keep: Sequence[str] | None = None, pad_side: str = "right", special_tokens: bool = True,
            mask_override: MaskOverride | None = None, pair: str | None = None,
            token_types: Sequence[Sequence[int]] | None = None, decoder_text: str | None = None,
            decoder_ids: Sequence[int] | None = None, positions: str = "auto", clock=None,
            allow_long: bool = False) -> Trace:
        """keep: globs of steps kept whole; None keeps everything that fits DEFAULT_BUDGET (see keep_policy).
        clock (e.g. time.perf_counter): time each step (Step.seconds), for `tracer run --cost`.
        allow_long: past max_position_embeddings on rotary and relative positions; the trace's meta then
        carries the warning under "warnings". The other arguments are those of `batch`."""
        b = self.batch(text, ids, pad_side, special_tokens, pair, token_types, decoder_text, decoder_ids, positions,
                       allow_long)
        main = b.inputs.decoder or b.inputs  # the stack whose self-attention the masks describe
        reduced: list[str] = []
        if keep is None:
            itemsize = np.dtype(DTYPES[self.dtype]).itemsize
            keep, reduced = auto_keep(self.spec, *b.inputs.ids.shape, itemsize)
        override = self._checked_override(mask_override, b) if mask_override is not None else None
        headless = self.route == "encoder" and self.spec.head == "none"  # a bare BertModel: no `bert.` prefix
        rec = Recorder(keep, hf_module=lambda name: hf_module(self.family, name, headless=headless), clock=clock)
        with np.errstate(over="ignore", under="ignore"):
            # built once: the forward applies them, the meta describes them (an override replaces them)
            masks = layer_masks(main.attention_mask, self.spec) if override is None else {}
            forward(b.inputs, self.weights, self.spec, rec, override, masks)
        meta = {
            "tracer_version": __version__,
            "model": {"name": self.folder.name, "family": self.family, "route": self.route,
                      "config_sha256": self.config_sha256, "spec": self.spec.to_dict(), "n_params": self.n_params,
                      "storage_dtypes": self.files.storage_dtypes()},
            "dtype": self.dtype,
            "prompts": b.prompts,
            "tokens": b.tokens,
            "pad_side": pad_side,
            "special_tokens": special_tokens,
            "positions": b.position_rule,
            "mask": self._mask_meta(b, override, masks),
            "keep": list(keep),
            "reduced_to_stats": reduced,
            "computed_in_blocks": blocked_globs(rec.blocked),
        }
        if b.warnings:
            meta["warnings"] = list(b.warnings)
        if pair is not None:
            meta["pair"] = pair
        if b.decoder_tokens is not None:
            meta["decoder_tokens"] = b.decoder_tokens
        return Trace(rec.steps, meta)

    def _pad_id(self) -> int:
        pad = self.config.get("pad_token_id")
        if isinstance(pad, int) and 0 <= pad < self.spec.vocab_size:
            return pad
        return 0

    def _checked_override(self, m: MaskOverride, b: Batch) -> MaskOverride:
        if self.route == "encoder-decoder":
            raise TracerError("--mask replaces a single stack's self-attention mask; encoder-decoder models have three",
                              hint="use tracer mask to study the convention, then run without --mask")
        bsz, q = b.inputs.ids.shape
        target = (bsz, self.spec.n_heads, q, q)
        for name, arr in (("mask", m.keep), ("mask bias", m.bias)):
            if arr is None:
                continue
            if arr.ndim != 4 or any(s not in (1, t) for s, t in zip(arr.shape, target)):
                raise TracerError(f"the {name} has shape {tuple(arr.shape)}, which does not land on the scores "
                                  f"[batch={bsz}, heads={target[1]}, q_len={q}, kv_len={q}]")
        dtype = np.dtype(DTYPES[self.dtype])
        bias = None if m.bias is None else m.bias.astype(dtype)
        return MaskOverride(m.keep.astype(bool), bias, m.note)

    def _mask_meta(self, b: Batch, override: MaskOverride | None, parts: dict) -> dict:
        layers = {str(i): self.spec.window(i) for i in range(self.spec.n_layers)}
        if override is not None:
            keep = np.broadcast_to(override.keep, (b.inputs.ids.shape[0], override.keep.shape[1]) + override.keep.shape[2:])
            return {"source": "override", "note": override.note, "windows": layers, "fully_masked": _fully_masked(keep)}
        main = b.inputs.decoder or b.inputs
        meta = {
            "source": "built",
            "route": self.route,
            "causal": self.spec.causal,
            "windows": layers,
            "padding": bool((main.attention_mask == 0).any()),
            "fully_masked": {str(w): _fully_masked(p.keep) for w, p in parts.items()},
        }
        if self.route == "encoder-decoder":
            meta["encoder_padding"] = bool((b.inputs.attention_mask == 0).any())
        return meta


def _fully_masked(keep: np.ndarray) -> list[list[int]]:
    """[[batch, head, query], ...] rows with no key to attend to (their weights are all zero)."""
    rows = ~keep.any(axis=-1)  # [batch, heads, q]
    return [list(map(int, idx)) for idx in np.argwhere(rows)]


def load_model(path: str | Path, dtype: str = "float32", allow_unused: bool = False) -> Model:
    folder = Path(path)
    if dtype not in DTYPES:
        raise TracerError(f"dtype {dtype!r} is not supported", hint="use float32 or float64")
    if folder.is_file():
        if folder.suffix in _PICKLE_SUFFIXES:
            raise TracerError(f"{folder}: a pickle checkpoint; tracer never unpickles files",
                              hint="convert it once in a trusted environment with save_pretrained(), which writes safetensors")
        raise TracerError(f"{folder}: expected a checkpoint folder (config.json, *.safetensors, tokenizer.json), got a file")
    if not folder.is_dir():
        raise TracerError(f"{folder}: no such checkpoint folder")
    cfg, sha = read_config(folder)
    adapter = adapter_for(cfg)
    spec = adapter.spec_from_config(cfg)
    if spec.head == "none":
        spec = replace(spec, pooling=read_pooling(folder))
    files = WeightFiles(folder)
    sources = adapter.weight_sources(spec)
    shapes = expected_shapes(spec)
    stored = {n: _resolve(files, (sources[n].hf_name, *sources[n].aliases)) for n in shapes}  # missing: named here
    check_sizes(files, shapes, stored, _size_summary(spec))
    used: set[str] = set()
    weights = load_weights(files, sources, spec, DTYPES[dtype], used)
    ignored = (*getattr(adapter, "IGNORED", ()), *(("lm_head.weight",) if spec.tied_embeddings else ()),
               *superseded(sources, stored))
    unused = check_unused(files, used, allow_unused, ignored)
    tok_path = folder / "tokenizer.json"
    tokenizer = Tokenizer(tok_path) if tok_path.exists() or tok_path.is_symlink() else None  # special files refused
    model = Model(folder, cfg, sha, spec, weights, files, tokenizer, dtype)
    model.unused_weights = tuple(unused)
    return model


def blocked_globs(names: list[str]) -> list[str]:
    """Step names computed in blocks, as globs over layers: blocks.3.attn.scores -> blocks.*.attn.scores."""
    return list(dict.fromkeys(re.sub(r"(^|\.)blocks\.\d+\.", r"\1blocks.*.", n) for n in names))


def _size_summary(spec: Spec) -> str:
    return (f"{spec.n_layers} layers, d_model {spec.d_model}, {spec.n_heads} heads, d_ff {spec.d_ff}, "
            f"vocab {spec.vocab_size}")


def load_weights(files: WeightFiles, sources: dict[str, Source], spec: Spec, dtype,
                 used: set[str] | None = None) -> LazyWeights:
    """Canonical name -> array [in, out] in the compute dtype, made when read (see LazyWeights).
    `used` collects the HF names read (for the unused-weight check).

    Every shape is checked here, from the file headers alone: a config that disagrees with its weights
    fails at load, before any tensor is read."""
    resolved = {}
    for name, shape in expected_shapes(spec).items():
        src = sources[name]
        hf_name = _resolve(files, (src.hf_name, *src.aliases))
        if used is not None:
            used.add(hf_name)
        stored = files.shape(hf_name)
        try:
            got = src.transform(_shape_only(stored)).shape
        except ValueError:
            got = None
        if got is None or tuple(got) != shape:
            raise TracerError(
                f"config.json disagrees with the weights: {hf_name} has shape {list(stored)}, "
                f"but the config implies {list(shape)} for {name}"
            )
        resolved[name] = (hf_name, src.transform)
    return LazyWeights(files, resolved, dtype)


def _shape_only(shape: tuple[int, ...]) -> np.ndarray:
    """A read-only array of that shape over one number (zero strides): transforms give their shapes for free."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=shape, strides=(0,) * len(shape),
                                           writeable=False)


def _resolve(files: WeightFiles, names: tuple[str, ...]) -> str:
    """The name as stored, trying aliases and the name without its `transformer.`/`model.` prefix
    (checkpoints saved from a base model lack it)."""
    for name in names:
        for candidate in (name, name.split(".", 1)[-1]):
            if candidate in files:
                return candidate
    raise TracerError(f"{files.folder}: weight {names[0]!r} is missing from the safetensors files")
