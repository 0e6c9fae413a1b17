"""A loaded checkpoint: Spec, canonical weights in the compute dtype, tokenizer; `run` gives a Trace."""

from __future__ import annotations

import re

from dataclasses import replace
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np

from tracer.arch.canonical import Source, expected_shapes, superseded
from tracer.names.hf import hf_module
from tracer.arch.registry import adapter_for
from tracer.arch.spec import Spec
from tracer.model.inputs import Batch, pad_rows, rows_from_ids, rows_from_text, with_token_types
from tracer.checkpoint.agreement import check_sizes, check_unused
from tracer.checkpoint.tokenizer import Tokenizer
from tracer.checkpoint.weights import LazyWeights, WeightFiles
from tracer.engine.forward import ForwardInputs, MaskOverride, forward, layer_masks
from tracer.errors import TracerError
from tracer.model.keep import auto_keep, check_keep_matched
from tracer.model.inputs import PositionLimit, check_positions, input_words, stack_limit
from tracer.model.meta import ModelMeta, RunMeta, built_mask, fully_masked_rows, override_mask
from tracer.model.open import Checkpoint, open_checkpoint
from tracer.model.options import InputOptions
from tracer.model.patch import intervention
from tracer.trace import Recorder, Trace

DTYPES = {"float32": np.float32, "float64": np.float64}


class MaskReading(Protocol):
    """A mask read in another framework's convention (tracer.masks.conventions.canonical_mask's result)."""

    def override_parts(self) -> tuple[np.ndarray, np.ndarray | None, str]: ...  # keep, bias, note

    def run_record(self) -> dict: ...  # how the trace records the reading


class Model:
    """A checkpoint ready to run: `run` gives a Trace, `generate` new tokens, `batch` the inputs alone.

    spec (the architecture as tracer reads it), config (config.json), weights (canonical name -> array,
    made when read), files (the stored tensors), tokenizer (None without tokenizer.json), dtype."""

    unused_weights: tuple[str, ...] = ()  # float tensors no step reads (only with allow_unused)

    def __init__(self, folder: Path, cfg: dict, config_sha256: str, spec: Spec, weights: dict, files: WeightFiles,
                 tokenizer: Tokenizer | None, dtype: str):
        self.folder, self.config, self.config_sha256 = folder, cfg, config_sha256
        self.spec, self.weights, self.files, self.tokenizer, self.dtype = spec, weights, files, tokenizer, dtype

    def __repr__(self) -> str:
        s = self.spec
        return (f"<tracer.Model {self.folder.name!r}: {self.family}, {self.route}, {s.n_layers} layers, "
                f"d_model {s.d_model}, {s.n_heads} heads, vocab {s.vocab_size}, {self.n_params:,} parameters, "
                f"{self.dtype}{'' if self.tokenizer is not None else ', no tokenizer'}>")

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

    def batch(self, text: str | Sequence[str] | None = None, ids: Sequence[Sequence[int]] | Sequence[int] | None = None,
              options: InputOptions | None = None, **input_options) -> Batch:
        """Tokenize (or take ids), pad and build the inputs of every stack the model has.

        text: one prompt or a list (a padded batch). ids: token ids, a list per row (a flat list is one row).
        options: an InputOptions; or its fields as keywords (pad_side, special_tokens, pair, token_types,
        decoder_text, decoder_ids, positions, allow_long; see InputOptions)."""
        o = InputOptions.of(options, **input_options)
        if (text is None) == (ids is None):
            raise TracerError("give either text or token ids (not both, not neither)")
        if o.pair is not None and text is None:
            raise TracerError("a text `pair` goes with prompt text, not with token `ids`")
        if (o.decoder_text is not None or o.decoder_ids is not None) and self.route != "encoder-decoder":
            raise TracerError(f"this {self.spec.route_text.split(',')[0]} model has no decoder input",
                              hint="`decoder_text`/`decoder_ids` apply to encoder-decoder models (t5, bart)")
        if text is not None:
            texts = [text] if isinstance(text, str) else _text_rows(text)
            rows, prompts = rows_from_text(texts, self.tokenizer, o.special_tokens, o.pair)
        else:
            id_rows = id_rows_of(ids)
            rows, prompts = rows_from_ids(id_rows, self.tokenizer, self.spec.vocab_size), [None] * len(id_rows)
        too_big = [t["id"] for r in rows for t in r if t["id"] >= self.spec.vocab_size]
        if too_big:
            raise TracerError(f"the tokenizer gave id {too_big[0]}, outside the model's vocabulary of {self.spec.vocab_size}")
        stack = self.spec.encoder or self.spec
        if o.token_types is not None:
            rows = with_token_types(rows, [list(t) for t in o.token_types], stack.token_types)
        elif o.pair is not None and not stack.token_types and self.route != "encoder":
            raise TracerError("a text pair needs a model that reads two segments (the BERT family)")
        warnings = [check_positions(max(len(r) for r in rows), self.position_limit(encoder=stack is not self.spec),
                                    o.allow_long, input_words(text is not None, len(rows)))]
        rule = stack.position_rule if o.positions == "auto" else o.positions
        inputs, tokens = pad_rows(rows, self._pad_id(), o.pad_side, rule)
        decoder_tokens = None
        if self.route == "encoder-decoder":
            dec, decoder_tokens = self._decoder_inputs(o.decoder_rows(len(rows)), len(rows), o.pad_side)
            warnings.append(check_positions(dec.ids.shape[1], self.position_limit(), o.allow_long, "the decoder input"))
            inputs = replace(inputs, decoder=dec)
        return Batch(inputs, tokens, list(prompts), decoder_tokens, rule, tuple(w for w in warnings if w))

    def _decoder_inputs(self, given: list | None, n_rows: int, pad_side: str) -> tuple[ForwardInputs, list]:
        """The decoder's input per row: the given ids, or the start token then the given text (default: the
        start token alone); rows of different lengths are padded on the encoder's side."""
        start = self.spec.extras.get("decoder_start_token_id")
        if not isinstance(start, int) or not 0 <= start < self.spec.vocab_size:
            start = self._pad_id()
        rows = []
        for item in given if given is not None else [None] * n_rows:
            if item is not None and not isinstance(item, str):
                rows.append(rows_from_ids([list(item)], self.tokenizer, self.spec.vocab_size)[0])
                continue
            row = rows_from_ids([[start]], self.tokenizer, self.spec.vocab_size)[0]
            if item is not None:
                if not item.strip():
                    raise TracerError("`decoder_text` is empty")
                # as transformers' shift_tokens_right of labels = tokenizer(text): the start token, then the
                # text tokenized with its specials (BART: <s> ... ), less the last token (the </s> it predicts)
                rest = rows_from_text([item], self.tokenizer, special_tokens=True)[0][0][:-1]
                row += [{**t, "pos": 1 + j} for j, t in enumerate(rest)]
            rows.append(row)
        return pad_rows(rows, self._pad_id(), pad_side if len({len(r) for r in rows}) > 1 else "right",
                        self.spec.position_rule)

    def run(self, text: str | Sequence[str] | None = None, ids: Sequence[Sequence[int]] | Sequence[int] | None = None,
            keep: Sequence[str] | None = None, *, options: InputOptions | None = None,
            mask: "MaskReading | Callable[[tuple[int, int, int, int]], MaskReading] | MaskOverride | None" = None,
            mask_override: MaskOverride | None = None, clock=None, patch: dict | None = None,
            ablate: Sequence[str] | str | None = None, **input_options) -> Trace:
        """Run the forward pass and record every step: a Trace (step name -> array, with statistics and meta).

        text / ids / options / keywords: the inputs, as `batch` takes them (pad_side, special_tokens, pair,
        token_types, decoder_text, decoder_ids, positions, allow_long). keep: globs of steps kept whole
        (statistics are kept for all); None keeps everything that fits 2 GiB (see tracer.model.keep); a glob
        that matches no step is an error. mask: replace the built self-attention mask, with a MaskOverride, the
        mask lab's reading (tracer.masks.conventions.canonical_mask) or a function of the score shape
        [batch, heads, q, kv] that gives one (the batch is built once); the trace records how it was read.
        clock (e.g. time.perf_counter): time each step (Step.seconds). allow_long: past max_position_embeddings
        on rotary and relative positions; the trace's meta then carries the warning under "warnings".
        patch: step name -> array, the step's value replaced by it (same shape) and the pass computed on from
        there; ablate: `blocks.L.attn.head.H` (head H's slice of attn.z zeroed) or `blocks.L.mlp` (mlp.out
        zeroed), one or a list (see tracer.model.patch); the trace's meta lists them under "intervention"."""
        if mask is not None and mask_override is not None:
            raise TracerError("give `mask` or `mask_override`, not both")
        o = InputOptions.of(options, **input_options)
        b = self.batch(text, ids, o)
        main = b.inputs.decoder or b.inputs  # the stack whose self-attention the masks describe
        override, read = self._override(mask if mask is not None else mask_override, b)
        reduced: list[str] = []
        if keep is None:
            itemsize = np.dtype(DTYPES[self.dtype]).itemsize
            keep, reduced = auto_keep(self.spec, *b.inputs.ids.shape, itemsize)
        elif isinstance(keep, str):
            keep = (keep,)
        headless = self.route == "encoder" and self.spec.head == "none"  # a bare BertModel: no `bert.` prefix
        hook = intervention(self.spec, patch, ablate)
        rec = Recorder(keep, hf_module=lambda name: hf_module(self.family, name, headless=headless), clock=clock,
                       hook=hook)
        with np.errstate(over="ignore", under="ignore"):
            # built once: the forward applies them, the meta describes them (an override replaces them)
            masks = layer_masks(main.attention_mask, self.spec) if override is None else {}
            forward(b.inputs, self.weights, self.spec, rec, override, masks)
        check_keep_matched(keep, [s.name for s in rec.steps])
        if override is not None:
            keep_all = np.broadcast_to(override.keep, (b.inputs.ids.shape[0],) + override.keep.shape[1:])
            mask_meta = override_mask(self.spec, override.note, keep_all, read)
        else:
            mask_meta = built_mask(self.spec, self.route, main.attention_mask,
                                   {str(w): fully_masked_rows(p.keep) for w, p in masks.items()},
                                   b.inputs.attention_mask if self.route == "encoder-decoder" else None)
        meta = RunMeta(ModelMeta.of(self), self.dtype, b.prompts, b.tokens, o.pad_side, o.special_tokens,
                       b.position_rule, mask_meta, list(keep), reduced, blocked_globs(rec.blocked),
                       warnings=list(b.warnings), pair=o.pair, decoder_tokens=b.decoder_tokens)
        meta = meta.to_dict()
        if hook is not None:
            meta["intervention"] = hook.describe()
        return Trace(rec.steps, meta)

    def generate(self, text: str | Sequence[str] | None = None, ids: Sequence[Sequence[int]] | Sequence[int] | None = None,
                 max_new_tokens: int = 8, *, temperature: float | None = None, top_k: int | None = None,
                 top_p: float | None = None, seed: int | None = None, ignore_eos: bool = False,
                 stop: Sequence[str] = (), check_cache: bool = False, record: bool = False,
                 keep: Sequence[str] | None = None, special_tokens: bool = True, allow_long: bool = False):
        """Decode up to max_new_tokens new tokens per row with a KV cache (what `tracer generate` runs).

        Greedy by default; temperature / top_k / top_p / seed sample. stop: texts that end a row. check_cache:
        also recompute the whole sequence each step (Generation.recompute_max_abs). record: keep a trace
        (Generation.trace; the prefill under the usual names, step t under decode.{t}.), keep: its globs.
        Returns a Generation: .rows (new_ids, text, stop), .steps, .to_json(), .trace."""
        from tracer.model.generate import GenerateOptions, generate
        from tracer.model.sampling import sampling_from_flags

        if keep is not None and not record:
            raise TracerError("`keep` chooses what the recorded trace keeps: pass record=True too")
        options = GenerateOptions(max_new_tokens, sampling_from_flags(temperature, top_k, top_p, seed), ignore_eos,
                                  (stop,) if isinstance(stop, str) else tuple(stop), check_cache, record=record,
                                  keep=tuple(keep) if keep is not None else None, special_tokens=special_tokens,
                                  allow_long=allow_long)
        return generate(self, text, ids, options)

    def _pad_id(self) -> int:
        pad = self.config.get("pad_token_id")
        if isinstance(pad, int) and 0 <= pad < self.spec.vocab_size:
            return pad
        return 0

    def _override(self, given, b: Batch) -> tuple[MaskOverride | None, dict | None]:
        """(the engine's override, how the mask lab read it) from Model.run's mask argument."""
        if given is None:
            return None, None
        if self.route == "encoder-decoder":
            raise TracerError("`mask` replaces a single stack's self-attention mask; encoder-decoder models have three",
                              hint="use tracer mask to study the convention, then run without `mask`")
        bsz, q = b.inputs.ids.shape
        target = (bsz, self.spec.n_heads, q, q)
        if callable(given) and not isinstance(given, MaskOverride):
            given = given(target)
        read = None
        if not isinstance(given, MaskOverride):
            read = given.run_record()
            given = MaskOverride(*given.override_parts())
        for name, arr in (("mask", given.keep), ("mask bias", given.bias)):
            if arr is None:
                continue
            if arr.ndim != 4 or any(s not in (1, t) for s, t in zip(arr.shape, target)):
                raise TracerError(f"the {name} has shape {tuple(arr.shape)}, which does not land on the scores "
                                  f"[batch={bsz}, heads={target[1]}, q_len={q}, kv_len={q}]")
        dtype = np.dtype(DTYPES[self.dtype])
        bias = None if given.bias is None else given.bias.astype(dtype)
        return MaskOverride(given.keep.astype(bool), bias, given.note), read


def _text_rows(text) -> list[str]:
    texts = list(text)
    if not all(isinstance(t, str) for t in texts):
        raise TracerError("`text` must be a str or a list of str")
    return texts


def id_rows_of(ids) -> list[list[int]]:
    """Token ids as rows: a list of rows, or a flat list of ids as one row."""
    if isinstance(ids, np.ndarray):
        ids = ids.tolist() if ids.ndim == 2 else [ids.tolist()] if ids.ndim == 1 else None
    if ids is None or isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise TracerError("`ids` must be a list of token ids (one row) or a list of rows")
    if not ids:
        raise TracerError("`ids` is empty")
    if all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ids):
        return [list(ids)]
    if not all(isinstance(r, Sequence | np.ndarray) and not isinstance(r, (str, bytes)) for r in ids):
        raise TracerError("`ids` must be a list of token ids (one row) or a list of rows of token ids")
    return [list(r) for r in ids]


def load_model(path: str | Path, dtype: str = "float32", allow_unused: bool = False,
               tokenizer: str | None = None) -> Model:
    """Open a checkpoint folder (config.json, *.safetensors, tokenizer.json) or a GGUF file as a Model.

    dtype: the compute dtype, "float32" or "float64" (weights stored in bf16/f16 are widened exactly).
    allow_unused: load a checkpoint that holds float weights no step reads (e.g. a classification head);
    they are listed in model.unused_weights. Every shape is checked against the config from the file
    headers, before any tensor is read. Also tunes the C allocator once per process (see
    tracer.model.allocator) and, when NumPy was imported before tracer, shortens the spin of OpenBLAS's
    threads (tracer.threads), as the command does: the API runs as fast as `tracer run`.
    tokenizer: for a GGUF file, "gguf" (its own, the default: what llama.cpp runs) or "json" (the tokenizer.json
    beside it: what transformers runs); a folder has only its tokenizer.json ("json").
    Raises TracerError on a missing, corrupt or unsupported checkpoint."""
    from tracer.model import allocator
    from tracer.threads import park_loaded_blas

    if dtype not in DTYPES:
        raise TracerError(f"dtype {dtype!r} is not supported", hint="use float32 or float64")
    from tracer.model.gguf_open import is_gguf, load_gguf_model  # here: gguf_open builds on this module

    park_loaded_blas()  # NumPy loaded before tracer: its OpenBLAS's threads told to sleep soon (tracer.threads)
    if is_gguf(Path(path)):  # a GGUF file (issue 17): its own reader, metadata -> config
        allocator.reuse_freed_memory()
        return load_gguf_model(Path(path), dtype, allow_unused, tokenizer)
    if tokenizer not in (None, "json"):
        raise TracerError(f"--tokenizer {tokenizer}: {path} is a checkpoint folder, whose tokenizer is its tokenizer.json",
                          hint="--tokenizer chooses for a GGUF file: gguf (its own) or json (tokenizer.json beside it)")
    ck = open_checkpoint(path)
    allocator.reuse_freed_memory()
    return model_of(ck, dtype, allow_unused)


def model_of(ck: Checkpoint, dtype: str = "float32", allow_unused: bool = False) -> Model:
    """The Model of an opened checkpoint: the weights resolved, checked and made lazy."""
    spec, files = ck.spec, ck.files
    adapter = adapter_for(ck.config)
    sources = adapter.weight_sources(spec)
    shapes = expected_shapes(spec)
    stored = {n: _resolve(files, (sources[n].hf_name, *sources[n].aliases)) for n in shapes}  # missing: named here
    check_sizes(files, shapes, stored, _size_summary(spec))
    used: set[str] = set()
    weights = load_weights(files, sources, spec, DTYPES[dtype], used)
    ignored = (*getattr(adapter, "IGNORED", ()), *(("lm_head.weight",) if spec.tied_embeddings else ()),
               *superseded(sources, stored))
    unused = check_unused(files, used, allow_unused, ignored)
    model = Model(ck.path, ck.config, ck.config_sha256, spec, weights, files, ck.tokenizer, dtype)
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
