"""Serial decoding with a KV cache: the prompt in one pass (prefill), then one new token per step.

Step 0 is the prefill: the whole (left-padded) prompt, its last position's logits
choose new token 0. Step t >= 1 feeds new token t-1, appends its keys and values
to the cache and chooses new token t. Each row stops on its own (EOS, a stop
text, or the length); the batch stops when every row has.

With `check_cache`, every step also reruns the whole sequence without a cache
and measures the largest |cached - uncached| logit of the new position: serial
decoding with a cache computes what the parallel pass computes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from tracer.checkpoint.jsonload import load_json_file
from tracer.names.hf import hf_module
from tracer.checkpoint.weights import LazyWeights
from tracer.engine.decode import forward_cached, new_cache
from tracer.engine.forward import ForwardInputs, forward
from tracer.engine.ports import StepSink
from tracer.engine.ops import softmax
from tracer.errors import TracerError
from tracer.model.keep import check_keep_matched, generation_keep
from tracer.model.meta import ModelMeta, RunMeta, built_mask
from tracer.model.inputs import check_new_positions, generation_warning
from tracer.engine.masks import build_keep, positions_by_rule
from tracer.model.sampling import Sampling, choose
from tracer.trace import Recorder, Trace
from tracer.trace.recorder import NullRecorder

STOPS = ("eos", "length", "stop")
# --check-cache: how far cached logits may sit from the recomputed ones, per unit of logit magnitude (max(1, |logit|))
CHECK_TOL = {"float32": 1e-5, "float64": 1e-10}


@dataclass(frozen=True)
class GenerateOptions:
    max_new_tokens: int
    sampling: Sampling = Sampling()
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()  # stop texts: a row stops once its new text contains one
    check_cache: bool = False
    record: bool = False  # keep a trace (prefill under the usual names, step t under decode.{t}.)
    keep: tuple[str, ...] | None = None  # globs of steps kept whole; None: everything under the budget
    panel_layer: int | None = None  # the layer the cache panel describes (default: the first windowed one, else 0)
    special_tokens: bool = True
    keep_logits: bool = False  # keep each step's logits of the new position (tests, parity)
    allow_long: bool = False  # rotary and relative positions may run past max_position_embeddings (with a warning)


@dataclass
class RowStep:
    """One row at one step: what went in, what came out."""

    t: int
    position: int  # position id of the fed token (step 0: of the prompt's last token)
    fed_id: int | None  # None at step 0 (the whole prompt went in)
    token_id: int
    prob: float  # the model's probability of the chosen token (temperature 1)
    runner_id: int
    runner_prob: float
    cache_len: int  # keys the new query row attended over (cache length after the step)
    recompute_max_abs: float | None = None


@dataclass
class DecodeStep:
    """One step of a generation (0: the prefill): the cache before and after, each row's choice."""

    t: int
    cache_before: int
    cache_after: int
    seconds: float
    rows: list[RowStep | None]  # None for rows already stopped
    panel: dict
    logit_absmax: float = 0.0  # largest |logit| of the new position, over the batch
    logits: np.ndarray | None = None  # [batch, vocab] with keep_logits


@dataclass
class Row:
    prompt_ids: list[int]
    new_ids: list[int] = field(default_factory=list)
    stop: str | None = None
    text: str = ""


@dataclass
class Generation:
    rows: list[Row]
    steps: list[DecodeStep]
    prefill: dict
    eos_ids: list[int]
    sampling: Sampling
    panel_layer: int
    texts: dict[int, str] = field(default_factory=dict)  # token id -> how it reads (chosen and fed tokens)
    prompts: list[str | None] = field(default_factory=list)
    trace: Trace | None = None
    warnings: list[dict] = field(default_factory=list)  # positions past max_position_embeddings (--allow-long)

    def recompute_max_abs(self) -> float | None:
        """The largest |cached - uncached| logit over every step and row (None without --check-cache)."""
        found = [rs.recompute_max_abs for st in self.steps for rs in st.rows if rs and rs.recompute_max_abs is not None]
        return max(found) if found else None

    def check_bound(self, dtype: str) -> float:
        """--check-cache passes when every step's max |cached - uncached| stays under tol * max(1, |logits|)."""
        return CHECK_TOL[dtype] * max([1.0] + [st.logit_absmax for st in self.steps])

    def to_json(self) -> dict:
        """The documented `--json` form (strict JSON)."""
        out = []
        for r, row in enumerate(self.rows):
            steps = []
            for st in self.steps:
                rs = st.rows[r]
                if rs is None:
                    continue
                d = {"t": rs.t, "token_id": rs.token_id, "token": self.texts.get(rs.token_id, f"<{rs.token_id}>"), "prob": rs.prob,
                     "cache_len": rs.cache_len}
                if rs.recompute_max_abs is not None:
                    d["recompute_max_abs"] = rs.recompute_max_abs
                steps.append(d)
            out.append({"prompt_ids": row.prompt_ids, "new_ids": row.new_ids, "text": row.text, "stop": row.stop,
                        "steps": steps})
        return {"rows": out, "warnings": list(self.warnings)}


def eos_ids(model) -> list[int]:
    """The model's end-of-sequence ids: generation_config.json's when present, else config.json's (int or list)."""
    value = None
    gen = model.folder / "generation_config.json"
    if gen.is_file():
        try:
            data = load_json_file(gen)
        except TracerError:  # an unreadable generation_config.json: config.json's ids
            data = None
        value = data.get("eos_token_id") if isinstance(data, dict) else None
    if value is None:
        value = model.config.get("eos_token_id")
    ids = [value] if isinstance(value, int) else list(value or [])
    return [i for i in ids if isinstance(i, int) and 0 <= i < model.spec.vocab_size]


def check_request(model, width: int, options: GenerateOptions) -> None:
    """Refuse what cannot be generated: an encoder-only model, no new tokens, more positions than the model has."""
    if model.route == "encoder":
        raise TracerError(f"{model.folder.name} is an encoder-only model ({model.family}): it has no decoder to generate with",
                          hint="generate with a decoder (gpt2, llama, ...) or an encoder-decoder model (t5, bart)")
    n = options.max_new_tokens
    if n < 1:
        raise TracerError(f"`max_new_tokens` must be at least 1, not {n}")
    used = width if model.route == "decoder" else 1  # an encoder-decoder's decoder starts from one start token
    what = f"the prompt takes {width} positions" if model.route == "decoder" else "the decoder start token takes 1 position"
    check_new_positions(used, n, model.position_limit(), options.allow_long, what)
    if options.stop and model.tokenizer is None:
        raise TracerError("`stop` needs a tokenizer to read the new text, and this checkpoint has none")


def generate(model, text: str | Sequence[str] | None = None, ids: Sequence[Sequence[int]] | None = None,
             options: GenerateOptions = GenerateOptions(1)) -> Generation:
    b = model.batch(text, ids, pad_side="left", special_tokens=options.special_tokens, allow_long=options.allow_long)
    spec, W = model.spec, _decoding_weights(model.weights)
    width = b.inputs.ids.shape[1]
    check_request(model, width, options)
    n_rows, dtype = b.inputs.ids.shape[0], W.dtype
    dec0 = b.inputs.decoder if model.route == "encoder-decoder" else b.inputs
    prompt_len = dec0.ids.shape[1]
    cache = new_cache(spec, n_rows, prompt_len + options.max_new_tokens, dtype)
    eos = [] if options.ignore_eos else eos_ids(model)
    rng = np.random.default_rng(options.sampling.seed)
    layer = _panel_layer(spec, options.panel_layer)
    rec, keep, reduced = _recorder(model, n_rows, prompt_len, b, options)
    rows = [Row([t["id"] for t in row if not t.get("pad")]) for row in b.tokens]
    steps: list[DecodeStep] = []
    dec_ids, full_mask = dec0.ids, dec0.attention_mask
    pad = model._pad_id()
    with np.errstate(over="ignore", under="ignore"):
        for t in range(options.max_new_tokens):
            before = cache.past
            start = time.perf_counter()
            if t == 0:
                logits = forward_cached(b.inputs, W, spec, rec, cache)[:, -1]  # [batch, vocab]
                fed, positions = None, dec0.positions[:, -1]
            else:
                fed = np.array([row.new_ids[-1] if row.stop is None else pad for row in rows], dtype=np.int64)
                full_mask = np.concatenate([full_mask, np.ones((n_rows, 1), np.int64)], axis=1)
                positions = positions_by_rule(full_mask, spec.position_rule)[:, -1]
                step_in = ForwardInputs(fed[:, None], np.ones((n_rows, 1), np.int64), positions[:, None])
                if model.route == "encoder-decoder":
                    step_in = ForwardInputs(b.inputs.ids, b.inputs.attention_mask, b.inputs.positions, b.inputs.token_types, step_in)
                dec_ids = np.concatenate([dec_ids, fed[:, None]], axis=1)
                logits = forward_cached(step_in, W, spec, _prefixed(rec, f"decode.{t}."), cache)[:, -1]
            seconds = time.perf_counter() - start
            recompute = _recompute(model, b, dec_ids, full_mask, logits) if options.check_cache else None
            step_rows = _choose_all(rows, logits, options, rng, t, fed, positions, cache.past, recompute, eos, model.tokenizer)
            steps.append(DecodeStep(t, before, cache.past, seconds, step_rows, _panel(cache, spec, layer, before),
                              float(np.abs(logits).max()), logits.copy() if options.keep_logits else None))
            if all(row.stop is not None for row in rows):
                break
    for row in rows:
        row.stop = row.stop or "length"
        row.text = decode_text(model.tokenizer, row.new_ids)
    prefill = {"seconds": steps[0].seconds, "shape": list(dec0.ids.shape), "tokens": b.tokens,
               "encoder_shape": list(b.inputs.ids.shape) if model.route == "encoder-decoder" else None,
               "steps_recorded": len(rec.steps) if options.record else None}
    seen = {i for st in steps for rs in st.rows if rs for i in (rs.token_id, rs.runner_id, rs.fed_id) if i is not None}
    texts = {tid: token_text(model.tokenizer, tid) for tid in sorted(seen)}
    gen = Generation(rows, steps, prefill, eos, options.sampling, layer, texts, list(b.prompts))
    crossed = generation_warning(model.position_limit(), prompt_len, max(len(row.new_ids) for row in rows))
    gen.warnings = [*b.warnings, *([crossed] if crossed else [])]
    if options.record:
        if options.keep is not None:
            check_keep_matched(options.keep, [s.name for s in rec.steps])
        gen.trace = Trace(rec.steps, _meta(model, b, gen, keep, reduced, options))
    return gen


def _choose_all(rows, logits, options, rng, t, fed, positions, cache_len, recompute, eos, tok) -> list[RowStep | None]:
    probs = softmax(logits.astype(np.float64))  # [batch, vocab]
    out: list[RowStep | None] = []
    for r, row in enumerate(rows):
        if row.stop is not None:
            out.append(None)
            continue
        chosen = choose(logits[r], options.sampling, rng)
        runner = _runner_up(probs[r], chosen)
        out.append(RowStep(t, int(positions[r]), None if fed is None else int(fed[r]), chosen, float(probs[r, chosen]),
                           runner, float(probs[r, runner]), cache_len,
                           None if recompute is None else float(recompute[r])))
        row.new_ids.append(chosen)
        if chosen in eos:
            row.stop = "eos"
        elif options.stop and any(s in decode_text(tok, row.new_ids) for s in options.stop):
            row.stop = "stop"
    return out


def _runner_up(p: np.ndarray, chosen: int) -> int:
    """The most likely token other than the chosen one."""
    two = np.argpartition(-p, 1)[:2]  # the two most likely, in either order
    two = two[np.argsort(-p[two], kind="stable")]
    return int(two[1] if two[0] == chosen else two[0])


def _recompute(model, b, dec_ids: np.ndarray, full_mask: np.ndarray, cached: np.ndarray) -> np.ndarray:
    """Per row: max |cached - uncached| over the new position's logits, the uncached ones from the whole sequence."""
    spec = model.spec
    positions = positions_by_rule(full_mask, spec.position_rule)
    seq = ForwardInputs(dec_ids, full_mask, positions, np.zeros_like(dec_ids))
    if model.route == "encoder-decoder":
        seq = ForwardInputs(b.inputs.ids, b.inputs.attention_mask, b.inputs.positions, b.inputs.token_types, seq)
    grab = _LogitsOnly()
    forward(seq, model.weights, spec, grab)
    diff = np.abs(grab.logits[:, -1].astype(np.float64) - cached.astype(np.float64))  # [batch, vocab]
    return diff.max(axis=-1)


class _LogitsOnly(NullRecorder):
    """A step sink that remembers only the logits, every step computed whole."""

    logits = None

    def __call__(self, name, array, axes, op):
        if name == "logits":
            self.logits = array
        return array

    def keeps(self, name: str) -> bool:
        return True


class _Prefixed:
    """A decoding step's sink: `rec` records each name under `decode.{t}.`."""

    def __init__(self, rec: Recorder, prefix: str):
        self.rec, self.prefix = rec, prefix

    def __call__(self, name, array, axes, op):
        return self.rec(self.prefix + name, array, axes, op)

    def keeps(self, name: str) -> bool:
        return self.rec.keeps(self.prefix + name)

    def blocks(self, name, axes, op, shape, dtype):
        return self.rec.blocks(self.prefix + name, axes, op, shape, dtype)


def _prefixed(rec: Recorder, prefix: str) -> StepSink:
    return rec if isinstance(rec, NullRecorder) else _Prefixed(rec, prefix)


def _recorder(model, n_rows: int, prompt_len: int, b, options: GenerateOptions):
    if not options.record:
        return NullRecorder(), (), []
    enc_len = b.inputs.ids.shape[1]
    itemsize = model.weights.dtype.itemsize
    keep, reduced = generation_keep(model.spec, n_rows, prompt_len, options.max_new_tokens, itemsize, enc_len, options.keep)
    family = model.family
    return Recorder(keep, hf_module=lambda name: hf_module(family, strip_decode(name))), keep, reduced


HELD_WEIGHTS_BUDGET = 2 * 1024**3  # bytes of widened weights kept across decoding steps


def _decoding_weights(W):
    """bf16/f16 (or float64-run) weights are widened once for the whole generation when that fits the
    budget, instead of again at every decoding step; a bigger model keeps widening one tensor at a time."""
    return W.held(HELD_WEIGHTS_BUDGET) if isinstance(W, LazyWeights) else W


def strip_decode(name: str) -> str:
    """decode.3.blocks.0.attn.q -> blocks.0.attn.q."""
    if name.startswith("decode."):
        head, _, rest = name[len("decode."):].partition(".")
        if head.isdigit():
            return rest
    return name


def _panel_layer(spec, layer: int | None) -> int:
    n = spec.n_layers
    if layer is None:
        return next((i for i in range(n) if spec.window(i) is not None), 0)
    j = layer + n if layer < 0 else layer
    if not 0 <= j < n:
        raise TracerError(f"`panel_layer` {layer} is out of range: the model has {n} blocks (0..{n - 1})")
    return j


def _panel(cache, spec, layer: int, before: int) -> dict:
    """One layer's cache after a step: shapes, what the mask blocks for the newest query row, bytes."""
    lc = cache.layers[layer]
    b, kv, _, d = lc.k.shape
    past_after = cache.past
    q = past_after - before
    window = spec.window(layer)
    keep = build_keep(cache.mask, spec.causal, window, 1, past_after - 1).keep[:, 0, 0]  # [batch, kv_len]
    pad = cache.mask == 0
    blocked = [{"pad": np.flatnonzero(pad[r]).tolist(), "window": np.flatnonzero(~keep[r] & ~pad[r]).tolist()}
               for r in range(b)]
    return {"layer": layer, "k_shape": [b, kv, past_after, d], "v_shape": [b, kv, past_after, d],
            "scores_shape": [b, spec.n_heads, q, past_after], "window": window, "blocked": blocked,
            "cross_shape": list(lc.cross_k.shape) if lc.cross_k is not None else None,
            "bytes_per_token": cache.bytes_per_token(), "bytes_total": cache.nbytes}


def decode_text(tok, ids: list[int]) -> str:
    if tok is None:
        return ""
    return tok.decode([i for i in ids if i not in tok.special_ids])


def token_text(tok, tid: int) -> str:
    if tok is None:
        return f"<{tid}>"
    if tid in tok.special_ids:
        return tok.piece(tid)
    return tok.decode([tid])


def _meta(model, b, gen: Generation, keep, reduced, options: GenerateOptions) -> dict:
    spec = model.spec
    mask = built_mask(spec, model.route, b.inputs.attention_mask, {})
    generation = {"steps": len(gen.steps), "sampling": gen.sampling.describe(), "eos_ids": gen.eos_ids,
                  "rows": gen.to_json()["rows"]}
    return RunMeta(ModelMeta.of(model), model.dtype, b.prompts, b.tokens, "left", options.special_tokens,
                   (spec.encoder or spec).position_rule, mask, list(keep), reduced, generation=generation,
                   warnings=list(gen.warnings), decoder_tokens=b.decoder_tokens).to_dict()
