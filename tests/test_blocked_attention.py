"""Attention a block of query rows at a time (when no score-sized step is kept whole), and the head a block of
positions at a time (when neither logits nor probs is kept whole), give the same trace: the same steps in the
same order, the same op text, statistics merged exactly, the same downstream tensors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tracer
from conftest import ENCODERS, FAMILIES, SEQ2SEQ, model_dir
from tracer.engine import attention as attention_module
from tracer.engine import forward as forward_module
from tracer.engine.forward import MaskOverride
from tracer.trace.stats import RunningStats, tensor_stats

QUADRATIC = ("scores.raw", "scores", "masked_scores", "weights")
IDS = [[5, 17, 42, 8, 9, 11, 3, 2, 7, 13, 21], [5, 17, 42, 8]]


HEAD = ("logits.raw", "logits", "probs")


def _not_quadratic(trace, head: bool = False) -> tuple[str, ...]:
    """Every step but the score-sized ones (and the head's [pos, vocab] ones when `head`)."""
    return tuple(s.name for s in trace.steps
                 if not ("attn." in s.name and s.name.endswith(QUADRATIC)) and not (head and s.name in HEAD))


def _assert_same_trace(whole, blocked):
    assert [(s.name, s.shape, s.op, s.axes) for s in whole.steps] == [(s.name, s.shape, s.op, s.axes) for s in blocked.steps]
    for a, b in zip(whole.steps, blocked.steps):
        scale = max(1.0, a.stats["absmax"])
        assert (a.stats["nan"], a.stats["inf"]) == (b.stats["nan"], b.stats["inf"]), a.name
        for key in ("mean", "std", "min", "max"):
            assert abs(a.stats[key] - b.stats[key]) <= 1e-5 * scale, (a.name, key, a.stats[key], b.stats[key])
        if b.kept:
            np.testing.assert_allclose(b.array, a.array, rtol=0, atol=1e-5 * scale, err_msg=a.name)


@pytest.fixture(params=[1, 3])
def small_blocks(monkeypatch, request):
    """Blocks of one or three query rows, and a spy on the score blocks formed."""
    seen = []
    real = attention_module.grouped_scores

    def spy(q, k, scale):
        s = real(q, k, scale)
        seen.append(s.shape[2])
        return s

    monkeypatch.setattr(attention_module, "grouped_scores", spy)
    real_rows = attention_module.query_block_rows

    def rows(rec, a, shape, itemsize):
        whole = real_rows(rec, a, shape, 10**12)  # None when a score step is kept whole, else 1
        return None if whole is None else request.param

    monkeypatch.setattr(attention_module, "query_block_rows", rows)
    real_block_rows = forward_module.block_rows

    def head_rows(rec, names, n_rows, row_bytes, target=None):
        return None if real_block_rows(rec, names, n_rows, 10**12) is None else request.param

    monkeypatch.setattr(forward_module, "block_rows", head_rows)
    return seen


@pytest.mark.parametrize("name", FAMILIES + ("opt-350m",) + ENCODERS)
@pytest.mark.parametrize("pad_side", ["left", "right"])
def test_blocked_attention_matches_whole(name, pad_side, small_blocks):
    m = tracer.load_model(model_dir(name))
    whole = m.run(ids=IDS, keep=("*",), pad_side=pad_side)
    small_blocks.clear()
    head = pad_side == "left"  # the head in blocks too
    blocked = m.run(ids=IDS, keep=_not_quadratic(whole, head), pad_side=pad_side)
    assert small_blocks and max(small_blocks) < len(IDS[0]), "the scores were formed whole"
    assert not any(s.kept for s in blocked.steps if "attn." in s.name and s.name.endswith(QUADRATIC))
    assert all(blocked.step(n).kept != head for n in HEAD if n in blocked)
    _assert_same_trace(whole, blocked)


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_blocked_attention_matches_whole_in_encoder_decoder_models(name, small_blocks):
    m = tracer.load_model(model_dir(name))
    kw = dict(ids=IDS, decoder_ids=[0, 5, 9, 12, 7, 3, 8, 4], pad_side="right")
    whole = m.run(keep=("*",), **kw)
    small_blocks.clear()
    blocked = m.run(keep=_not_quadratic(whole, head=True), **kw)
    assert small_blocks and max(small_blocks) < len(IDS[0])
    _assert_same_trace(whole, blocked)


def test_blocked_attention_with_an_additive_mask_bias(small_blocks):
    m = tracer.load_model(model_dir("llama"))
    n = len(IDS[0])
    keep = np.tril(np.ones((n, n), bool))[None, None]
    keep[..., 3] = False  # a key nobody may see, and a bias that favours the first key
    bias = np.where(keep, 0.0, -1e9).astype(np.float32)
    bias[..., 0] += 0.5
    override = MaskOverride(keep, bias, "test")
    whole = m.run(ids=IDS[:1], keep=("*",), mask_override=override)
    blocked = m.run(ids=IDS[:1], keep=_not_quadratic(whole), mask_override=override)
    _assert_same_trace(whole, blocked)


def test_a_kept_score_step_keeps_attention_whole(small_blocks):
    m = tracer.load_model(model_dir("llama"))
    t = m.run(ids=IDS, keep=("blocks.1.attn.weights",))
    assert t.step("blocks.1.attn.weights").kept
    assert len(IDS[0]) in small_blocks, "the layer whose weights are kept formed its scores whole"


def test_statistics_only_run_never_forms_the_whole_matrix(small_blocks):
    m = tracer.load_model(model_dir("mistral"))  # sliding window layers too
    t = m.run(ids=IDS, keep=())
    assert max(small_blocks) < len(IDS[0])
    assert t.step("blocks.0.attn.weights").stats["max"] <= 1.0
    assert t.step("blocks.0.attn.masked_scores").stats["inf"] > 0


_values = st.one_of(st.floats(-1e6, 1e6, width=32), st.sampled_from([np.nan, np.inf, -np.inf]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_values, min_size=1, max_size=300), st.lists(st.integers(1, 300), max_size=6),
       st.sampled_from([np.float32, np.float64]))
def test_running_statistics_equal_the_whole_tensor(values, cuts, dtype):
    a = np.array(values, dtype=dtype)
    edges = sorted({0, a.size, *(c % (a.size + 1) for c in cuts)})
    running = RunningStats()
    for lo, hi in zip(edges, edges[1:]):
        running.add(a[lo:hi])
    got, want = running.result(), tensor_stats(a)
    scale = max(1.0, want["absmax"])
    assert (got["nan"], got["inf"]) == (want["nan"], want["inf"])
    for key in ("mean", "min", "max", "absmax"):
        assert abs(got[key] - want[key]) <= 1e-6 * scale, key
    assert abs(got["std"] - want["std"]) <= 1e-5 * scale


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e4, 1e4, width=32), min_size=2, max_size=200), st.floats(-1e6, 1e6, width=32))
def test_statistics_match_float64_even_far_from_zero(values, offset):
    a = np.array(values, np.float32) + np.float32(offset)  # a large mean and a small spread: no cancellation
    s, exact = tensor_stats(a), a.astype(np.float64)
    assert abs(s["mean"] - exact.mean()) <= 1e-6 * max(1.0, np.abs(exact).max())
    assert abs(s["std"] - exact.std()) <= 1e-6 * max(1.0, np.abs(exact).max())


def test_boolean_statistics_are_counts():
    m = np.tril(np.ones((5, 5), bool))
    s = tensor_stats(m)
    assert s["mean"] == 15 / 25 and s["min"] == 0.0 and s["max"] == 1.0
    assert abs(s["std"] - np.asarray(m, np.float64).std()) < 1e-15
    assert tensor_stats(np.ones(4, bool))["min"] == 1.0 and tensor_stats(np.zeros(4, bool))["max"] == 0.0


def test_the_run_screen_and_json_say_what_was_computed_in_blocks(monkeypatch):
    import json

    from typer.testing import CliRunner

    from tracer.cli.main import app
    from tracer.engine import row_blocks as blocks

    monkeypatch.setattr(blocks, "BLOCK_BYTES", 64)  # a few rows per block even for the shipped model
    monkeypatch.setattr(forward_module, "HEAD_BLOCK_BYTES", 64)
    runner = CliRunner()
    r = runner.invoke(app, ["run", "春天来了春天来了", "--keep", "embed.out", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert "blocks.*.attn.weights" in data["computed_in_blocks"] and "probs" in data["computed_in_blocks"]
    r = runner.invoke(app, ["run", "春天来了春天来了", "--keep", "embed.out"], env={"NO_COLOR": "1", "COLUMNS": "100"})
    assert "attention a block of query rows at a time" in r.output
    r = runner.invoke(app, ["run", "春天来了春天来了", "--json"])
    assert json.loads(r.stdout)["computed_in_blocks"] == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(_values, min_size=0, max_size=50),
                          st.sampled_from([0.0, -np.inf, 1.5]), st.integers(0, 40)), min_size=1, max_size=6))
def test_running_statistics_with_runs_of_a_constant(parts):
    """add_constant(v, n) counts like n more entries equal to v (the keys a block skipped)."""
    running, whole = RunningStats(), []
    for values, constant, count in parts:
        block = np.array(values, np.float32)
        running.add(block)
        running.add_constant(constant, count)
        whole += [block, np.full(count, constant, np.float32)]
    want, got = tensor_stats(np.concatenate(whole)), running.result()
    scale = max(1.0, want["absmax"])
    assert (got["nan"], got["inf"]) == (want["nan"], want["inf"])
    for key in ("mean", "std", "min", "max"):
        assert abs(got[key] - want[key]) <= 1e-5 * scale, key


def test_a_causal_block_masks_and_mixes_only_the_keys_it_can_see(monkeypatch):
    """The softmax and the mix of a block of rows 0..r cover keys 0..r only (sliding windows: a band)."""
    widths = []
    real = attention_module.softmax

    def spy(x, axis=-1):
        widths.append(x.shape[-1])
        return real(x, axis)

    monkeypatch.setattr(attention_module, "softmax", spy)
    monkeypatch.setattr(attention_module, "query_block_rows",
                        lambda rec, a, shape, itemsize: None if rec.keeps(a + "weights") else 2)
    m = tracer.load_model(model_dir("llama"))
    t = m.run(ids=[list(range(3, 13))], keep=("logits",))
    assert widths[:5] == [2, 4, 6, 8, 10], widths
    whole = m.run(ids=[list(range(3, 13))], keep=("*",))
    np.testing.assert_allclose(t["logits"], whole["logits"], atol=1e-5)
    assert t.step("blocks.0.attn.weights").stats["min"] == 0.0 and t.step("blocks.0.attn.masked_scores").stats["inf"] == 45 * m.spec.n_heads


def _causal(rows: int, r0: int, keys: int) -> np.ndarray:
    return (np.arange(keys)[None, :] <= np.arange(r0, r0 + rows)[:, None])[None, None]  # [1, 1, rows, keys]


@pytest.mark.parametrize("keep, c0, c1, want", [
    (_causal(4, 8, 16), 0, 12, (0, 9)),  # causal rows 8..11: keys 0..8 seen by all
    (_causal(8, 0, 16), 0, 8, None),  # the first rows: key 0 only, under a quarter of 0:8
    (np.ones((1, 1, 4, 16), bool), 0, 16, (0, 16)),  # no mask: every key
    (_causal(4, 8, 16) & (np.arange(16) >= 3), 3, 12, (3, 9)),  # left padding: keys 0..2 blocked
    (_causal(4, 8, 16) & (np.arange(16) != 5), 0, 12, None),  # a hole: not one run
    (np.concatenate([_causal(4, 8, 16), _causal(4, 8, 16) & (np.arange(16) >= 6)]), 0, 12, (6, 9)),  # a padded row
    (np.ones((1, 1, 4, 1), bool), 0, 1, None),  # one value for every key
])
def test_the_keys_every_row_attends(keep, c0, c1, want):
    assert attention_module.attended_by_every_row(keep, c0, c1) == want


def test_scores_and_masked_scores_share_the_scan_of_the_keys_every_row_sees(monkeypatch):
    """In a causal statistics-only run, the keys before a block's first row are scanned once for both steps (their
    masked scores are their scores), and both steps' statistics still equal the whole tensors'."""
    from tracer.trace.recorder import BlockStats

    shared = []
    real = BlockStats.add_shared

    def spy(self, block, other):
        shared.append((self.step.name, other.step.name, block.shape[-1]))
        return real(self, block, other)

    monkeypatch.setattr(BlockStats, "add_shared", spy)
    monkeypatch.setattr(attention_module, "query_block_rows",
                        lambda rec, a, shape, itemsize: None if rec.keeps(a + "weights") else 4)
    m = tracer.load_model(model_dir("llama"))
    ids = [list(range(3, 19))]
    blocked = m.run(ids=ids, keep=("logits",))
    assert ("blocks.0.attn.scores", "blocks.0.attn.masked_scores", 13) in shared  # rows 12..15 all see keys 0..12
    whole = m.run(ids=ids, keep=("*",))
    for name in ("blocks.0.attn.scores", "blocks.0.attn.masked_scores"):
        a, b = whole.step(name).stats, blocked.step(name).stats
        assert (a["nan"], a["inf"]) == (b["nan"], b["inf"]), name
        for key in ("mean", "std", "min", "max"):  # the block's products round their last bits differently
            assert abs(a[key] - b[key]) <= 1e-5 * max(1.0, a["absmax"]), (name, key)
