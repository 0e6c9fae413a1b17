"""`tracer cost` as JSON-ready data: per-step counts, prefill against decoding, KV cache, crossover, growth.

One length n per row of the report. An encoder-decoder model reads an input of n positions and its
decoder is at n: the prefill runs the encoder over n and the decoder over n (teacher-forced, as
`tracer run` does); a decoding step at n has n positions in its self-attention cache and the encoder's
n in its cross-attention cache. An encoder does not generate: it has no decoding step and no cache.
"""

from __future__ import annotations

import re
from typing import Callable

from tracer.arch.spec import Spec
from tracer.cost.counts import ELEMENTWISE, Pass, StepCost
from tracer.cost.params import non_embedding_parameters, parameter_groups
from tracer.cost.routes import pass_costs, route_of
from tracer.model.inputs import stack_limit

DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
SEARCH_LIMIT = 1 << 40  # positions; beyond this a crossover is reported as never


def template(name: str) -> str:
    """blocks.3.attn.q -> blocks.{i}.attn.q (also under encoder. / decoder.)"""
    return re.sub(r"(^|\.)blocks\.\d+\.", r"\1blocks.{i}.", name)


def generates(spec: Spec) -> bool:
    return spec.route != "encoder"


def prefill_pass(spec: Spec, n: int, batch: int, itemsize: int, dense: bool = False) -> Pass:
    return Pass(batch, n, itemsize=itemsize, dense=dense, memory_len=n if spec.cross_attention else 0)


def decode_pass(spec: Spec, n: int, batch: int, itemsize: int) -> Pass:
    """One new position after n cached ones (and the encoder's n, cached, in an encoder-decoder model)."""
    cross = spec.cross_attention
    return Pass(batch, 1, past=n, itemsize=itemsize, memory_len=n if cross else 0, memory_cached=cross)


def kv_cache_bytes(spec: Spec, batch: int, length: int, itemsize: int) -> int:
    """Keys and values of `length` positions for every layer (a windowed layer keeps only its last W),
    plus, with cross-attention, the encoder's `length` positions for every decoder layer."""
    per_position = 2 * spec.n_kv_heads * spec.d_head * itemsize
    kept = sum(min(length, spec.window(i)) if spec.window(i) else length for i in range(spec.n_layers))
    cross = spec.n_layers * length if spec.cross_attention else 0
    return batch * per_position * (kept + cross)


def totals(costs: list[StepCost]) -> dict:
    return {
        "macs": sum(c.macs for c in costs),
        "flops": sum(c.flops for c in costs),
        "matmul_flops": sum(2 * c.macs for c in costs),
        "elementwise": sum(c.elementwise for c in costs),
        "attention_pair_flops": attention_pair_flops(costs),
        "mlp_flops": mlp_flops(costs),
        "weight_bytes": sum(c.weight_bytes for c in costs),
        "act_bytes": sum(c.act_bytes for c in costs),
    }


def attention_pair_flops(costs: list[StepCost]) -> int:
    """The terms that grow with the (query, key) pairs: q·kᵀ, its scale, bias and mask, the softmax, weights·v
    (self-attention's n², cross-attention's n·m)."""
    return sum(c.flops * c.repeat for c in costs if c.grows != "n")


def mlp_flops(costs: list[StepCost]) -> int:
    return sum(c.flops * c.repeat for c in costs if ".mlp." in "." + c.name)


def by_template(costs: list[StepCost]) -> dict[str, dict]:
    """Steps summed over layers, keyed by their name with the block index as {i}, in pass order."""
    rows: dict[str, dict] = {}
    for c in costs:
        r = rows.setdefault(template(c.name), {"step": template(c.name), "kind": c.kind, "grows": c.grows, "stack": c.stack,
                                               "layers": 0, "macs": 0, "flops": 0, "elementwise": 0,
                                               "weight_bytes": 0, "act_bytes": 0})
        r["layers"] += 1
        for key in ("macs", "flops", "elementwise", "weight_bytes", "act_bytes"):
            r[key] += getattr(c, key)
    return {t: rows[t] for t in pass_order([template(c.name) for c in costs])}


def pass_order(names: list[str]) -> list[str]:
    """Distinct names in pass order; a name first met in a later layer goes right after the step before it
    there (qwen2_moe's dense layer: mlp.pre, mlp.up, mlp.post after ln2.out, not after resid_post)."""
    order: list[str] = []
    for k, name in enumerate(names):
        if name not in order:
            order.insert(order.index(names[k - 1]) + 1 if k else 0, name)
    return order


def first_length(overtakes: Callable[[int], bool], limit: int = SEARCH_LIMIT) -> int | None:
    """The smallest n in 1..limit with overtakes(n), for a predicate that stays true once true."""
    if not overtakes(limit):
        return None
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi) // 2
        if overtakes(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def crossovers(spec: Spec) -> dict:
    """Where attention's pair terms overtake the MLP: in a prefill of n positions (kept pairs, and the
    dense square eager code computes), and in one decoding step at position n."""

    def attention_wins(p: Pass) -> bool:  # layers differ only by their window: one of each, weighted
        costs = [c for c in pass_costs(spec, p, one_per_window=True) if c.stack.endswith("blocks")]
        return attention_pair_flops(costs) > mlp_flops(costs)

    return {
        "prefill": first_length(lambda n: attention_wins(prefill_pass(spec, n, 1, 4))),
        "prefill_dense": first_length(lambda n: attention_wins(prefill_pass(spec, n, 1, 4, dense=True))),
        "decode": first_length(lambda n: attention_wins(decode_pass(spec, n, 1, 4))) if generates(spec) else None,
    }


def max_positions(spec: Spec) -> int | None:
    """The longest input tracer runs without --allow-long (a dynamic rope has none; see tracer.model.inputs)."""
    return stack_limit(spec, {}, None).n


def past_limit(spec: Spec) -> str:
    """What happens past max_positions: "refused" (a learned table ends there) or "allow-long" (rotary, relative)."""
    return "refused" if stack_limit(spec, {}, None).table else "allow-long"


def passes_at(spec: Spec, n: int, batch: int, itemsize: int) -> dict:
    """Prefill of n positions; one decoding step at position n with a KV cache of n, and without (the whole
    n + 1 positions again). An encoder has only the first."""
    prefill = totals(pass_costs(spec, prefill_pass(spec, n, batch, itemsize)))
    prefill["new_tokens"] = batch * n
    out = {"position": n, "prefill": prefill, "decode_cached": None, "decode_uncached": None}
    if generates(spec):
        cached = totals(pass_costs(spec, decode_pass(spec, n, batch, itemsize)))
        cached["kv_cache_read_bytes"] = kv_cache_bytes(spec, batch, n + 1, itemsize)  # every kept key and value once
        uncached = totals(pass_costs(spec, Pass(batch, n + 1, itemsize=itemsize,
                                                memory_len=n if spec.cross_attention else 0)))
        cached["new_tokens"] = uncached["new_tokens"] = batch
        out.update(decode_cached=cached, decode_uncached=uncached)
    for t in (out["prefill"], out["decode_cached"], out["decode_uncached"]):
        if t is not None:
            t["bytes_read"] = t["weight_bytes"] + t.get("kv_cache_read_bytes", 0)
            t["flops_per_byte_read"] = t["flops"] / t["bytes_read"] if t["bytes_read"] else None
    return out


def rule_2n(spec: Spec, n: int, itemsize: int) -> dict | None:
    """Prefill FLOPs per token against 2·N_non-embedding: the blocks' matrix products with weights are
    exactly 2·(their weights) per token; attention's pairs and the head come on top; the rest is small.
    Not for an encoder-decoder model, whose tokens each pass through one of its two stacks."""
    if spec.cross_attention:
        return None
    costs = pass_costs(spec, Pass(1, n, itemsize=itemsize))
    total = sum(c.flops for c in costs)
    block_mm = sum(2 * c.macs for c in costs if c.stack == "blocks" and c.grows == "n")
    pair = attention_pair_flops(costs)
    head = sum(c.flops for c in costs if c.stack == "head")
    return {
        "tokens": n,
        "non_embedding_parameters": non_embedding_parameters(spec),
        "two_n": 2 * non_embedding_parameters(spec),
        "block_matmul_flops_per_token": block_mm / n,
        "attention_pair_flops_per_token": pair / n,
        "head_flops_per_token": head / n,
        "other_per_token": (total - block_mm - pair - head) / n,
        "flops_per_token": total / n,
    }


def model_summary(spec: Spec) -> dict:
    windows = [spec.window(i) for i in range(spec.n_layers)]
    return {
        "family": spec.family, "route": spec.route, "d_model": spec.d_model, "n_layers": spec.n_layers,
        "encoder_layers": spec.encoder.n_layers if spec.encoder is not None else None,
        "n_heads": spec.n_heads, "n_kv_heads": spec.n_kv_heads, "d_head": spec.d_head, "d_ff": spec.d_ff,
        "vocab": spec.vocab_size, "mlp": spec.mlp, "activation": spec.activation, "attention": spec.attention_kind,
        "residual": spec.residual, "norm": spec.norm, "positions": spec.positions, "head": spec.head,
        "tied_embeddings": spec.tied_embeddings, "causal": spec.causal, "windows": windows,
        "windowed_layers": sum(1 for w in windows if w), "max_positions": max_positions(spec),
        "past_max_positions": past_limit(spec),
    }


def cost_report(spec: Spec, tokens: list[int], batch: int = 1, dtype: str = "float32") -> dict:
    """Everything `tracer cost` shows, computed from the Spec: the per-step table at tokens[0]."""
    route_of(spec)  # a route not counted yet fails here, before anything is computed
    itemsize = DTYPE_BYTES[dtype]
    n = tokens[0]
    groups = parameter_groups(spec)
    total = sum(groups.values())
    limit = max_positions(spec)
    prefill_steps = by_template(pass_costs(spec, prefill_pass(spec, n, batch, itemsize)))
    decode_steps = by_template(pass_costs(spec, decode_pass(spec, n, batch, itemsize))) if generates(spec) else {}
    steps = []
    for key, row in prefill_steps.items():
        d = decode_steps.get(key)  # None: no decoding (an encoder), or the step does not run (the encoder stack)
        steps.append({**row, "decode_flops": d["flops"] if d else None,
                      "decode_weight_bytes": d["weight_bytes"] if d else None,
                      "decode_act_bytes": d["act_bytes"] if d else None})
    growth = []
    for t in tokens:
        at = passes_at(spec, t, batch, itemsize)
        pre = at["prefill"]
        growth.append({
            "tokens": t, "prefill_flops": pre["flops"], "prefill_flops_per_token": pre["flops"] / (batch * t),
            "attention_share": pre["attention_pair_flops"] / pre["flops"],
            "decode_cached_flops": at["decode_cached"]["flops"] if at["decode_cached"] else None,
            "decode_uncached_flops": at["decode_uncached"]["flops"] if at["decode_uncached"] else None,
            "kv_cache_bytes": kv_cache_bytes(spec, batch, t, itemsize) if generates(spec) else None,
            "beyond_max_positions": limit is not None and t > limit,
        })
    return {
        "model": model_summary(spec),
        "dtype": dtype, "itemsize": itemsize, "batch": batch, "tokens": list(tokens),
        "conventions": {"matmul": "[m, k] @ [k, n] = m·n·k multiply-adds = 2·m·n·k FLOPs",
                        "attention": "pairs the mask keeps (causal; a sliding window caps the keys at W)",
                        "weights_read": "each weight once per pass; a gather reads only the rows it indexes",
                        "elementwise": ELEMENTWISE},
        "parameters": {"groups": [{"group": g, "parameters": p, "share": p / total if total else 0.0,
                                   "bytes": p * itemsize} for g, p in groups.items()],
                       "total": total, "non_embedding": non_embedding_parameters(spec),
                       "tied_head": spec.tied_embeddings and spec.head != "none"},
        "steps": {"tokens": n, "rows": steps},
        "passes": passes_at(spec, n, batch, itemsize),
        "kv_cache": ({"bytes_per_token": kv_cache_bytes(spec, 1, 1, itemsize),
                      "at": [{"tokens": t, "bytes": kv_cache_bytes(spec, batch, t, itemsize)} for t in tokens]}
                     if generates(spec) else None),
        "crossover": crossovers(spec),
        "rule_2n": rule_2n(spec, n, itemsize),
        "growth": growth,
    }
