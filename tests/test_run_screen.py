"""How `tracer run` looks: NO_COLOR, narrow terminals, HTML export, and the shipped model's first screen."""

from __future__ import annotations

import re

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from conftest import model_dir
from tracer.cli.main import app

runner = CliRunner()
ESC = "\x1b["


def invoke(*args, **env):
    result = runner.invoke(app, ["run", *map(str, args)], env={"COLUMNS": "100", **env})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_colour_is_used_on_a_terminal():
    out = invoke("春天来", "--model", model_dir("llama"), FORCE_COLOR="1")
    assert ESC in out  # so the NO_COLOR test below can fail


def test_no_color_output_has_no_escape_sequences():
    out = invoke("春天来", "--model", model_dir("llama"), FORCE_COLOR="1", NO_COLOR="1")
    assert ESC not in out and "\x1b" not in out
    assert "Shape flow" in out


@pytest.mark.parametrize("columns", [60, 80])
def test_narrow_terminal_keeps_every_line_within_the_width(columns):
    out = invoke("春天来", "Hello there", "--batch", "--model", model_dir("llama"), "--lens", COLUMNS=str(columns))
    lines = out.splitlines()
    assert max(cell_len(line) for line in lines) <= columns
    # Tables are wrapped, not cut: every step name is whole, and each top-k row keeps its id and probability.
    for name in ("attn.masked_scores", "final_norm.out", "input.positions"):
        assert re.search(rf"(^|\s){re.escape(name)}(\s|$)", out, re.M), name
    section = out[out.index("Next token") : out.index("Logit lens")].splitlines()
    ranks = [line for line in section if re.match(r"\s*\d+\s{2,}\S+\s+\d+\s+-?\d", line)]
    assert len(ranks) == 10
    assert all(re.search(r"\d\.\d{3}|\de-\d\d", line) for line in ranks)


def test_export_html_writes_a_report_page(tmp_path):
    page = tmp_path / "run.html"
    out = invoke("春天来", "--model", model_dir("llama"), "--export-html", page)
    html = page.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html") and "</html>" in html
    for text in ("shape flow", "next token", "&lt;e6 98&gt;", '<svg class="heatmap'):
        assert text in html, text
    assert "Shape flow" in out  # the screen is still printed


def test_export_html_with_json_keeps_stdout_pure_json(tmp_path):
    import json

    page = tmp_path / "run.html"
    out = invoke("春天来", "--model", model_dir("llama"), "--json", "--export-html", page)
    json.loads(out)
    assert 'data-section="attention"' in page.read_text(encoding="utf-8")


def test_ids_without_a_tokenizer_say_so():
    out = invoke("--model", model_dir("llama"), "--ids", "5,17,42", "--only", "tokens,top_k")
    assert "token ids given directly" in out
    assert re.search(r"^\s*2\s+42\s", out, re.M)


def test_padded_batch_can_show_any_row():
    out = invoke("春天来", "Hello there", "--batch", "--model", model_dir("llama"), "--batch-row", "1", "--only", "tokens,top_k",
                 "--pad-side", "left")
    assert "batch row 1 of 2" in out and "row 0:" in out
    assert "Next token  after position 6" in out  # "Hello there" fills the row: the last real token is the last one


def test_shipped_model_default_screen_fits_about_two_screens():
    from tracer.cli.default_model import default_model_path
    from tracer.errors import TracerError

    try:
        default_model_path()
    except TracerError:
        pytest.skip("default model not built")
    out = invoke("春天来")
    lines = out.splitlines()
    assert len(lines) <= 140, len(lines)
    assert all(cell_len(line) <= 100 for line in lines)
    assert "3 characters -> 4 tokens" in out
