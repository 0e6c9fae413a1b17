"""llama.cpp's own tensors: a llama-debug dump of a converted fixture, read by tracer and held to tracer's run.

The GGUF is the fixture folder converted by the sdist's convert_hf_to_gguf.py at f32, run with an f32 KV cache and
flash attention off (tests/llamacpp_harness.dump_tensors). Each printed value is `%12.4f`, so it is within 5e-5 of
the exact float; ggml's and NumPy's float32 sums differ by ~1e-6 relative. Tolerance per value:
5e-5 + 2e-5 * max(1, max |value|) (gelu and the f16 tables are not in these families).
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from llamacpp_harness import REPO, convert, dump_tensors, require_binary
from tracer.capture.llamacpp import parse_log
from tracer.capture.llamacpp_compare import compare_log

pytestmark = pytest.mark.live
PROMPT = "Hello world, 春天来了"


@lru_cache(maxsize=None)
def _dump(fixture: str) -> str:
    return dump_tensors(convert(REPO / "fixtures" / fixture, "f32"), PROMPT)


def _tolerance(c) -> float:
    return 5e-5 + 2e-5 * max(1.0, c.max_ref)


@pytest.mark.parametrize("fixture,family", [("models/llama", "llama"), ("models/qwen2", "qwen2")])
def test_llama_debug_dump_matches_tracers_run(fixture, family):
    require_binary("llama-debug")
    import tracer

    log = parse_log(_dump(fixture), fixture)
    assert log.cut_at is None and log.token_ids, "llama-debug's log is complete and names its tokens"
    model = tracer.load_model(REPO / "fixtures" / fixture)
    trace = model.run(ids=[log.token_ids])
    steps = {name: trace[name] for name in trace.names()}
    comparisons = compare_log(log, steps, family)
    n_layers = model.spec.n_layers
    compared = {c.step for c in comparisons}
    for i in range(n_layers):
        for step in ("ln1.out", "attn.q", "attn.k_rot", "attn.weights", "attn.z", "attn.out", "resid_mid",
                     "mlp.post", "mlp.out", "resid_post"):
            assert f"blocks.{i}.{step}" in compared, f"blocks.{i}.{step} not found in the dump"
    assert {"embed.tokens", "final_norm.out", "logits"} <= compared
    bad = [(c.step, c.ggml_name, c.max_abs) for c in comparisons if not c.max_abs <= _tolerance(c)]
    assert not bad, bad
    sums = [(c.step, c.sum_llamacpp, c.sum_tracer) for c in comparisons if c.sum_tracer is not None
            and abs(c.sum_llamacpp - c.sum_tracer) > 1e-3 * max(1.0, abs(c.sum_tracer))]
    assert not sums, sums
