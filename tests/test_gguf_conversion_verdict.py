"""`tracer diff MODEL.gguf FOLDER`: each weight judged as quantization error or a structural fault, and one
conversion verdict (llama.cpp's NMSE bands on the logits, or the fault and the first step that reads it), which
gives the exit status of a quantized file. Files built with gguf.GGUFWriter from the fixtures (no llama.cpp)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from gguf import GGMLQuantizationType as Q

from gguf_build import ARCHS, FIXTURES, build_gguf, converted_tensors
from tracer.cli.main import app
from tracer.diff.quantization import (
    coarser, expected_error, judge_tensor, overall, relative_rms, rope_permute, rope_unpermute,
)

runner = CliRunner()
rng = np.random.default_rng(0)


def invoke(*args):
    return runner.invoke(app, [*map(str, args)], env={"COLUMNS": "120", "NO_COLOR": "1"})


def _broken(tmp_path, fixture: str, name: str, change, qtype=Q.F32):
    folder = FIXTURES / fixture
    cfg = json.loads((folder / "config.json").read_text())
    tensors = converted_tensors(folder, cfg, ARCHS[fixture])
    tensors[name] = change(tensors[name])
    return build_gguf(folder, tmp_path / f"{fixture}-broken.gguf", qtype, tensors=tensors)


# ---- one tensor


def test_the_permutation_and_its_inverse_undo_each_other():
    w = rng.standard_normal((32, 8)).astype(np.float32)
    assert np.array_equal(rope_unpermute(rope_permute(w, 4), 4), w) and not np.array_equal(rope_permute(w, 4), w)


@pytest.mark.parametrize("qtype,low,high", [("Q8_0", 3e-3, 8e-3), ("Q4_0", 0.06, 0.11), ("BF16", 5e-4, 3e-3)])
def test_the_expected_error_is_the_requantization_error(qtype, low, high):
    b = rng.standard_normal((16, 256)).astype(np.float32)
    assert low < expected_error(b, qtype) < high
    assert expected_error(b, "F32") == 0.0


def test_a_type_gguf_cannot_quantize_gets_the_bits_per_weight_estimate():
    b = rng.standard_normal((4, 256)).astype(np.float32)
    assert math.isclose(expected_error(b, "Q4_K"), 1.95 * 2 ** -4.5, rel_tol=1e-9)  # 144 bytes per 256 weights
    assert math.isclose(expected_error(b, "Q2_K"), 1.95 * 2 ** -2.625, rel_tol=1e-9)


@pytest.mark.parametrize("fault,make", [
    ("rope-permuted", lambda b: rope_permute(b, 4)),
    ("rope-permuted", lambda b: rope_unpermute(b, 4)),
    ("transposed", lambda b: b.T.copy()),
    ("offset", lambda b: b + 1.0),
    ("scaled", lambda b: b * 0.5),
    ("rows permuted", lambda b: b[rng.permutation(b.shape[0])]),
])
def test_each_fault_is_named_even_under_quantization(fault, make):
    import gguf

    b = rng.standard_normal((32, 32)).astype(np.float32)
    a = gguf.quants.dequantize(gguf.quants.quantize(make(b), Q.Q8_0), Q.Q8_0)
    j = judge_tensor("model.layers.0.self_attn.q_proj.weight", a, b, "Q8_0", (4,))
    assert j.verdict == "structural" and j.fault == fault, j


def test_plain_quantization_error_is_not_a_fault():
    import gguf

    b = rng.standard_normal((32, 64)).astype(np.float32)
    for t in (Q.Q4_0, Q.Q5_1, Q.Q8_0):
        a = gguf.quants.dequantize(gguf.quants.quantize(b, t), t)
        j = judge_tensor("model.layers.0.mlp.up_proj.weight", a, b, t.name, (4,))
        assert j.verdict == "quantization" and math.isclose(j.rel_rms, relative_rms(a, b))


def test_noise_far_beyond_the_type_and_no_structure_is_changed():
    b = rng.standard_normal((32, 64)).astype(np.float32)
    a = b + 0.5 * rng.standard_normal(b.shape).astype(np.float32)
    assert judge_tensor("x.weight", a, b, "Q8_0").verdict == "changed"


def test_the_coarser_type_wins():
    assert coarser("Q4_0", "F32") == "Q4_0" and coarser("BF16", "Q8_0") == "Q8_0" and coarser("F32", "BF16") == "BF16"


def test_overall_reads_a_fault_first_then_the_band():
    from tracer.diff.quantization import QuantJudgement

    q = QuantJudgement("a.weight", "Q8_0", 0.005, 0.005, "quantization")
    f = QuantJudgement("model.layers.0.self_attn.q_proj.weight", "Q8_0", 1.4, 0.005, "structural", "rope-permuted", "4 heads")
    steps = {"model.layers.0.self_attn.q_proj": "blocks.0.attn.q"}.get
    assert overall([q], 5e-4, "very good", steps)["line"].startswith("very good: quantization error, no structural fault")
    assert overall([q], 5e-4, "very good", steps)["passed"]
    assert not overall([q], 0.05, "acceptable", steps)["passed"]
    bad = overall([q, f], 5e-4, "very good", lambda w: steps(w.rsplit(".", 1)[0]))
    assert not bad["passed"] and bad["line"] == ("structural: blocks.0.attn.q (model.layers.0.self_attn.q_proj.weight "
                                                 "rope-permuted 4 heads)")


# ---- from the command line


def test_a_q8_file_is_quantization_error_and_passes(tmp_path):
    path = build_gguf(FIXTURES / "llama", tmp_path / "llama-q8.gguf", Q.Q8_0)
    result = invoke("diff", path, FIXTURES / "llama", "--ids", "0,5,9,17", "--json")
    report = json.loads(result.stdout)
    c = report["conversion"]
    assert c["faults"] == 0 and c["quantized"] == 16 and c["nmse"] < 1e-2 and c["passed"]
    assert result.exit_code == 0, result.output  # the verdict gives the exit status, though steps differ
    assert report["first_divergence"] is not None
    assert {t["quant"]["verdict"] for t in report["weights"]["tensors"] if t.get("quant")} == {"quantization"}
    screen = invoke("diff", path, FIXTURES / "llama", "--ids", "0,5,9,17").output
    assert "✓ CONVERSION  " in screen and "quantization error, no structural fault" in screen
    assert "the models differ" not in screen


def test_an_unpermuted_query_is_structural_at_the_query(tmp_path):
    path = _broken(tmp_path, "llama", "blk.0.attn_q.weight", lambda w: rope_unpermute(w, 4), Q.Q8_0)
    result = invoke("diff", path, FIXTURES / "llama", "--ids", "0,5,9,17", "--json")
    assert result.exit_code == 1, result.output
    c = json.loads(result.stdout)["conversion"]
    assert c["level"] == "structural" and c["step"] == "blocks.0.attn.q"
    assert c["tensor"] == "model.layers.0.self_attn.q_proj.weight" and "rope-permuted" in c["line"]


def test_a_gemma_norm_left_at_plus_one_is_an_offset(tmp_path):
    path = _broken(tmp_path, "gemma", "blk.1.ffn_norm.weight", lambda w: w + 1.0)
    result = invoke("diff", path, FIXTURES / "gemma", "--ids", "0,5,9,17", "--json")
    assert result.exit_code == 1, result.output
    c = json.loads(result.stdout)["conversion"]
    assert c["level"] == "structural" and "offset by +1" in c["line"] and c["step"].startswith("blocks.1.ln2")


def test_a_scaled_down_projection_in_an_f32_file(tmp_path):
    path = _broken(tmp_path, "qwen3", "blk.1.ffn_down.weight", lambda w: w * 1.5)
    result = invoke("diff", path, FIXTURES / "qwen3", "--ids", "0,5,9,17", "--json")
    assert result.exit_code == 1
    c = json.loads(result.stdout)["conversion"]
    assert c["step"] == "blocks.1.mlp.out" and "scaled by 1.5" in c["line"]
