"""What each step of one pass costs: a small dict of formulas per stack (embed, blocks, final norm, head).

Conventions, used everywhere:
- a matrix product [m, k] @ [k, n] is m·n·k multiply-adds (MACs), 2·m·n·k FLOPs;
- everything else (norms, softmax, rotary, activations, bias and residual adds, the score scale, the
  mask) is an *elementwise* count: a stated number of operations per element (ELEMENTWISE), shown apart;
- weights read: the parameters a step multiplies by, read once per pass (a gather reads only the rows it
  indexes); activations written: the step's output, in the compute dtype;
- attention counts the (query, key) pairs the mask keeps (causal: the query's own and earlier keys; a
  sliding window of W keys caps them at W), unless `Pass.dense`: the whole q_len × kv_len square, as
  eager code (tracer's engine, transformers' eager path) computes it before masking.

routes.py strings these formulas into stacks (embed, blocks, final norm, head) per route; moe.py adds
the mixture-of-experts formulas no adapter produces yet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from tracer.arch import steps_of as plan
from tracer.arch.spec import Spec

# operations per element of the elementwise steps (approximate by nature; stated, not hidden)
NORM_OPS = {"layernorm": 7, "rmsnorm": 4}  # layernorm: mean, centre, square, sum, divide, scale, shift
SOFTMAX_OPS = 5  # max, subtract, exp, sum, divide
ROTARY_OPS = 3  # x·cos + rotate_half(x)·sin, per rotated element
SOFTCAP_OPS = 3  # divide, tanh, multiply (gemma2's soft-capping)
ACTIVATION_OPS = {"relu": 1, "silu": 4, "gelu": 5, "gelu_tanh": 9}
ELEMENTWISE = {
    "norm": "layernorm 7, rmsnorm 4 (+1 for Gemma's 1 + w) per element",
    "softmax": f"{SOFTMAX_OPS} per element (max, subtract, exp, sum, divide)",
    "rotary": f"{ROTARY_OPS} per rotated element (x·cos + rotate_half(x)·sin); the cos/sin tables are not counted",
    "activation": "relu 1, silu 4, gelu 5, gelu_tanh 9 per element (+1 for the gate's product)",
    "adds": "1 per element: biases, residuals, the score scale, the mask's select",
}


@dataclass(frozen=True)
class Pass:
    """One pass through the model: q_len new positions per row, after `past` positions already cached."""

    batch: int
    q_len: int  # n for a prefill, 1 for one decoding step
    past: int = 0  # positions in the KV cache before this pass
    itemsize: int = 4  # bytes per number (weights, activations, cache)
    dense: bool = False  # count the whole q_len × kv_len square instead of the kept pairs
    memory_len: int = 0  # encoder-decoder: encoder positions the decoder's cross-attention reads
    memory_cached: bool = False  # encoder-decoder: the encoder output and its cross keys/values exist already

    @property
    def kv_len(self) -> int:
        return self.past + self.q_len

    @property
    def tokens(self) -> int:
        return self.batch * self.q_len


@dataclass
class StepCost:
    name: str = ""  # the step name a run records, e.g. blocks.3.attn.scores
    kind: str = "elementwise"  # matmul | elementwise | gather
    macs: int = 0
    elementwise: int = 0
    weight_bytes: int = 0
    act_bytes: int = 0
    grows: str = "n"  # n: with the positions; n²: with the (query, key) pairs; n·m: decoder × encoder positions
    stack: str = ""
    repeat: int = 1  # how many layers this one stands for (routes.pass_costs with one_per_window)

    @property
    def flops(self) -> int:
        return 2 * self.macs + self.elementwise


Formula = Callable[[Spec, Pass, int | None], StepCost]


# ---------- the pieces ----------

def capped_sum(m: int, cap: int | None) -> int:
    """sum over k = 1..m of min(k, cap): the keys causal query rows 1..m see under a window of `cap`."""
    if m <= 0:
        return 0
    if cap is None or m <= cap:
        return m * (m + 1) // 2
    return cap * (cap + 1) // 2 + (m - cap) * cap


def kept_pairs(q_len: int, past: int, window: int | None, causal: bool = True) -> int:
    """(query, key) pairs the mask keeps, for one row of one head; queries sit at past .. past + q_len - 1."""
    kv = past + q_len
    if causal:  # query at position i sees keys max(0, i - W + 1) .. i
        return capped_sum(kv, window) - capped_sum(past, window)
    if window is None:
        return q_len * kv
    c = window - 1  # bidirectional window: |i - j| < W, i.e. up to W - 1 keys on each side
    return q_len + capped_sum(kv - 1, c) - capped_sum(past - 1, c) + capped_sum(q_len - 1, c)


def pairs(spec: Spec, p: Pass, layer: int | None) -> int:
    if p.dense:
        return p.q_len * p.kv_len
    return kept_pairs(p.q_len, p.past, spec.window(layer) if layer is not None else None, spec.causal)


def matmul(p: Pass, rows: int, k: int, n: int, bias: bool) -> StepCost:
    """[rows, k] @ [k, n] (+ bias [n]) with the weight read once."""
    return StepCost(kind="matmul", macs=rows * k * n, elementwise=rows * n if bias else 0,
                    weight_bytes=(k * n + (n if bias else 0)) * p.itemsize, act_bytes=rows * n * p.itemsize)


def elementwise(p: Pass, elements: int, ops: int, weights: int = 0, grows: str = "n") -> StepCost:
    return StepCost(kind="elementwise", elementwise=elements * ops, weight_bytes=weights * p.itemsize,
                    act_bytes=elements * p.itemsize, grows=grows)


def norm_ops(spec: Spec) -> int:
    return NORM_OPS[spec.norm] + (1 if spec.norm_offset else 0)


def norm_weights(spec: Spec) -> int:
    return spec.d_model * (2 if spec.norm == "layernorm" else 1)


def activation_ops(spec: Spec) -> int:
    return ACTIVATION_OPS[spec.activation] + (1 if spec.mlp == "gated" else 0)


# ---------- embed ----------

def _embed_tokens(spec: Spec, p: Pass, layer) -> StepCost:
    rows = p.tokens * spec.d_model
    return StepCost(kind="gather", weight_bytes=rows * p.itemsize, act_bytes=rows * p.itemsize)


def _embed_out(spec: Spec, p: Pass, layer) -> StepCost:
    """tokens (* scale) (+ token types) (+ positions), then the embedding norm when the family has one."""
    adds = (spec.embed_scale is not None) + bool(spec.token_types) + (spec.positions == "learned")
    if spec.embed_norm:
        return elementwise(p, p.tokens * spec.d_model, adds + norm_ops(spec), norm_weights(spec))
    if adds:
        return elementwise(p, p.tokens * spec.d_model, adds)
    return StepCost(kind="elementwise")  # the token embeddings themselves: nothing computed


def _embed_lookup(spec: Spec, p: Pass, layer) -> StepCost:
    """W_E[ids]: d_embed wide when the model projects its embeddings in (OPT-350m)."""
    rows = p.tokens * (spec.d_embed or spec.d_model)
    return StepCost(kind="gather", weight_bytes=rows * p.itemsize, act_bytes=rows * p.itemsize)


def _project_in(spec: Spec, p: Pass, layer) -> StepCost:
    return matmul(p, p.tokens, spec.d_embed, spec.d_model, False)


EMBED: dict[str, Formula] = {"embed.tokens": _embed_lookup, "embed.token_types": _embed_tokens,
                             "embed.positions": _embed_tokens, "embed.out": _embed_out, "embed.project_in": _project_in}


def embed_steps(spec: Spec) -> tuple[str, ...]:
    return tuple(s.local for s in plan.embed_steps(spec))


# ---------- blocks ----------

def _norm(spec: Spec, p: Pass, layer) -> StepCost:
    return elementwise(p, p.tokens * spec.d_model, norm_ops(spec), norm_weights(spec))


def _q(spec: Spec, p: Pass, layer) -> StepCost:
    return matmul(p, p.tokens, spec.d_model, spec.n_heads * spec.d_head, spec.qkv_bias)


def _kv(spec: Spec, p: Pass, layer) -> StepCost:
    return matmul(p, p.tokens, spec.d_model, spec.n_kv_heads * spec.d_head, spec.qkv_bias)


def _rotary(heads: Callable[[Spec], int]) -> Formula:
    def formula(spec: Spec, p: Pass, layer) -> StepCost:
        rows = p.tokens * heads(spec)  # one row per head per position; only rotary_dim of d_head rotate
        return StepCost(kind="elementwise", elementwise=rows * spec.rope.rotary_dim * ROTARY_OPS,
                        act_bytes=rows * spec.d_head * p.itemsize)
    return formula


def _scores(spec: Spec, p: Pass, layer) -> StepCost:
    n = p.batch * spec.n_heads * pairs(spec, p, layer)  # q·kᵀ over every kept pair, then the scale
    return StepCost(kind="matmul", macs=n * spec.d_head, elementwise=n, act_bytes=n * p.itemsize, grows="n²")


def _scores_or_capped(spec: Spec, p: Pass, layer) -> StepCost:
    """attn.scores: q·kᵀ·scale, or with soft-capping (gemma2) tanh(raw / cap) · cap of attn.scores.raw."""
    if spec.attn_softcap is None:
        return _scores(spec, p, layer)
    return elementwise(p, p.batch * spec.n_heads * pairs(spec, p, layer), SOFTCAP_OPS, grows="n²")


def _qk_norm(heads: Callable[[Spec], int]) -> Formula:
    def formula(spec: Spec, p: Pass, layer) -> StepCost:
        width = spec.d_head if spec.qk_norm == "head" else heads(spec) * spec.d_head
        return elementwise(p, p.tokens * heads(spec) * spec.d_head, norm_ops(spec),
                           width * (2 if spec.norm == "layernorm" else 1))
    return formula


def _masked(spec: Spec, p: Pass, layer) -> StepCost:
    return elementwise(p, p.batch * spec.n_heads * pairs(spec, p, layer), 1, grows="n²")


def _softmax_keys(spec: Spec, p: Pass, layer) -> StepCost:
    return elementwise(p, p.batch * spec.n_heads * pairs(spec, p, layer), SOFTMAX_OPS, grows="n²")


def _z(spec: Spec, p: Pass, layer) -> StepCost:
    macs = p.batch * spec.n_heads * pairs(spec, p, layer) * spec.d_head  # weights · v
    return StepCost(kind="matmul", macs=macs, act_bytes=p.tokens * spec.n_heads * spec.d_head * p.itemsize, grows="n²")


def _position_bias(spec: Spec, p: Pass, layer) -> StepCost:
    """T5's relative bias added to every kept score; the bias [heads, q, kv] is looked up once per stack."""
    first = layer == 0
    table = spec.n_heads * p.q_len * p.kv_len
    return StepCost(kind="elementwise", elementwise=p.batch * spec.n_heads * pairs(spec, p, layer),
                    weight_bytes=table * p.itemsize if first else 0, act_bytes=table * p.itemsize if first else 0,
                    grows="n²")


def _cross_q(spec: Spec, p: Pass, layer) -> StepCost:
    return matmul(p, p.tokens, spec.d_model, spec.n_heads * spec.d_head, spec.qkv_bias)


def _cross_kv(spec: Spec, p: Pass, layer) -> StepCost:
    """Keys and values of the encoder output: once per input; a decoding step reads them from its cache."""
    if p.memory_cached:
        return StepCost(kind="matmul")
    return matmul(p, p.batch * p.memory_len, spec.d_model, spec.n_kv_heads * spec.d_head, spec.qkv_bias)


def _cross_pairs(spec: Spec, p: Pass) -> int:
    return p.batch * spec.n_heads * p.q_len * p.memory_len  # every decoder query sees every encoder position


def _cross_scores(spec: Spec, p: Pass, layer) -> StepCost:
    n = _cross_pairs(spec, p)
    return StepCost(kind="matmul", macs=n * spec.d_head, elementwise=n, act_bytes=n * p.itemsize, grows="n·m")


def _cross_elementwise(ops: int) -> Formula:
    def formula(spec: Spec, p: Pass, layer) -> StepCost:
        return elementwise(p, _cross_pairs(spec, p), ops, grows="n·m")
    return formula


def _cross_z(spec: Spec, p: Pass, layer) -> StepCost:
    return StepCost(kind="matmul", macs=_cross_pairs(spec, p) * spec.d_head,
                    act_bytes=p.tokens * spec.n_heads * spec.d_head * p.itemsize, grows="n·m")


def _o(spec: Spec, p: Pass, layer) -> StepCost:
    return matmul(p, p.tokens, spec.n_heads * spec.d_head, spec.d_model, spec.o_bias)


def _residual(spec: Spec, p: Pass, layer) -> StepCost:
    return elementwise(p, p.tokens * spec.d_model, 1)


def _mlp_in(spec: Spec, p: Pass, layer) -> StepCost:
    return matmul(p, p.tokens, spec.d_model, spec.d_ff, spec.mlp_bias)


def _mlp_post(spec: Spec, p: Pass, layer) -> StepCost:
    return elementwise(p, p.tokens * spec.d_ff, activation_ops(spec))


def _mlp_out(spec: Spec, p: Pass, layer) -> StepCost:
    return matmul(p, p.tokens, spec.d_ff, spec.d_model, spec.mlp_bias)


def _resid_post(spec: Spec, p: Pass, layer) -> StepCost:
    elements = p.tokens * spec.d_model
    if spec.norm_placement == "post":  # ln2(h + m)
        return elementwise(p, elements, 1 + norm_ops(spec), norm_weights(spec))
    return elementwise(p, elements, 2 if spec.residual == "parallel" else 1)  # x + attn.out (+ mlp.out)


BLOCK: dict[str, Formula] = {
    "ln1.out": _norm,
    "attn.q": _q,
    "attn.k": _kv,
    "attn.v": _kv,
    "attn.q_rot": _rotary(lambda s: s.n_heads),
    "attn.k_rot": _rotary(lambda s: s.n_kv_heads),
    "attn.q_norm": _qk_norm(lambda s: s.n_heads),
    "attn.k_norm": _qk_norm(lambda s: s.n_kv_heads),
    "attn.scores.raw": _scores,
    "attn.scores": _scores_or_capped,
    "ln1_post.out": _norm,
    "ln2_post.out": _norm,
    "attn.masked_scores": _masked,
    "attn.weights": _softmax_keys,
    "attn.z": _z,
    "attn.position_bias": _position_bias,
    "attn.out": _o,
    "resid_mid": _residual,
    "ln_cross.out": _norm,
    "cross_attn.q": _cross_q,
    "cross_attn.k": _cross_kv,
    "cross_attn.v": _cross_kv,
    "cross_attn.scores": _cross_scores,
    "cross_attn.masked_scores": _cross_elementwise(1),
    "cross_attn.weights": _cross_elementwise(SOFTMAX_OPS),
    "cross_attn.z": _cross_z,
    "cross_attn.out": _o,
    "resid_cross": _residual,
    "ln2.out": _norm,
    "mlp.pre": _mlp_in,
    "mlp.up": _mlp_in,
    "mlp.post": _mlp_post,
    "mlp.out": _mlp_out,
    "resid_post": _resid_post,
}


def block_steps(spec: Spec, layer: int | None = None) -> tuple[str, ...]:
    """The block's steps in the order the engine records them (arch.steps_of), less the masks (not counted).

    layer: which one, where MoE and dense layers differ; None: a MoE spec's blocks all as MoE blocks."""
    if layer is None and spec.moe is not None:
        spec, layer = replace(spec, moe=replace(spec.moe, layers=())), 0
    steps = plan.block_steps(spec, layer or 0, cross=spec.cross_attention)
    return tuple(s.local for s in steps if not s.local.endswith(".mask"))


# ---------- final norm and head ----------

def _logits_or_capped(spec: Spec, p: Pass, layer) -> StepCost:
    """logits, or with final soft-capping (gemma2) tanh(logits.raw / cap) · cap."""
    if spec.logit_softcap is None:
        return _logits(spec, p, layer)
    return elementwise(p, p.tokens * spec.vocab_size, SOFTCAP_OPS)


def _project_out(spec: Spec, p: Pass, layer) -> StepCost:
    return matmul(p, p.tokens, spec.d_model, spec.d_embed, False)


def _logits(spec: Spec, p: Pass, layer) -> StepCost:
    width = spec.d_embed or spec.d_model  # OPT-350m's head reads project_out
    cost = matmul(p, p.tokens, width, spec.vocab_size, spec.head_bias)  # a tied head reads W_E here
    if spec.logit_scale is not None:  # T5's tied head: the decoder output times d_model**-0.5 first
        cost.elementwise += p.tokens * spec.d_model
    return cost


def _probs(spec: Spec, p: Pass, layer) -> StepCost:
    return elementwise(p, p.tokens * spec.vocab_size, SOFTMAX_OPS)


def _head_dense(spec: Spec, p: Pass, layer) -> StepCost:
    return matmul(p, p.tokens, spec.d_model, spec.d_model, True)


def _head_act(spec: Spec, p: Pass, layer) -> StepCost:
    return elementwise(p, p.tokens * spec.d_model, ACTIVATION_OPS[spec.head_activation])


def _head_ln(spec: Spec, p: Pass, layer) -> StepCost:
    return elementwise(p, p.tokens * spec.d_model, NORM_OPS["layernorm"], 2 * spec.d_model)


def _pooled(spec: Spec, p: Pass, layer) -> StepCost:
    """The sum over positions, a division per row (and an L2 normalisation: square, sum, divide)."""
    per_row = 1 + (3 if spec.pooling is not None and spec.pooling.normalize else 0)
    return StepCost(kind="elementwise", elementwise=p.tokens * spec.d_model + p.batch * spec.d_model * per_row,
                    act_bytes=p.batch * spec.d_model * p.itemsize)


FINAL: dict[str, Formula] = {"final_norm.out": _norm, "project_out": _project_out}
HEAD: dict[str, Formula] = {"logits.raw": _logits, "logits": _logits_or_capped, "probs": _probs, "head.dense": _head_dense, "head.act": _head_act,
                            "head.ln.out": _head_ln, "pooled": _pooled}


def final_steps(spec: Spec) -> tuple[str, ...]:
    return tuple(s.local for s in plan.final_steps(spec))


def head_steps(spec: Spec) -> tuple[str, ...]:
    """lm: logits over the vocabulary; mlm: BERT's transform first; none: one pooled vector per row."""
    return tuple(s.local for s in plan.head_steps(spec))
