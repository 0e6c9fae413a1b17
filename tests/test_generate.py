"""tracer generate: the cache computes what the whole-sequence pass computes; decoding, stopping and the trace."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import FAMILIES, FAMILY_VARIANTS, ROOT, SEQ2SEQ, model_dir
from tracer import load_model
from tracer.cli.default_model import default_model_path
from tracer.engine.decode import forward_cached, new_cache
from tracer.engine.forward import forward
from tracer.model.generate import CHECK_TOL, GenerateOptions, eos_ids, generate
from tracer.model.keep import generation_keep
from tracer.model.sampling import Sampling, sampling_probs
from tracer.steps import describe
from tracer.trace import Recorder
from tracer.trace.recorder import NullRecorder

PROMPTS = [[3, 4, 5, 6, 7, 8], [9, 10]]  # a left-padded batch of two


@pytest.fixture(scope="module")
def shipped():
    return load_model(default_model_path())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("family", FAMILIES + SEQ2SEQ + FAMILY_VARIANTS)
def test_cached_logits_equal_the_whole_sequence_recomputed(family, dtype):
    """--check-cache on every decoder and encoder-decoder fixture: a left-padded batch, past every sliding
    window (mistral's is 3); T5's relative bias of the new row uses `past`."""
    m = load_model(model_dir(family), dtype=dtype)
    g = generate(m, ids=PROMPTS, options=GenerateOptions(12, ignore_eos=True, check_cache=True))
    worst = g.recompute_max_abs()
    assert worst is not None and worst <= CHECK_TOL[dtype], f"{family} {dtype}: {worst}"
    assert len(g.steps) == 12 and all(len(r.new_ids) == 12 and r.stop == "length" for r in g.rows)
    windows = [m.spec.window(i) for i in range(m.spec.n_layers)]
    if any(windows):
        assert g.steps[-1].cache_after > max(w for w in windows if w), "the test must go past the window"


def test_sliding_window_blocks_old_cache_slots():
    m = load_model(model_dir("mistral"))
    g = generate(m, ids=PROMPTS, options=GenerateOptions(6, ignore_eos=True))
    window = m.spec.window(g.panel_layer)
    assert window == 3
    last = g.steps[-1].panel
    kv = last["k_shape"][2]
    assert last["blocked"][0]["window"] == list(range(kv - window)), "only the newest `window` slots stay visible"
    assert last["blocked"][1]["pad"] == [0, 1, 2, 3], "row 1 is left-padded by 4"
    assert last["scores_shape"] == [2, m.spec.n_heads, 1, kv]


def test_prefill_through_the_cache_is_the_plain_forward_exactly():
    m = load_model(model_dir("llama"))
    b = m.batch(ids=PROMPTS, pad_side="left")
    plain = Recorder(("logits",))
    forward(b.inputs, m.weights, m.spec, plain)
    cache = new_cache(m.spec, 2, 10, np.float32)
    cached = forward_cached(b.inputs, m.weights, m.spec, NullRecorder(), cache)
    np.testing.assert_array_equal(cached, next(s.array for s in plain.steps if s.name == "logits"))
    assert cache.past == 6 and cache.layers[0].length == 6


def test_shipped_model_continues_its_corpus(shipped):
    g = generate(shipped, "春天来", options=GenerateOptions(8))
    corpus = (ROOT / "fixtures" / "corpus" / "seasons.txt").read_text(encoding="utf-8").splitlines()
    text = "春天来" + g.rows[0].text
    assert len(g.rows[0].new_ids) == 8 and g.rows[0].stop == "length"
    assert any(line.startswith(text) for line in corpus), text


def test_shipped_model_check_cache_within_the_scaled_bound(shipped):
    """Its logits reach ~30, where a float32 ulp is 2e-6: the bound scales with max(1, |logit|)."""
    g = generate(shipped, ["春天来", "夏天"], options=GenerateOptions(16, check_cache=True))
    assert g.recompute_max_abs() <= g.check_bound("float32")
    g64 = generate(load_model(default_model_path(), dtype="float64"), "春天来", options=GenerateOptions(8, check_cache=True))
    assert g64.recompute_max_abs() <= 1e-10 * max(1.0, max(s.logit_absmax for s in g64.steps))


def test_each_row_stops_on_its_own_at_eos(shipped):
    g = generate(shipped, ["春天来", "夏天"], options=GenerateOptions(30))
    eos = eos_ids(shipped)
    assert eos == [1]
    for row in g.rows:
        assert row.stop == "eos" and row.new_ids[-1] == 1 and 1 not in row.new_ids[:-1]
    short, long_ = sorted(g.rows, key=lambda r: len(r.new_ids))
    assert len(short.new_ids) < len(long_.new_ids), "the rows need different lengths for this test"
    n = len(short.new_ids)
    row = g.rows.index(short)
    assert all(st.rows[row] is None for st in g.steps[n:]), "a stopped row takes no more steps"
    assert len(g.steps) == len(long_.new_ids)


def test_ignore_eos_and_stop_text(shipped):
    g = generate(shipped, "春天来", options=GenerateOptions(14, ignore_eos=True))
    assert len(g.rows[0].new_ids) == 14 and g.rows[0].stop == "length"
    s = generate(shipped, "春天来", options=GenerateOptions(14, stop=("，",)))
    assert s.rows[0].stop == "stop" and s.rows[0].text.endswith("，") and s.rows[0].text.count("，") == 1


def test_eos_from_generation_config_wins(tmp_path):
    src = model_dir("gpt2")
    for p in src.iterdir():
        if p.name != "generation_config.json":  # written below: a symlink would write through to the fixture
            (tmp_path / p.name).symlink_to(p)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 9]}))
    assert eos_ids(load_model(tmp_path)) == [7, 9]


def test_sampling_is_reproducible_with_a_seed(shipped):
    opts = lambda seed: GenerateOptions(10, Sampling(1.3, None, 0.95, seed), ignore_eos=True)  # noqa: E731
    a, b = (generate(shipped, "春天来", options=opts(7)) for _ in range(2))
    assert a.rows[0].new_ids == b.rows[0].new_ids
    others = {tuple(generate(shipped, "春天来", options=opts(s)).rows[0].new_ids) for s in range(1, 6)}
    assert len(others) > 1, "different seeds should not all give the same tokens"
    greedy = generate(shipped, "春天来", options=GenerateOptions(10, ignore_eos=True)).rows[0].new_ids
    top1 = generate(shipped, "春天来", options=GenerateOptions(10, Sampling(1.0, 1, None, 3), ignore_eos=True)).rows[0].new_ids
    assert top1 == greedy, "top-k 1 is greedy"


def test_sampling_filters():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    p = sampling_probs(logits, Sampling(1.0, 2, None, 0))
    np.testing.assert_allclose(p, [0.625, 0.375, 0, 0])
    p = sampling_probs(logits, Sampling(1.0, None, 0.79, 0))
    np.testing.assert_allclose(p, [0.625, 0.375, 0, 0]), "0.5 + 0.3 reaches 0.79: the third is dropped"
    p = sampling_probs(logits, Sampling(1.0, None, 0.81, 0))
    assert np.count_nonzero(p) == 3
    hot = sampling_probs(logits, Sampling(100.0, None, None, 0))
    assert hot.max() - hot.min() < 0.02, "a high temperature flattens the distribution"


def test_saved_trace_names_and_shapes(tmp_path):
    m = load_model(model_dir("llama"))
    g = generate(m, ids=PROMPTS, options=GenerateOptions(4, ignore_eos=True, record=True))
    names = g.trace.names()
    assert "blocks.0.attn.k_rot" in names and "decode.3.blocks.0.attn.k_rot" in names and "decode.4.logits" not in names
    for s in g.trace.steps:
        doc = describe(s.name)
        assert doc is not None and doc.axes == s.axes, s.name
    kv, h, d = m.spec.n_kv_heads, m.spec.n_heads, m.spec.d_head
    for t in (1, 2, 3):
        past = 6 + t - 1
        assert g.trace[f"decode.{t}.blocks.1.attn.k_rot"].shape == (2, kv, past + 1, d)
        assert g.trace[f"decode.{t}.blocks.1.attn.v"].shape == (2, kv, past + 1, d)
        assert g.trace[f"decode.{t}.blocks.1.attn.scores"].shape == (2, h, 1, past + 1)
        assert g.trace[f"decode.{t}.blocks.1.attn.k"].shape == (2, kv, 1, d), "the new position, before rotary"
    # the cache in step 3 begins with the prefill's rotated keys
    np.testing.assert_array_equal(g.trace["decode.3.blocks.1.attn.k_rot"][:, :, :6], g.trace["blocks.1.attn.k_rot"])
    path = g.trace.save(tmp_path / "g.safetensors")
    from tracer.trace import Trace

    back = Trace.load(path)
    assert back.names() == names and back.meta["generation"]["rows"][0]["new_ids"] == g.rows[0].new_ids


def test_generation_keep_budget():
    spec = load_model(model_dir("llama")).spec
    keep, reduced = generation_keep(spec, 2, 6, 4, 4, 6)
    assert keep == ("*",) and reduced == []
    keep, reduced = generation_keep(spec, 2, 6, 400, 4, 6, budget=200_000)
    assert reduced and reduced[0] in ("blocks.*.attn.k_rot", "blocks.*.attn.v", "blocks.*.attn.scores", "probs", "logits")
    assert "blocks.*.attn.k" not in reduced[:2], "rotary models record only the new position's keys under attn.k"
    assert all(not k.endswith(tuple(reduced)) for k in keep)
    assert any(k.startswith("decode.*.") for k in keep)
    keep, _ = generation_keep(spec, 2, 6, 4, 4, 6, keep=("logits",))
    assert keep == ("logits", "decode.*.logits")


def test_json_is_the_documented_form(shipped):
    g = generate(shipped, ["春天来", "夏天"], options=GenerateOptions(5, check_cache=True))
    text = json.dumps(g.to_json(), ensure_ascii=False, allow_nan=False)
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert list(data) == ["rows", "warnings"] and len(data["rows"]) == 2 and data["warnings"] == []
    for row in data["rows"]:
        assert list(row) == ["prompt_ids", "new_ids", "text", "stop", "steps"]
        assert row["stop"] in ("eos", "length", "stop")
        assert [s["t"] for s in row["steps"]] == list(range(len(row["new_ids"])))
        for s in row["steps"]:
            assert list(s) == ["t", "token_id", "token", "prob", "cache_len", "recompute_max_abs"]
            assert 0 < s["prob"] <= 1
    assert data["rows"][1]["prompt_ids"][0] == 0, "the pad of the shorter prompt is not part of it"
    assert data["rows"][0]["steps"][1]["cache_len"] == data["rows"][0]["steps"][0]["cache_len"] + 1


def test_same_generation_gives_a_byte_identical_trace(tmp_path):
    m = load_model(model_dir("gpt2"))
    paths = []
    for name in ("a", "b"):
        g = generate(m, ids=PROMPTS, options=GenerateOptions(3, ignore_eos=True, record=True))
        paths.append(g.trace.save(tmp_path / f"{name}.safetensors"))
    assert paths[0].read_bytes() == paths[1].read_bytes()


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_encoder_runs_once_and_cross_attention_is_cached(name):
    m = load_model(model_dir(name))
    g = generate(m, ids=PROMPTS, options=GenerateOptions(5, ignore_eos=True, record=True))
    names = g.trace.names()
    assert "encoder.blocks.0.attn.q" in names and not any(n.startswith("decode.1.encoder.") for n in names)
    last = m.spec.n_layers - 1
    np.testing.assert_array_equal(g.trace[f"decode.4.decoder.blocks.{last}.cross_attn.k"],
                                  g.trace[f"decoder.blocks.{last}.cross_attn.k"])
    assert g.trace[f"decode.4.decoder.blocks.{last}.attn.k"].shape[2] == 5, "start token + 4 fed tokens"
    assert g.steps[0].panel["cross_shape"] == [2, m.spec.n_kv_heads, 6, m.spec.d_head]
    for s in g.trace.steps:
        doc = describe(s.name)
        assert doc is not None and doc.axes == s.axes, s.name


def test_key_norm_without_rotary_is_applied_through_the_cache_too():
    """The cached path normed the keys only in rotary models (the uncached one always does): a model with a
    key norm and learned positions cached unnormed keys. No family has both yet: qwen3 with learned positions.
    The decoding step's logits must equal the whole sequence's last row (float32 rounding: 1e-5)."""
    from dataclasses import replace

    from tracer.engine.forward import ForwardInputs
    from tracer.engine.ports import ArrayWeights

    m = load_model(model_dir("qwen3"))
    spec = replace(m.spec, positions="learned", rope=None, rope_local=None)
    assert spec.qk_norm != "none"
    W = ArrayWeights({name: m.weights[name] for name in m.weights})
    W["embed.W_pos"] = np.random.default_rng(0).standard_normal((16, spec.d_model)).astype(np.float32)
    ids = np.array([[5, 17, 42, 7, 9]])
    n = ids.shape[1]

    def rows(a, b):
        return ForwardInputs(ids[:, a:b], np.ones((1, b - a), np.int64), np.arange(a, b)[None])

    whole = Recorder(("logits",))
    forward(rows(0, n), W, spec, whole)
    cache = new_cache(spec, 1, n, np.float32)
    forward_cached(rows(0, n - 1), W, spec, NullRecorder(), cache)
    step = Recorder()
    cached = forward_cached(rows(n - 1, n), W, spec, step, cache)
    np.testing.assert_allclose(cached[:, -1], next(s.array for s in whole.steps if s.name == "logits")[:, -1], rtol=0, atol=1e-5)
    keys = {s.name: s.shape for s in step.steps if s.name.startswith("blocks.0.attn.k")}
    assert keys == {"blocks.0.attn.k": (1, spec.n_kv_heads, 1, spec.d_head),  # the new position, before the norm
                    "blocks.0.attn.k_norm": (1, spec.n_kv_heads, n, spec.d_head)}  # the whole cache
