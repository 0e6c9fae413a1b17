"""`tracer generate` on the command line: the sections, the JSON, the trace, and one-line errors."""

from __future__ import annotations

import json
import re
import pytest
from typer.testing import CliRunner

from conftest import ENCODERS, model_dir
from tracer.cli.main import app

runner = CliRunner()


def gen(*args, columns: int = 120, code: int = 0, **env):
    result = runner.invoke(app, ["generate", *map(str, args)], env={"COLUMNS": str(columns), **env})
    assert result.exit_code == code, result.output
    return result


def test_screen_sections_and_cache_growth():
    out = gen("春天来", "--max-new-tokens", "4", "--check-cache").stdout
    titles = re.findall(r"^ \d+ · (.+?)\s+─", out, re.M)
    assert titles == ["Prefill", "Decoding, one token per step", "KV cache", "Text"]
    assert "0→4" in out and "4→5" in out and "6→7" in out
    assert "[1,2,4,32]" in out and "[1,2,7,32]" in out, "K cache [batch, kv_heads, past + 1, d_head] grows"
    assert "[1,4,1,7]" in out, "one query row [batch, heads, 1, past + 1]"
    assert "春天来了，" in out.replace(" ", "")
    assert "max |Δ logit|" in out and "✓" in out


def test_batch_shows_padding_blocked_and_narrow_plain_terminal():
    out = gen("春天来", "夏天", "-n", "3", "--check-cache", columns=60, NO_COLOR="1").stdout
    assert "\x1b[" not in out
    assert "1: ·■■■" in out, "row 1's left pad is blocked in the cache"
    assert max(len(line) for line in out.splitlines()) <= 60
    assert "max|Δ|" in out and "…" not in out.split("Decoding")[1].split("KV cache")[0], "the step table fits"


def test_json_and_save_then_diff_two_generations(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    data = json.loads(gen("春天来", "-n", "5", "--json", "--save", a).stdout)
    assert len(data["rows"][0]["new_ids"]) == 5
    gen("春天来", "-n", "5", "--temperature", "2", "--seed", "11", "--save", b)
    same = runner.invoke(app, ["diff", str(a), str(a), "--json"])
    assert same.exit_code == 0 and json.loads(same.stdout)["generation"]["first_step"] is None
    result = runner.invoke(app, ["diff", str(a), str(b), "--json"])
    report = json.loads(result.stdout)
    assert result.exit_code == 1
    g = report["generation"]
    assert g["first_token_step"] is not None, "temperature 2 should change some token within 5 steps"
    t = g["first_token_step"]["t"]
    assert g["first_decode_step"] == t + 1, "the first step fed a different token diverges first"
    assert g["first_step"] == f"decode.{t + 1}.input.ids"
    screen = runner.invoke(app, ["diff", str(a), str(b)], env={"COLUMNS": "120"}).stdout
    assert f"decoding step {t + 1}" in screen and f"tokens part at step {t}" in screen


@pytest.mark.parametrize("args, message", [
    (["-n", "0"], "--max-new-tokens must be at least 1, not 0"),
    (["-n", "-3"], "--max-new-tokens must be at least 1, not -3"),
    (["-n", "200"], "at most 124 new tokens fit"),
    (["--top-p", "0"], "--top-p must be in (0, 1], not 0"),
    (["--top-p", "1.5"], "--top-p must be in (0, 1], not 1.5"),
    (["--top-k", "5", "--temperature", "0"], "--temperature 0 asks for greedy decoding"),
    (["--seed", "3"], "--seed only matters when sampling"),
    (["--temperature", "-1"], "--temperature must be 0 (greedy) or positive"),
    (["--top-k", "0"], "--top-k must be at least 1"),
    (["--keep", "logits"], "give --save FILE too"),
    (["--layer", "7"], "--layer 7 is out of range"),
])
def test_errors_exit_2_with_one_line(args, message):
    result = gen("春天来", *args, code=2)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("hint:")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in result.stderr, result.stderr


def test_length_error_says_how_many_fit_for_a_batch():
    result = gen("--model", model_dir("gpt2"), "--ids", "1,2,3,4,5", "--ids", "6", "-n", "100", code=2)
    m = json.loads((model_dir("gpt2") / "config.json").read_text())
    limit = m["n_positions"]
    assert f"at most {limit - 5} new tokens fit" in result.stderr and f"allows {limit} (n_positions)" in result.stderr
    assert f"holds positions 0..{limit - 1} only, so there is no position {limit}" in result.stderr


@pytest.mark.parametrize("name", ENCODERS)
def test_encoder_only_model_is_refused(name):
    result = gen("--model", model_dir(name), "--ids", "5,6,7", code=2)
    assert "encoder-only model" in result.stderr and len(result.stderr.strip().splitlines()) <= 2


def test_export_html_is_the_page_tracer_report_makes_of_the_saved_trace(tmp_path):
    page, saved, again = tmp_path / "g.html", tmp_path / "g.safetensors", tmp_path / "r.html"
    gen("--model", str(model_dir("llama")), "--ids", "1,2,3", "-n", "3", "--check-cache",
        "--export-html", str(page), "--save", str(saved))
    report = runner.invoke(app, ["report", str(saved), "-o", str(again), "--model", str(model_dir("llama"))])
    assert report.exit_code == 0, report.output
    html = page.read_text(encoding="utf-8")
    assert html == again.read_text(encoding="utf-8")
    assert 'table class="kv"' in html or "table.kv" in html or 'class="kv' in html  # the cache strip


def test_export_html_alone_records_and_a_missing_folder_is_refused_first(tmp_path):
    page = tmp_path / "g.html"
    gen("--model", str(model_dir("llama")), "--ids", "1,2", "-n", "2", "--export-html", str(page))
    assert page.stat().st_size > 10_000 and "decode" in page.read_text(encoding="utf-8")
    r = runner.invoke(app, ["generate", "--model", str(model_dir("llama")), "--ids", "1,2", "-n", "2",
                            "--export-html", str(tmp_path / "nowhere" / "g.html")])
    assert r.exit_code == 2 and "does not exist" in r.output and not (tmp_path / "nowhere").exists()
