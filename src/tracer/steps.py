"""The step names: tracer's public contract.

Every tensor the engine records is named by one of these templates (`{i}` is a
block index). Users diff against these names and porters write their own dumps
with them, so they only ever grow. The man page and `tracer steps` are generated
from this table, and a test checks that every recorded step matches one row with
the same axes.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass


ROUTES = ("decoder", "encoder", "encoder-decoder")
STACKS = ("encoder.", "decoder.")  # encoder-decoder models prefix embed.*, blocks.* and final_norm.* with these
DECODE = "decode."  # tracer generate: decoding step t records the usual names under decode.{t}.
_DECODE_RE = re.compile(r"^decode\.(\d+)\.")


@dataclass(frozen=True)
class StepDoc:
    template: str  # e.g. "blocks.{i}.attn.q"
    axes: tuple[str, ...]  # named axes, outermost first
    what: str
    routes: tuple[str, ...] = ROUTES  # the routes that record this step

    @property
    def stacked(self) -> bool:
        """Recorded once per stack (`encoder.` / `decoder.` prefix) in an encoder-decoder model."""
        return self.template.startswith(("embed.", "blocks.", "final_norm."))


_BTD = ("batch", "pos", "d_model")
_BHQK = ("batch", "heads", "q_len", "kv_len")
_ENC = ("encoder",)
_S2S = ("encoder-decoder",)

# The op text of masked scores without a mask bias: the engine writes it, and the trace recognises by it
# that the step is exactly where(mask, scores, -inf) and need not be held (trace.DERIVED).
MASKED_OP = "blocked -> -inf"
_NOT_S2S = ("decoder", "encoder")
_DEC = ("decoder",)

CATALOGUE: tuple[StepDoc, ...] = (
    StepDoc("input.ids", ("batch", "pos"), "token ids (int64)"),
    StepDoc("input.mask", ("batch", "pos"), "1 = real token, 0 = padding (int64)"),
    StepDoc("input.positions", ("batch", "pos"), "position ids used (int64; cumsum(mask) - 1 with pads 0, or 0..n-1 where the family ignores padding); absent for T5's relative positions"),
    StepDoc("input.token_types", ("batch", "pos"), "segment ids (int64; BERT family: 0 = first text, 1 = second)", _ENC),
    StepDoc("input.decoder_ids", ("batch", "dec_pos"), "decoder input ids (int64), starting with the decoder start token", _S2S),
    StepDoc("input.decoder_mask", ("batch", "dec_pos"), "decoder 1 = real token, 0 = padding (int64)", _S2S),
    StepDoc("input.decoder_positions", ("batch", "dec_pos"), "decoder position ids (int64; learned positions only)", _S2S),
    StepDoc("embed.tokens", _BTD, "token embedding lookup W_E[ids]"),
    # --- families of issue 10 (qwen3, gemma2/3, olmo2, phi, starcoder2, OPT-350m, MoE) ---
    StepDoc("embed.project_in", _BTD, "OPT with word_embed_proj_dim != hidden_size: embed.tokens (d_embed wide) @ W_project_in", _DEC),
    StepDoc("embed.token_types", _BTD, "segment embeddings W_type[token_types] (BERT family; row 0 when no types are given)", _ENC),
    StepDoc("embed.positions", _BTD, "learned position embeddings W_pos[positions + offset] (absent for rotary and relative)"),
    StepDoc("embed.out", _BTD, "residual stream entering block 0 (after any scale and embedding LayerNorm)"),
    StepDoc("blocks.{i}.ln1.out", _BTD, "first norm of block i (after attention in a post-norm block)"),
    StepDoc("blocks.{i}.attn.q", ("batch", "heads", "pos", "d_head"), "query projection split into heads, bias added"),
    StepDoc("blocks.{i}.attn.k", ("batch", "kv_heads", "pos", "d_head"), "key projection split into kv heads, bias added"),
    StepDoc("blocks.{i}.attn.v", ("batch", "kv_heads", "pos", "d_head"), "value projection split into kv heads, bias added"),
    StepDoc("blocks.{i}.attn.q_norm", ("batch", "heads", "pos", "d_head"), "queries normed before rotary: RMS over d_head per head (qwen3, gemma3), LayerNorm over d_head per head (phi with qk_layernorm) or RMS over the whole projection (olmo2)", _DEC),
    StepDoc("blocks.{i}.attn.k_norm", ("batch", "kv_heads", "pos", "d_head"), "keys normed before rotary, as attn.q_norm", _DEC),
    StepDoc("blocks.{i}.attn.q_rot", ("batch", "heads", "pos", "d_head"), "queries after rotary embedding"),
    StepDoc("blocks.{i}.attn.k_rot", ("batch", "kv_heads", "pos", "d_head"), "keys after rotary embedding"),
    StepDoc("blocks.{i}.attn.position_bias", ("batch", "heads", "q_len", "kv_len"), "relative position bias (T5 buckets; batch axis 1), already inside attn.scores", ("encoder-decoder",)),
    StepDoc("blocks.{i}.attn.scores.raw", _BHQK, "gemma2: q.k^T * scale before soft-capping (attn.scores is tanh(raw / cap) * cap)", _DEC),
    StepDoc("blocks.{i}.attn.scores", _BHQK, "q.k^T * scale, plus any position bias, before the mask"),
    StepDoc("blocks.{i}.attn.mask", _BHQK, "boolean keep-mask as applied, True = attend (size-1 axes broadcast)"),
    StepDoc("blocks.{i}.attn.masked_scores", _BHQK, "scores with blocked cells set to -inf"),
    StepDoc("blocks.{i}.attn.weights", _BHQK, "softmax over keys; fully masked rows are all zero"),
    StepDoc("blocks.{i}.attn.z", ("batch", "heads", "q_len", "d_head"), "weights @ v (kv heads repeated for grouped-query)"),
    StepDoc("blocks.{i}.attn.out", _BTD, "heads merged and put through the output projection"),
    StepDoc("blocks.{i}.ln1_post.out", _BTD, "norm of attn.out before it joins the residual (gemma2/3 sandwich norms, olmo2)", _DEC),
    StepDoc("blocks.{i}.resid_mid", _BTD, "residual stream after the attention sublayer (absent with parallel residual)"),
    StepDoc("blocks.{i}.ln_cross.out", _BTD, "norm around cross-attention (before it when pre-norm; after its residual when post-norm)", _S2S),
    StepDoc("blocks.{i}.cross_attn.q", ("batch", "heads", "pos", "d_head"), "cross-attention queries, from the decoder stream", _S2S),
    StepDoc("blocks.{i}.cross_attn.k", ("batch", "kv_heads", "enc_pos", "d_head"), "cross-attention keys, from the encoder output", _S2S),
    StepDoc("blocks.{i}.cross_attn.v", ("batch", "kv_heads", "enc_pos", "d_head"), "cross-attention values, from the encoder output", _S2S),
    StepDoc("blocks.{i}.cross_attn.scores", _BHQK, "decoder queries . encoder keys (kv_len = encoder positions)", _S2S),
    StepDoc("blocks.{i}.cross_attn.mask", _BHQK, "the encoder's padding as a keep-mask, broadcast over decoder rows", _S2S),
    StepDoc("blocks.{i}.cross_attn.masked_scores", _BHQK, "cross scores with padded encoder positions set to -inf", _S2S),
    StepDoc("blocks.{i}.cross_attn.weights", _BHQK, "softmax over encoder positions", _S2S),
    StepDoc("blocks.{i}.cross_attn.z", ("batch", "heads", "q_len", "d_head"), "weights @ encoder values", _S2S),
    StepDoc("blocks.{i}.cross_attn.out", _BTD, "cross-attention heads merged and projected", _S2S),
    StepDoc("blocks.{i}.resid_cross", _BTD, "residual stream after the cross-attention sublayer", _S2S),
    StepDoc("blocks.{i}.ln2.out", _BTD, "second norm of block i"),
    StepDoc("blocks.{i}.mlp.pre", ("batch", "pos", "d_ff"), "first MLP projection before the activation (gate branch when gated)"),
    StepDoc("blocks.{i}.mlp.up", ("batch", "pos", "d_ff"), "linear (up) branch of a gated MLP"),
    StepDoc("blocks.{i}.mlp.post", ("batch", "pos", "d_ff"), "after the activation (times up when gated)"),
    StepDoc("blocks.{i}.mlp.out", _BTD, "after the down projection"),
    StepDoc("blocks.{i}.mlp.router.logits", ("batch", "pos", "experts"), "MoE: router scores per expert, x @ W_router", _DEC),
    StepDoc("blocks.{i}.mlp.router.experts", ("batch", "pos", "top_k"), "MoE: the chosen experts (int64), most probable first", _DEC),
    StepDoc("blocks.{i}.mlp.router.weights", ("batch", "pos", "top_k"), "MoE: their softmax probabilities (renormalised when the model says so)", _DEC),
    StepDoc("blocks.{i}.mlp.expert_out", ("batch", "pos", "top_k", "d_model"), "MoE: each chosen expert's output for the token (run on routed tokens only), before weighting; mlp.out is their weighted sum", _DEC),
    StepDoc("blocks.{i}.mlp.shared.out", _BTD, "MoE with a shared expert (qwen2_moe): the shared gated MLP's output on every token, before its gate", _DEC),
    StepDoc("blocks.{i}.mlp.shared.gate", ("batch", "pos"), "MoE with a shared expert: sigmoid(x @ W_shared_gate), one scalar per token; mlp.out = routed sum + shared.gate * shared.out", _DEC),
    StepDoc("blocks.{i}.ln2_post.out", _BTD, "norm of mlp.out before it joins the residual (gemma2/3 sandwich norms, olmo2)", _DEC),
    StepDoc("blocks.{i}.resid_post", _BTD, "residual stream leaving block i"),
    StepDoc("final_norm.out", _BTD, "final norm (absent in post-norm models such as BERT and BART)"),
    StepDoc("project_out", ("batch", "pos", "d_embed"), "OPT with word_embed_proj_dim != hidden_size: last stream @ W_project_out, what the head reads", _DEC),
    StepDoc("head.dense", _BTD, "MLM head: dense projection of the last block's output", _ENC),
    StepDoc("head.act", _BTD, "MLM head: after its activation", _ENC),
    StepDoc("head.ln.out", _BTD, "MLM head: LayerNorm, the vector the tied decoder reads", _ENC),
    StepDoc("logits.raw", ("batch", "pos", "vocab"), "gemma2: logits before final soft-capping (logits is tanh(raw / cap) * cap)", _DEC),
    StepDoc("logits", ("batch", "pos", "vocab"), "unembedding: final_norm.out @ W_U (MLM: head.ln.out @ W_E^T + b; T5 tied: scaled by d_model^-0.5 first); decoder positions in an encoder-decoder model"),
    StepDoc("probs", ("batch", "pos", "vocab"), "softmax of logits over the vocabulary"),
    StepDoc("pooled", ("batch", "d_model"), "encoder without a head: the declared sentence embedding (sentence-transformers pooling, else mean over real tokens)", _ENC),
)


def _template_regex(template: str) -> re.Pattern:
    return re.compile("^" + re.escape(template).replace(r"\{i\}", r"(\d+)") + "$")


_REGEXES = tuple((_template_regex(d.template), d) for d in CATALOGUE)


def decode_step(name: str) -> tuple[int | None, str]:
    """(t, the usual name) of a generation step `decode.{t}.NAME`; (None, name) for any other name."""
    m = _DECODE_RE.match(name)
    return (int(m.group(1)), name[m.end():]) if m else (None, name)


def describe(name: str) -> StepDoc | None:
    """The catalogue row a concrete step name belongs to, or None. Allowed prefixes: a decoding step's
    `decode.{t}.` (tracer generate), then a stack's `encoder.`/`decoder.` (encoder-decoder models)."""
    _, name = decode_step(name)
    stack = next((s for s in STACKS if name.startswith(s)), None)
    bare = name[len(stack):] if stack else name
    for regex, doc in _REGEXES:
        if regex.match(bare) and (stack is None or doc.stacked):
            return doc
    return None


def stack_of(name: str) -> str:
    """"encoder", "decoder" or "" (a single-stack model, or a step outside the stacks)."""
    _, name = decode_step(name)
    return next((s[:-1] for s in STACKS if name.startswith(s)), "")


def route_templates(route: str) -> list[tuple[str, StepDoc]]:
    """The concrete templates one route records, in order: stack steps are prefixed in an encoder-decoder model."""
    if route not in ROUTES:
        raise ValueError(route)
    docs = [d for d in CATALOGUE if route in d.routes]
    if route != "encoder-decoder":
        return [(d.template, d) for d in docs if "cross" not in d.template]
    inputs = [(d.template, d) for d in docs if d.template.startswith("input.")]
    enc = [("encoder." + d.template, d) for d in docs if d.stacked and "cross" not in d.template]
    dec = [("decoder." + d.template, d) for d in docs if d.stacked]
    rest = [(d.template, d) for d in docs if not d.stacked and not d.template.startswith("input.")]
    return inputs + enc + dec + rest


def block_of(name: str) -> int | None:
    """Block index of a step name (`blocks.3.attn.q` -> 3), None outside blocks."""
    m = re.match(r"^(?:decode\.\d+\.)?(?:\w+\.)?blocks\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def matches(name: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """True when a step name matches any glob pattern (`*` spans dots)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)
