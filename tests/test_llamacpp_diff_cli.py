"""`tracer diff REF LOG`: a llama.cpp tensor dump (the committed llama-debug log of fixtures/models/llama) held to
tracer's run on the log's own token ids, from the command line. Tolerance per value: 5e-5 (the log's %12.4f) +
atol + rtol * max(1, max |tracer|), with tracer diff's atol 1e-4 and rtol 1e-3; sums within 1e-3 relative."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file
from typer.testing import CliRunner

from tracer.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "tests/data/llamacpp/llama-debug-llama-f32.log"
LLAMA = ROOT / "fixtures/models/llama"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [*map(str, args)], env={"COLUMNS": "120", "NO_COLOR": "1"})


def _altered(tmp_path: Path, name: str, change) -> Path:
    folder = tmp_path / "llama-altered"
    shutil.copytree(LLAMA, folder, ignore=shutil.ignore_patterns("reference*"))
    weights = load_file(folder / "model.safetensors")
    weights[name] = change(weights[name]).astype(weights[name].dtype)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_the_folder_run_on_the_logs_own_ids_matches_every_printed_node():
    result = invoke("diff", LLAMA, LOG, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["verdict"] == "match" and report["printed"] == 41 and report["compared"] == 35
    # the three flat q/k/v matmuls per block and embd's ... : 41 printed - 35 compared
    assert len(report["unmapped"]) == 6 and all(re.match(r"[QKV]cur-\d$", n) for n in report["unmapped"])
    rows = {n["step"]: n for n in report["nodes"]}
    assert rows["logits"]["rows"] == "last 1" and rows["blocks.0.attn.weights"]["sum_tracer"] is None  # cache cells
    assert all(n["max_abs"] <= n["tolerance"] for n in report["nodes"])
    assert all(abs(n["tolerance"] - (5e-5 + 1e-4 + 1e-3 * max(1.0, n["max_ref"]))) < 1e-12 for n in report["nodes"])


def test_the_screen_names_what_was_compared_and_the_verdict():
    result = invoke("diff", LLAMA, LOG)
    assert result.exit_code == 0, result.output
    assert "compared: 35 of 41 printed nodes" in result.output and "no divergence" in result.output
    assert re.search(r"logits\s+result_output \(last row\)\s+MUL_MAT", result.output)


def test_a_scaled_down_projection_is_the_first_divergence(tmp_path):
    folder = _altered(tmp_path, "model.layers.1.mlp.down_proj.weight", lambda w: w * 1.05)
    result = invoke("diff", folder, LOG, "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["verdict"] == "diverged" and report["first_divergence"] == "blocks.1.mlp.out"
    before = [n for n in report["nodes"]][: [n["step"] for n in report["nodes"]].index("blocks.1.mlp.out")]
    assert before and all(n["ok"] for n in before)
    screen = invoke("diff", folder, LOG)
    assert "first divergence: blocks.1.mlp.out (llama.cpp ffn_out-1, log line" in screen.output


def test_a_permuted_query_projection_diverges_at_the_query(tmp_path):
    def permute(w):  # the converter's Q row permutation applied once more: ggml's RoPE pairs the wrong rows
        n_head = 4
        return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    folder = _altered(tmp_path, "model.layers.0.self_attn.q_proj.weight", permute)
    report = json.loads(invoke("diff", folder, LOG, "--json").stdout)
    assert report["first_divergence"] == "blocks.0.attn.q"


def test_a_saved_trace_is_a_reference_too(tmp_path):
    from tracer.capture.llamacpp import read_log

    ids = ",".join(map(str, read_log(LOG).token_ids))
    trace = tmp_path / "t.safetensors"
    assert invoke("run", "--model", LLAMA, "--ids", ids, "--keep", "*", "--save", trace).exit_code == 0
    assert invoke("diff", trace, LOG).exit_code == 0


def test_other_tokens_are_said_first_and_exit_1():
    result = invoke("diff", LLAMA, LOG, "a different prompt")
    assert result.exit_code == 1, result.output
    assert result.output.startswith("the inputs differ:") and "first different at position 1" in result.output


def test_a_log_of_a_flash_attention_run_says_how_to_get_the_weights(tmp_path):
    text = LOG.read_text(encoding="utf-8", errors="replace")
    kept = re.sub(r"common_debug_cb_eval:\s+kq_soft_max-\d+ = .*?sum = \S+\n", "", text, flags=re.S)
    assert kept != text
    log = tmp_path / "fa.log"
    log.write_text(kept)
    result = invoke("diff", LLAMA, log)
    assert result.exit_code == 0, result.output
    assert "-fa off" in result.output and "blocks.0.attn.weights" not in result.output


def test_errors_are_one_line(tmp_path):
    for args, fragment in (
        ((ROOT / "fixtures/models/gpt2", LOG), "not yet for gpt2"),
        ((LLAMA, tmp_path / "missing.log", "--names", "llama.cpp"), "no such file"),
    ):
        result = invoke("diff", *args)
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: ") and fragment in result.output.splitlines()[0], result.output
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    result = invoke("diff", LLAMA, empty, "--names", "llama.cpp")
    assert result.exit_code == 2 and "no tensors in this llama.cpp log" in result.output
