"""`tracer report TRACE -o PAGE`: the HTML report of a saved trace."""

from __future__ import annotations

import re

import numpy as np
from typer.testing import CliRunner

from conftest import model_dir
from html_tree import parse
from tracer.cli.main import app
from tracer.trace.trace import write_safetensors

runner = CliRunner()


def saved(tmp_path, *args):
    trace = tmp_path / "t.safetensors"
    result = runner.invoke(app, ["run", *map(str, args), "--save", str(trace), "--only", "tokens"])
    assert result.exit_code == 0, result.output
    return trace


def report(*args):
    return runner.invoke(app, ["report", *map(str, args)])


def sections_of(page):
    tree, errors = parse(page.read_text(encoding="utf-8"))
    assert errors == []
    return tree, [s.attrs["data-section"] for s in tree.find_all("section")]


def test_a_trace_of_the_shipped_model_gets_the_whole_page_with_the_lens(tmp_path):
    trace, page = saved(tmp_path, "春天来"), tmp_path / "t.html"
    result = report(trace, "-o", page)
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stderr and str(page) in result.stderr
    assert result.stderr.count("wrote") == 1, result.stderr  # one confirmation (issue 16: it printed two)
    tree, names = sections_of(page)
    assert names == ["model", "tokens", "steps", "mask", "attention", "top_k", "lens"]
    assert tree.find_all("svg", data_lens="1")
    assert "了" in tree.find_all("section", data_section="top_k")[0].text()  # tokens named by the found tokenizer


def test_another_models_trace_without_model_has_no_lens_and_names_tokens_by_id(tmp_path):
    trace, page = saved(tmp_path, "--model", model_dir("llama"), "--ids", "5,17,42"), tmp_path / "t.html"
    result = report(trace, "-o", page)
    assert result.exit_code == 0, result.output
    tree, names = sections_of(page)
    assert "lens" not in names and "attention" in names
    pieces = [td.text() for td in tree.find_all("section", data_section="top_k")[0].find_all("td", cls="piece")]
    # without a tokenizer a token is named by its id, `id N`: never `<N>`, the notation for a raw byte (issue 16)
    assert pieces and all(re.fullmatch(r"id \d+", p) for p in pieces)


def test_model_option_adds_the_lens_and_is_checked_against_the_trace(tmp_path):
    trace, page = saved(tmp_path, "--model", model_dir("llama"), "Hello"), tmp_path / "t.html"
    result = report(trace, "-o", page, "--model", model_dir("llama"), "--only", "lens,top_k")
    assert result.exit_code == 0, result.output
    _, names = sections_of(page)
    assert names == ["top_k", "lens"]
    wrong = report(trace, "-o", page, "--model", model_dir("gpt2"))
    assert wrong.exit_code == 2 and "not the model this trace was made with" in wrong.output


def test_bad_inputs_are_one_line_errors(tmp_path):
    missing = report(tmp_path / "nope.safetensors", "-o", tmp_path / "p.html")
    assert missing.exit_code == 2 and "no such trace file" in missing.output
    foreign = tmp_path / "foreign.safetensors"
    write_safetensors(foreign, {"x": np.zeros((2, 3), dtype=np.float32)}, {})
    result = report(foreign, "-o", tmp_path / "p.html")
    assert result.exit_code == 2 and "no tracer metadata" in result.output
    assert "Traceback" not in result.output
    trace = saved(tmp_path, "春天来")
    bad_row = report(trace, "-o", tmp_path / "p.html", "--batch-row", "3")
    assert bad_row.exit_code == 2 and "--batch-row 3 is out of range" in bad_row.output
    folder = report(trace, "-o", tmp_path)
    assert folder.exit_code == 2 and "is a folder" in folder.output
