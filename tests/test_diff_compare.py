"""Step matching, verdicts, reason classes and the error profile, on toy traces whose values are known."""

import math
from dataclasses import replace

import numpy as np
import pytest
from diff_toy import toy_trace, toy_weights

from tracer.diff import diff_traces, report_json
from tracer.diff.compare import compare, execution_order
from tracer.trace import Trace

IDS = [[1, 5, 7, 3, 9]]


def _with(trace: Trace, name: str, array: np.ndarray) -> Trace:
    """A copy of `trace` with one step's tensor replaced (statistics left alone: compare reads arrays)."""
    steps = []
    for s in trace.steps:
        if s.name == name:
            s = replace(s, array=array, shape=tuple(array.shape), dtype=str(array.dtype), derived=None, source=None)
        steps.append(s)
    return Trace(steps, dict(trace.meta))


def test_identical_traces_match_everywhere():
    t = toy_trace(IDS)
    report = diff_traces(t, toy_trace(IDS))
    assert report.first_divergence is None
    assert {s.status for s in report.steps} == {"pass"}
    assert all(s.metrics.get("max_abs", 0) == 0 for s in report.steps)
    assert report_json(report)["first_divergence"] is None


def test_perturbed_mlp_weight_diverges_first_at_that_mlp_output():
    w = toy_weights()
    w["1.W_out"] = w["1.W_out"] + np.float32(0.05)
    report = diff_traces(toy_trace(IDS), toy_trace(IDS, w))
    first = report.first_divergence
    assert first is not None and first.name == "blocks.1.mlp.out" and first.reason == "numeric"
    before = report.steps[: report.steps.index(first)]
    assert before and all(s.status == "pass" for s in before)
    assert first.growth_db == math.inf  # its input (mlp.post) matched exactly: the error starts here
    profile = {b.block: b for b in report.blocks}
    assert profile[0].gain_db == 0.0 and profile[0].first_failure is None
    assert profile[1].first_failure == "blocks.1.mlp.out" and profile[1].introduced


def test_a_small_error_is_carried_not_introduced_downstream():
    w = toy_weights()
    w["0.W_v"] = w["0.W_v"] * np.float32(1.01)
    report = diff_traces(toy_trace(IDS), toy_trace(IDS, w))
    assert report.first_divergence.name == "blocks.0.attn.v"
    growth = {s.name: s.growth_db for s in report.steps}
    assert growth["blocks.0.attn.v"] == math.inf
    # block 1 receives the error; its own steps change it by far less than the jump from exact to wrong
    assert abs({b.block: b for b in report.blocks}[1].gain_db) < 20


def test_tolerance_decides_pass_or_fail():
    t = toy_trace(IDS)
    nudged = _with(t, "embed.out", t["embed.out"] * np.float32(1 + 5e-4))
    assert diff_traces(t, nudged).first_divergence is None  # within rtol 1e-3
    assert diff_traces(t, nudged, rtol=1e-5, atol=0).first_divergence.name == "embed.out"


def test_nan_injected_at_a_step_is_named_as_the_reason():
    t = toy_trace(IDS)
    broken = t["blocks.0.attn.z"].copy()
    broken[0, 1, 2, 3] = np.nan
    report = diff_traces(t, _with(t, "blocks.0.attn.z", broken))
    assert report.first_divergence.name == "blocks.0.attn.z"
    assert report.first_divergence.reason == "nan/inf"
    assert "heads=1" in report.first_divergence.detail  # where, in the step's own axis names


def test_shared_minus_infinity_in_masked_scores_is_not_a_difference():
    t = toy_trace(IDS)
    assert np.isneginf(t["blocks.0.attn.masked_scores"]).any()
    report = diff_traces(t, toy_trace(IDS))
    assert next(s for s in report.steps if s.name == "blocks.0.attn.masked_scores").status == "pass"


def test_dtype_minimum_counts_as_blocked_like_minus_infinity():
    t = toy_trace(IDS)
    hf_style = t["blocks.0.attn.masked_scores"].copy()
    hf_style[np.isneginf(hf_style)] = np.finfo(np.float32).min
    report = diff_traces(t, _with(t, "blocks.0.attn.masked_scores", hf_style))
    assert report.first_divergence is None


def test_shape_mismatch_names_the_reason_and_suggests_the_permutation():
    t = toy_trace(IDS)
    q = t["blocks.0.attn.q"]
    report = diff_traces(t, _with(t, "blocks.0.attn.q", np.ascontiguousarray(q.transpose(0, 2, 1, 3))))
    first = report.first_divergence
    assert first.name == "blocks.0.attn.q" and first.reason == "shape"
    assert "(0, 2, 1, 3)" in first.detail


def test_dtype_kind_mismatch_is_a_dtype_divergence_but_width_is_not():
    t = toy_trace(IDS)
    as_float = _with(t, "input.ids", t["input.ids"].astype(np.float32))
    assert diff_traces(t, as_float).first_divergence.reason == "dtype"
    wider = _with(t, "embed.out", t["embed.out"].astype(np.float64))
    report = diff_traces(t, wider)
    assert report.first_divergence is None
    assert "float64" in next(s for s in report.steps if s.name == "embed.out").note


def test_token_ids_must_match_exactly_even_within_rtol():
    t = toy_trace(IDS)
    other = toy_trace([[1, 5, 7, 3, 10]])  # 9 -> 10 is within rtol 0.2, but a different token
    report = diff_traces(t, other, rtol=0.2)
    assert report.first_divergence.name == "input.ids"


def test_missing_steps_fail_between_engine_traces_and_are_listed_for_dumps():
    t = toy_trace(IDS)
    fewer = Trace([s for s in t.steps if s.name != "blocks.0.attn.scores"], dict(t.meta))
    strict = diff_traces(t, fewer)
    assert strict.first_divergence.name == "blocks.0.attn.scores" and strict.first_divergence.reason == "missing"
    dump = Trace([s for s in fewer.steps], {"format": "foreign"})
    lenient = diff_traces(t, dump)
    assert lenient.first_divergence is None
    assert report_json(lenient)["missing"] == ["blocks.0.attn.scores"]


def test_extra_steps_are_placed_after_the_step_they_follow():
    assert execution_order(["a", "b", "c"], ["x", "a", "b", "y", "c", "z"]) == ["x", "a", "b", "y", "c", "z"]
    assert execution_order(["a", "b"], ["b", "a"]) == ["a", "b"]


def test_padding_positions_are_not_compared():
    ids, mask = [[1, 5, 7, 0, 0]], [[1, 1, 1, 0, 0]]
    t = toy_trace(ids, mask=mask)
    garbage = t["blocks.0.resid_post"].copy()
    garbage[0, 3:] += 100.0  # what a port computes at a pad position is a convention
    report = diff_traces(t, _with(t, "blocks.0.resid_post", garbage))
    assert report.first_divergence is None
    garbage[0, 2] += 1.0  # a real position
    assert diff_traces(t, _with(t, "blocks.0.resid_post", garbage)).first_divergence.name == "blocks.0.resid_post"


def test_logits_get_kl_top1_and_topk_per_position():
    t = toy_trace(IDS)
    logits = t["logits"].copy()
    top = int(np.argmax(logits[0, 2]))
    logits[0, 2, top] -= 50.0  # knock the favourite down at position 2 only
    report = compare(t, _with(t, "logits", logits))
    d = next(s for s in report.steps if s.name == "logits").distribution
    assert d["positions"] == len(IDS[0])
    flips = [p for p in d["per_position"] if not p["top1_agree"]]
    assert [p["pos"] for p in flips] == [2]
    assert d["top1_agreement"] == pytest.approx(4 / 5)
    assert flips[0]["kl_ref_mine"] > 0 and flips[0]["kl_mine_ref"] > 0
    assert all(p["kl_ref_mine"] == 0 for p in d["per_position"] if p["pos"] != 2)


def test_statistics_only_steps_are_judged_where_statistics_can_prove_a_difference():
    t = toy_trace(IDS)
    stats_only = toy_trace(IDS, keep=("input.*",))
    report = diff_traces(t, stats_only)
    assert report.first_divergence is None
    assert {s.status for s in report.steps if not s.name.startswith("input.")} == {"stats-only"}
    w = toy_weights()
    w["0.W_in"] = w["0.W_in"] * np.float32(3.0)
    shifted = toy_trace(IDS, w, keep=("input.*",))
    assert diff_traces(t, shifted).first_divergence.name == "blocks.0.mlp.pre"


def test_json_has_first_divergence_and_every_step_with_metrics():
    w = toy_weights()
    w["1.W_out"] = w["1.W_out"] + np.float32(0.05)
    out = report_json(diff_traces(toy_trace(IDS), toy_trace(IDS, w)))
    assert out["first_divergence"]["step"] == "blocks.1.mlp.out"
    assert out["first_divergence"]["reason"] == "numeric"
    names = [s["name"] for s in out["steps"]]
    assert names == toy_trace(IDS).names()
    logits = out["steps"][names.index("logits")]
    for key in ("max_abs", "mean_abs", "max_rel", "cosine", "nmse_db"):
        assert isinstance(logits["metrics"][key], float)
    import json

    json.dumps(out, allow_nan=False)  # valid JSON: no NaN or Infinity


def test_step_inputs_follow_the_data_flow():
    from tracer.diff.profile import step_inputs

    order = toy_trace(IDS).names()
    assert step_inputs("blocks.1.ln1.out", order) == ["blocks.0.resid_post"]
    assert step_inputs("blocks.0.attn.z", order) == ["blocks.0.attn.weights", "blocks.0.attn.v"]
    assert step_inputs("blocks.1.resid_post", order) == ["blocks.1.resid_mid", "blocks.1.mlp.out"]
    assert step_inputs("logits", order) == ["final_norm.out"]
    # a dump without masked_scores: attention weights read the scores instead
    assert step_inputs("blocks.0.attn.weights", order, set(order) - {"blocks.0.attn.masked_scores"}) == ["blocks.0.attn.scores"]
    parallel = [n for n in order if not n.endswith("resid_mid")]
    assert step_inputs("blocks.0.resid_post", parallel) == ["embed.out", "blocks.0.mlp.out", "blocks.0.attn.out"]
