"""Reading llama.cpp tensor dumps (llama-eval-callback / llama-debug) and lining tracer arrays up with them.

The dumps here are written line by line as common/debug.cpp's common_debug_print_tensor prints (the llama.cpp
tree of the llama-cpp-python 0.3.36 sdist): header, `[` per ne3 and ne2 block, one row of `%12.4f` values per ne1,
`   ..., ` where an axis longer than 6 is cut to its first and last 3, `sum = %f`. The values are chosen here, so
what the reader returns is checked against numbers known independently of it. A dump from the real tool is held
to tracer's run in tests/test_llamacpp_log_live.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tracer.capture.llamacpp import parse_log, printed_indices
from tracer.capture.llamacpp_compare import as_ggml, compare_log
from tracer.names.ggml import ggml_step, rope_permutation

I1, I2, I3 = "    ", "        ", "            "


def _row(values, n=3) -> str:
    parts = []
    for k, v in enumerate(values):
        if k == n and len(values) > 2 * n:
            parts.append("   ..., ")
            continue
        if n < k < len(values) - n and len(values) > 2 * n:
            continue
        parts.append(f"{v:12.4f}" + (", " if k < len(values) - 1 else ""))
    return I3 + "[" + "".join(parts) + "  ],"


def _dump(name, op, ne, src0, src1, array) -> list[str]:
    """array in NumPy order [ne3, ne2, ne1, ne0]."""
    ne_s = ", ".join(map(str, ne))
    head = (f"common_debug_cb_eval: {name:>24} = (f32) {op:>10}({src0[0]}{{{', '.join(map(str, src0[1]))}}}, "
            f"{src1[0]}{{{', '.join(map(str, src1[1]))}}}}}) = {{{ne_s}}}")
    lines = [head]
    for a3 in array:
        lines.append(I1 + "[")
        for i2, a2 in enumerate(a3):
            if 3 <= i2 < len(a3) - 3 and len(a3) > 6:
                if i2 == 3:
                    lines.append(I2 + "..., ")
                continue
            lines.append(I2 + "[")
            for i1, a1 in enumerate(a2):
                if 3 <= i1 < len(a2) - 3 and len(a2) > 6:
                    if i1 == 3:
                        lines.append(I3 + "..., ")
                    continue
                lines.append(_row(list(a1)))
            lines.append(I2 + "],")
        lines.append(I1 + "]")
        lines.append(I1 + f"sum = {float(array.sum()):f}")
    return lines


SMALL = np.array([0.1, -0.2, 0.3, 0.4, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0]).reshape(1, 1, 2, 5)
WIDE = np.arange(1 * 2 * 3 * 8, dtype=np.float64).reshape(1, 2, 3, 8) / 8 - 1.5  # ne = {8, 3, 2, 1}


def _log_text() -> str:
    lines = ["0.00.123.456 I llama_context: n_ctx = 128", "Token ids (3):", "<s>(0) Hello(12) Ġworld(34) ", ""]
    lines += _dump("attn_norm-0", "MUL", (5, 2, 1, 1), ("norm-0", (5, 2, 1, 1)), ("blk.0.attn_norm.weight", (5, 1, 1, 1)), SMALL)
    lines += ["common_debug_cb_eval:      blk.0.ffn_down.weight = (q8_0)   GET_ROWS(x{5, 2, 1, 1}, }) = {5, 2, 1, 1}"]
    lines += _dump("Qcur-0 (reshaped)", "RESHAPE", (8, 3, 2, 1), ("Qcur-0", (24, 2, 1, 1)), ("", (0,)), WIDE)
    return "\n".join(lines) + "\n"


def test_values_shapes_sources_and_sum_are_read_in_numpy_order():
    log = parse_log(_log_text())
    assert [t.name for t in log.tensors] == ["attn_norm-0", "blk.0.ffn_down.weight", "Qcur-0 (reshaped)"]
    t = log.tensors[0]
    assert t.shape == (1, 1, 2, 5) and t.op == "MUL" and t.dtype == "f32" and t.layer == 0 and t.base == "attn_norm"
    assert t.sources == (("norm-0", (1, 1, 2, 5)), ("blk.0.attn_norm.weight", (1, 1, 1, 5)))
    np.testing.assert_allclose(t.values, SMALL, atol=5e-5)
    assert abs(t.sum - 16.1) < 1e-6 and t.complete
    assert log.token_ids == [0, 12, 34] and log.cut_at is None


def test_long_axes_keep_their_first_and_last_three_with_their_indices():
    t = parse_log(_log_text()).tensors[2]
    assert t.shape == (1, 2, 3, 8) and t.index == ((0,), (0, 1), (0, 1, 2), (0, 1, 2, 5, 6, 7))
    np.testing.assert_allclose(t.values, WIDE[np.ix_(*t.index)], atol=5e-5)
    assert not t.complete
    assert printed_indices(7) == (0, 1, 2, 4, 5, 6) and printed_indices(6) == tuple(range(6))


def test_a_quantized_tensor_has_a_header_only():
    t = parse_log(_log_text()).tensors[1]
    assert t.dtype == "q8_0" and t.values is None and t.sum is None


def test_a_log_cut_off_mid_tensor_keeps_what_was_complete_and_says_where():
    text = _log_text()
    head = text.index("Qcur-0 (reshaped)")
    cut = text[: text.index("\n" + I3 + "[", text.index("\n" + I3 + "[", head) + 1)]  # after its first row
    log = parse_log(cut)
    assert [t.name for t in log.tensors] == ["attn_norm-0", "blk.0.ffn_down.weight"]
    assert log.cut_at == cut.splitlines().index(next(ln for ln in cut.splitlines() if "Qcur-0" in ln)) + 1


def test_eval_callback_token_lines():
    text = "number of input tokens = 3\n  1\n  15043\n  3186\ncommon_debug_cb_eval: ..."
    assert parse_log(text).token_ids == [1, 15043, 3186]


def test_rope_permutation_undoes_the_converters_row_order():
    # convert_hf_to_gguf's permute: w.reshape(n_head, 2, d/2, cols).swapaxes(1, 2) -> ggml row 2i+s is HF row s*d/2+i
    d = 8
    hf_rows = np.arange(d)
    ggml_rows = hf_rows.reshape(1, 2, d // 2).swapaxes(1, 2).reshape(d)
    assert rope_permutation(d) == list(ggml_rows)


def test_tracer_arrays_line_up_with_ggml_layouts():
    q = np.arange(1 * 2 * 3 * 4, dtype=np.float64).reshape(1, 2, 3, 4)  # [batch, heads, pos, d_head]
    heads = as_ggml(q, "heads")
    assert heads.shape == (1, 3, 2, 4) and heads[0, 2, 1, 3] == q[0, 1, 2, 3]
    merged = as_ggml(q, "merged")
    assert merged.shape == (1, 1, 3, 8) and merged[0, 0, 2, 4 + 3] == q[0, 1, 2, 3]
    assert as_ggml(q, "heads", permute=True)[0, 0, 0, :].tolist() == [q[0, 0, 0, j] for j in (0, 2, 1, 3)]
    assert ggml_step("llama", "Qcur", "ROPE", 1) == ("blocks.1.attn.q_rot", "heads")
    assert ggml_step("llama", "norm", "RMS_NORM", 1) is None and ggml_step("bert", "Qcur", "ROPE", 1) is None


def test_compare_uses_the_last_rows_when_llama_cpp_kept_only_the_output_rows():
    ref = np.array([[[1.0, 2.0, 3.0, 4.0, 5.0], [0.1, -0.2, 0.3, 0.4, 0.5], [1.0, 2.0, 3.0, 4.0, 5.0]]])
    log = parse_log("\n".join(_dump("ffn_inp-1", "ADD", (5, 1, 1, 1), ("attn_out-1", (5, 1, 1, 1)),
                                    ("x", (5, 1, 1, 1)), SMALL[:, :, 1:])))
    (c,) = compare_log(log, {"blocks.1.resid_mid": ref}, "llama")
    assert c.rows == "last 1" and c.compared == 5 and c.max_abs < 5e-5 and abs(c.sum_tracer - 15.0) < 1e-9
    (bad,) = compare_log(log, {"blocks.1.resid_mid": ref[:, [0, 2, 1]]}, "llama")  # the last row differs
    assert bad.max_abs > 0.5


# A real dump: fixtures/models/llama converted by the sdist's convert_hf_to_gguf.py (--outtype f32), then
#   llama-debug -m llama-f32.gguf -p "Hi 春天" --no-warmup -ctk f32 -ctv f32 -fa off -t 1 -c 128 --temp 0 \
#     --tensor-filter '(embd|attn_norm|Qcur|Kcur|Vcur|kq_soft_max|kqv_out|attn_out|ffn_inp|ffn_norm|ffn_gate|ffn_up|ffn_swiglu|ffn_out|l_out|result_norm|result_output)(-[0-9]+)?$'
# (llama.cpp of llama-cpp-python 0.3.36). Valid for the fixture weights whose sha256 starts as below.
REAL_LOG = Path(__file__).parent / "data/llamacpp/llama-debug-llama-f32.log"
LLAMA_WEIGHTS_SHA256 = "6361fdb78e7f225d"


def test_a_real_llama_debug_dump_is_read_and_matches_tracers_run():
    """Tolerance per value 5e-5 (the %12.4f printing) + 2e-5 * max(1, max |value|) (float32 order of sums)."""
    import hashlib

    import tracer

    folder = Path(__file__).resolve().parents[1] / "fixtures/models/llama"
    sha = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    assert sha.startswith(LLAMA_WEIGHTS_SHA256), "the llama fixture changed: regenerate the dump (command above)"
    log = parse_log(REAL_LOG.read_text(encoding="utf-8", errors="replace"), REAL_LOG.name)
    assert log.cut_at is None and log.token_ids[0] == 0 and len(log.token_ids) == 7
    model = tracer.load_model(folder)
    assert [t.id for t in model.tokenizer.encode("Hi 春天")] == log.token_ids
    trace = model.run(ids=[log.token_ids])
    comparisons = compare_log(log, {n: trace[n] for n in trace.names()}, "llama")
    # 41 printed: per block attn_norm, Qcur x3 (MUL_MAT, RESHAPE, ROPE), Kcur x3, Vcur x2, kq_soft_max, kqv_out,
    # attn_out, ffn_inp, ffn_norm, ffn_gate, ffn_up, ffn_swiglu, ffn_out, l_out (19), twice, plus embd, result_norm,
    # result_output; all but the three flat q/k/v matmuls per block name a step: 2 * 16 + 3
    assert len(log.tensors) == 41 and len(comparisons) == 35
    bad = [(c.step, c.max_abs) for c in comparisons if not c.max_abs <= 5e-5 + 2e-5 * max(1.0, c.max_ref)]
    assert not bad, bad
    last = {c.step: c.rows for c in comparisons if c.step.startswith("blocks.1.")}
    assert last["blocks.1.resid_mid"] == "last 1" and last["blocks.1.attn.z"] == "all"
    wrong = compare_log(log, {n: trace[n] * (1.01 if n == "blocks.1.mlp.out" else 1) for n in trace.names()}, "llama")
    assert [c.step for c in wrong if c.max_abs > 5e-5 + 2e-5 * max(1.0, c.max_ref)][0] == "blocks.1.mlp.out"
