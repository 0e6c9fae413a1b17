"""tracer diff --verdict: the rules of llama.cpp, mlx-lm-tests, vLLM and MaxText, each checked against a hand
computation, with a passing and a failing pair; the exit status follows the verdicts when any is given."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from tracer.diff import diff_traces
from tracer.diff.verdicts import (dtype_flags, kl_verdict, layers_verdict, llamacpp_nmse, nmse_band, nmse_verdict,
                                  topk_verdict, verdicts)
from tracer.errors import TracerError
from tracer.trace import Step, Trace, tensor_stats

AXES = {"input.ids": ("batch", "pos"), "input.mask": ("batch", "pos"), "logits": ("batch", "pos", "vocab"),
        "blocks.0.resid_post": ("batch", "pos", "d_model"), "blocks.1.resid_post": ("batch", "pos", "d_model")}


def trace_of(arrays: dict) -> Trace:
    steps = []
    for name, a in arrays.items():
        a = np.asarray(a)
        axes = AXES.get(name) or tuple(f"dim{i}" for i in range(a.ndim))
        steps.append(Step(name, axes, "", None, a.shape, str(a.dtype), tensor_stats(a), a))
    return Trace(steps, {"tracer_version": "test", "source": "test"})


def test_nmse_is_mse_over_the_reference_variance_with_llamacpps_bands():
    ref = np.array([1.0, 2.0, 3.0, 4.0])
    mine = ref + np.array([0.1, -0.1, 0.0, 0.2])
    by_hand = ((0.01 + 0.01 + 0 + 0.04) / 4) / 1.25  # var([1, 2, 3, 4]) = 1.25
    assert llamacpp_nmse(ref, mine) == pytest.approx(by_hand)
    assert [nmse_band(x) for x in (0, 5e-7, 5e-5, 5e-4, 5e-3, 5e-2, 0.5, 2)] == [
        "perfect", "essentially identical", "excellent", "very good", "good", "acceptable", "poor", "very poor"]


def test_the_nmse_verdict_passes_below_1e_2_and_fails_above():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(1, 4, 16))
    good = nmse_verdict(trace_of({"logits": logits}), trace_of({"logits": logits + 0.003 * rng.normal(size=logits.shape)}))
    bad = nmse_verdict(trace_of({"logits": logits}), trace_of({"logits": logits + 0.5 * rng.normal(size=logits.shape)}))
    assert good.passed and good.level == "excellent"
    assert not bad.passed and bad.level in ("acceptable", "poor") and bad.data["nmse"] > 1e-2


def test_the_nmse_verdict_reads_only_real_positions():
    logits = np.ones((1, 3, 4)) * np.arange(4)
    mine = logits.copy()
    mine[0, 2] += 100  # a padding position
    mask = np.array([[1, 1, 0]])
    assert nmse_verdict(trace_of({"input.mask": mask, "logits": logits}), trace_of({"logits": mine})).data["nmse"] == 0


def test_layers_ok_warn_and_diverged_by_max_abs_over_max_ref():
    r0, r1 = np.full((1, 2, 4), 10.0), np.full((1, 2, 4), 10.0)
    warn = layers_verdict(trace_of({"blocks.0.resid_post": r0, "blocks.1.resid_post": r1}),
                          trace_of({"blocks.0.resid_post": r0 + 0.05, "blocks.1.resid_post": r1 + 0.5}))
    assert warn.passed and warn.level == "warn"
    assert [b["ratio"] for b in warn.data["blocks"]] == pytest.approx([0.005, 0.05])
    diverged = layers_verdict(trace_of({"blocks.0.resid_post": r0, "blocks.1.resid_post": r1}),
                              trace_of({"blocks.0.resid_post": r0, "blocks.1.resid_post": r1 + 2.0}))
    assert not diverged.passed and diverged.data["first_diverged"] == 1 and "block 1 DIVERGED" in diverged.summary


def test_topk_at_the_first_different_pick_each_side_in_the_others_topk():
    ref = np.array([[[5.0, 4.0, 3.0, 0.0, -1.0], [0.0, 1.0, 9.0, 3.0, 2.0]]])
    close = ref.copy()
    close[0, 1] = [0.0, 1.0, 3.0, 9.0, 2.5]  # picks 3 where ref picks 2: 3 is ref's 2nd, 2 is mine's 2nd
    v = topk_verdict(trace_of({"logits": ref}), trace_of({"logits": close}), k=2)
    assert v.passed and v.data["first_difference"]["index"] == 1
    far = ref.copy()
    far[0, 1] = [9.0, 1.0, 0.0, 2.0, 3.0]  # picks 0; ref's pick 2 is mine's last
    v = topk_verdict(trace_of({"logits": ref}), trace_of({"logits": far}), k=2)
    assert not v.passed and v.data["first_difference"]["ref_in_mine_topk"] is False
    assert topk_verdict(trace_of({"logits": ref}), trace_of({"logits": ref}), k=1).passed


def test_kl_is_the_largest_per_position_kl_of_ref_against_mine():
    p, q = np.array([0.5, 0.25, 0.25]), np.array([0.25, 0.5, 0.25])
    by_hand = 0.5 * math.log(2) + 0.25 * math.log(0.5)
    ref, mine = np.log(p)[None, None], np.log(q)[None, None]
    v = kl_verdict(trace_of({"logits": ref}), trace_of({"logits": mine}), max_kl=0.2)
    assert v.data["max_kl"] == pytest.approx(by_hand) and v.passed
    assert not kl_verdict(trace_of({"logits": ref}), trace_of({"logits": mine}), max_kl=0.1).passed


def test_unknown_verdicts_and_missing_logits_are_errors():
    t = trace_of({"blocks.0.resid_post": np.zeros((1, 2, 4))})
    report = diff_traces(t, t)
    with pytest.raises(TracerError, match="unknown verdict"):
        verdicts(["nmsee"], t, t, report)
    with pytest.raises(TracerError, match="needs logits"):
        verdicts(["kl"], t, t, report)


def test_a_float64_step_in_a_float32_port_is_flagged():
    ref = trace_of({"logits": np.zeros((1, 2, 3), np.float32), "blocks.0.resid_post": np.zeros((1, 2, 4), np.float32)})
    mine = trace_of({"logits": np.zeros((1, 2, 3), np.float64), "blocks.0.resid_post": np.zeros((1, 2, 4), np.float16)})
    flags = dtype_flags(ref, mine)
    assert [(f["name"], f["promoted"]) for f in flags] == [("logits", True), ("blocks.0.resid_post", False)]


def _diff(*args):
    return subprocess.run([sys.executable, "-m", "tracer.cli.main", "diff", *map(str, args)], capture_output=True, text=True)


def test_the_exit_status_follows_the_verdicts(tmp_path):
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(1, 4, 32)).astype(np.float32)
    ref, noisy = tmp_path / "ref.safetensors", tmp_path / "noisy.safetensors"
    trace_of({"input.ids": np.array([[1, 2, 3, 4]]), "logits": logits}).save(ref)
    trace_of({"input.ids": np.array([[1, 2, 3, 4]]), "logits": logits + np.float32(3e-3)}).save(noisy)
    plain = _diff(ref, noisy)
    assert plain.returncode == 1  # outside atol 1e-4: tracer's own rule fails
    judged = _diff(ref, noisy, "--verdict", "nmse", "--verdict", "kl", "--json")
    assert judged.returncode == 0, judged.stdout[-400:]
    data = json.loads(judged.stdout)
    assert [v["name"] for v in data["verdicts"]] == ["nmse", "kl"] and all(v["passed"] for v in data["verdicts"])
    assert _diff(ref, noisy, "--verdict", "nmse,steps").returncode == 1
