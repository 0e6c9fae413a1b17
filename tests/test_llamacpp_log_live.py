"""llama.cpp's own tensors: a llama-debug dump of a converted fixture, read by tracer and held to tracer's run.

The GGUF is the fixture folder converted by the sdist's convert_hf_to_gguf.py at f32, run with an f32 KV cache and
flash attention off (tests/llamacpp_harness.dump_tensors). Each printed value is `%12.4f`, so it is within 5e-5 of
the exact float; ggml's and NumPy's float32 sums differ by ~1e-6 relative. Tolerance per value:
5e-5 + 2e-5 * max(1, max |value|) (gelu and the f16 tables are not in these families).
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from llamacpp_harness import REPO, convert, dump_tensors, llama_tokenize, require_binary
from tracer.capture.llamacpp import parse_log
from tracer.capture.llamacpp_compare import compare_log

pytestmark = pytest.mark.live
PROMPT = "Hello world, 春天来了"


@lru_cache(maxsize=None)
def _dump(fixture: str) -> str:
    return dump_tensors(convert(REPO / "fixtures" / fixture, "f32"), PROMPT)


def _tolerance(c) -> float:
    return 5e-5 + 2e-5 * max(1.0, c.max_ref)


# The qwen2 fixture's last layer is `sliding_attention` with a window of 3 (use_sliding_window, max_window_layers
# 2); convert_hf_to_gguf.py writes no sliding window for qwen2, so llama.cpp attends to every earlier token there.
# The dump must show exactly that: all equal up to blocks.2.attn.weights, which is the first step to differ.
@pytest.mark.parametrize("fixture,family,first_divergence", [("models/llama", "llama", None),
                                                             ("models/qwen2", "qwen2", "blocks.2.attn.weights"),
                                                             ("models/qwen3", "qwen3", None)])
def test_llama_debug_dump_matches_tracers_run(fixture, family, first_divergence):
    require_binary("llama-debug")
    import tracer

    log = parse_log(_dump(fixture), fixture)
    assert log.cut_at is None, f"llama-debug's dump is cut at line {log.cut_at}"
    # the ids llama-debug prints after the pass are often lost with the end of its log; llama-tokenize gives them
    ids = log.token_ids or llama_tokenize(convert(REPO / "fixtures" / fixture, "f32"), PROMPT)
    model = tracer.load_model(REPO / "fixtures" / fixture)
    trace = model.run(ids=[ids])
    steps = {name: trace[name] for name in trace.names()}
    comparisons = compare_log(log, steps, family)
    n_layers = model.spec.n_layers
    compared = {c.step for c in comparisons}
    for i in range(n_layers):
        for step in ("ln1.out", "attn.q", "attn.k_rot", "attn.weights", "attn.z", "attn.out", "resid_mid",
                     "mlp.post", "mlp.out", "resid_post"):
            assert f"blocks.{i}.{step}" in compared, f"blocks.{i}.{step} not found in the dump"
    assert {"embed.tokens", "final_norm.out", "logits"} <= compared
    if family == "qwen3":  # its per-head q/k norms (Qcur_normed, Kcur_normed) are compared too
        assert {f"blocks.{i}.attn.{x}_norm" for i in range(n_layers) for x in "qk"} <= compared
    bad = [c for c in comparisons if not (c.max_abs <= _tolerance(c) and (
        c.sum_tracer is None or abs(c.sum_llamacpp - c.sum_tracer) <= 1e-3 * max(1.0, abs(c.sum_tracer))))]
    assert (bad[0].step if bad else None) == first_divergence, [(c.step, c.ggml_name, c.max_abs) for c in bad[:3]]
    if first_divergence:
        assert bad[0].max_abs > 100 * _tolerance(bad[0])  # a real difference, far above the printing
        assert all(c.max_abs <= _tolerance(c) for c in comparisons[: comparisons.index(bad[0])])


def _altered_copy(tmp_path, fixture: str, name: str, change):
    import shutil

    from safetensors.numpy import load_file, save_file

    folder = tmp_path / fixture.rsplit("/", 1)[-1]
    shutil.copytree(REPO / "fixtures" / fixture, folder, ignore=shutil.ignore_patterns("reference*"))
    weights = load_file(folder / "model.safetensors")
    weights[name] = change(weights[name]).astype(weights[name].dtype)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def _requery(w, n_head=4):  # the converter's Q row permutation once more: llama.cpp's RoPE pairs the wrong rows
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("weight,change,first", [
    ("model.layers.0.mlp.down_proj.weight", lambda w: w * 1.1, "blocks.0.mlp.out"),
    ("model.layers.0.self_attn.q_proj.weight", _requery, "blocks.0.attn.q"),
])
def test_tracer_diff_names_the_step_a_broken_conversion_breaks(tmp_path, weight, change, first):
    """A GGUF converted from an altered folder, run by llama-debug, diffed against the faithful folder: the CLI's
    first divergence is the step that reads the altered tensor, and every node before it passes."""
    import json

    from typer.testing import CliRunner

    from tracer.cli.main import app

    require_binary("llama-debug")
    folder = _altered_copy(tmp_path, "models/llama", weight, change)
    log = tmp_path / "debug.log"
    log.write_text(dump_tensors(convert(folder, "f32"), PROMPT))
    result = CliRunner().invoke(app, ["diff", str(REPO / "fixtures/models/llama"), str(log), PROMPT, "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["first_divergence"] == first
    steps = [n["step"] for n in report["nodes"]]
    assert all(n["ok"] for n in report["nodes"][: steps.index(first)])
    faithful = tmp_path / "faithful.log"
    faithful.write_text(_dump("models/llama"))
    assert CliRunner().invoke(app, ["diff", str(REPO / "fixtures/models/llama"), str(faithful), PROMPT]).exit_code == 0


def test_llama_debug_save_logits_against_the_folder(tmp_path):
    """The model-conversion path: llama-debug --save-logits on the f32 conversion, read by tracer diff against the
    folder run on the same prompt: the same tokens, and logits essentially identical (NMSE < 1e-6)."""
    import json

    from typer.testing import CliRunner

    from llamacpp_harness import run_tool
    from tracer.cli.main import app

    gguf = convert(REPO / "fixtures/models/llama", "f32")
    run_tool("llama-debug", ["-m", str(gguf), "-p", PROMPT, "--no-warmup", "-ctk", "f32", "-ctv", "f32", "-fa", "off",
                             "-t", "1", "-c", "128", "--temp", "0", "--save-logits", "--logits-output-dir",
                             str(tmp_path), "--tensor-filter", "result_output"], timeout=300)
    saved = tmp_path / f"llamacpp-{gguf.stem}.bin"
    result = CliRunner().invoke(app, ["diff", str(REPO / "fixtures/models/llama"), str(saved), PROMPT, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["nmse"] < 1e-6 and out["top1_ref"] == out["top1_mine"], out


def test_a_llama_eval_callback_log_is_read_the_same_way(tmp_path):
    """llama-eval-callback prints through the same callback (common_debug_cb_eval); its logger often loses the
    end of the output, which tracer diff says and compares what came before."""
    import json

    from typer.testing import CliRunner

    from tracer.cli.main import app

    require_binary("llama-eval-callback")
    log = tmp_path / "eval-callback.log"
    log.write_text(dump_tensors(convert(REPO / "fixtures/models/llama", "f32"), PROMPT, tool="llama-eval-callback"))
    result = CliRunner().invoke(app, ["diff", str(REPO / "fixtures/models/llama"), str(log), PROMPT, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["verdict"] == "match" and report["compared"] >= 10
    assert {"embed.tokens", "blocks.0.attn.weights"} <= {n["step"] for n in report["nodes"]}
