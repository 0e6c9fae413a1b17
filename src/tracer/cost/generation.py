"""What each pass of a generation costs: the prefill, then every decoding step with its cache, next to the
same new token computed without a cache (the whole sequence again). Pure arithmetic over the Spec."""

from __future__ import annotations

from tracer.arch.spec import Spec
from tracer.cost.counts import Pass
from tracer.cost.routes import pass_costs
from tracer.cost.summary import totals


def step_pass(spec: Spec, batch: int, cache_before: int, cache_after: int, enc_len: int, itemsize: int) -> Pass:
    """The pass that took the cache from `cache_before` to `cache_after` positions (the prefill starts at 0;
    an encoder-decoder prefill also runs the encoder over its `enc_len` positions, later steps find it cached)."""
    memory = enc_len if spec.cross_attention else 0
    return Pass(batch, cache_after - cache_before, cache_before, itemsize, memory_len=memory,
                memory_cached=bool(memory) and cache_before > 0)


def uncached_pass(spec: Spec, batch: int, cache_after: int, enc_len: int, itemsize: int) -> Pass:
    """The same new token without a cache: every position so far (and the encoder) computed again."""
    return Pass(batch, cache_after, 0, itemsize, memory_len=enc_len if spec.cross_attention else 0)


def generation_costs(spec: Spec, steps: list[tuple[int, int, int, float]], batch: int, enc_len: int,
                     itemsize: int) -> list[dict]:
    """Per step (t, cache before, cache after, seconds): FLOPs and attention's pair FLOPs with the cache,
    FLOPs without it, and the measured throughput."""
    out = []
    for t, before, after, seconds in steps:
        cached = totals(pass_costs(spec, step_pass(spec, batch, before, after, enc_len, itemsize)))
        full = totals(pass_costs(spec, uncached_pass(spec, batch, after, enc_len, itemsize)))
        out.append({
            "t": t, "new_positions": after - before, "keys": after, "flops": cached["flops"],
            "attention_pair_flops": cached["attention_pair_flops"], "uncached_flops": full["flops"],
            "seconds": seconds, "gflops_per_s": cached["flops"] / seconds / 1e9 if seconds > 0 else None,
        })
    return out
