"""Regression tests for the page defects of issue 16 ("HTML page"): each asserts the fixed behaviour."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from tracer.numbers import num

from conftest import model_dir
from html_tree import parse
from tracer.api import load_model
from tracer.cli.default_model import default_model_path
from tracer.cli.main import app
from tracer.html import diff_page, run_page
from tracer.html.flow import _stats
from tracer.report import RunOptions, build_report
from tracer.report.collect import add_page_data
from tracer.report.options import DEFAULT_SECTIONS
from tracer.trace import Trace

runner = CliRunner()


@pytest.fixture(scope="module")
def shipped():
    return load_model(default_model_path())


def page_of(model, text, **kw):
    trace = model.run(text=text)
    vocab = model.tokenizer.describe_id
    report = add_page_data(build_report(trace, RunOptions(sections=DEFAULT_SECTIONS, **kw), vocab=vocab, model=model),
                           trace, model, vocab)
    page = run_page(report)
    tree, errors = parse(page)
    assert errors == []
    return page, tree, report, trace


def flow_cell(tree, name):
    td = [t for t in tree.find_all("td", cls="mono") if t.attrs.get("title") == name][0]
    return td.parent.find_all("td")[-1]


def test_expected_minus_inf_of_the_masked_scores_is_not_a_warning(shipped):
    _, tree, _, trace = page_of(shipped, "春天来")
    cell = flow_cell(tree, "blocks.0.attn.masked_scores")
    assert cell.find_all("span", cls="warn") == []
    n_inf = int(trace.step("blocks.0.attn.masked_scores").stats["inf"])
    assert n_inf == 4 * 6 and f"{n_inf} × −inf: the blocked keys" in cell.text()
    # an Inf anywhere else still is one
    assert 'class="warn">3 ±inf' in _stats({"mean": 0.0, "std": 1.0, "min": 0.0, "max": 1.0, "inf": 3, "nan": 0},
                                           {"name": "blocks.0.mlp.out", "dtype": "float32"})


def test_token_ids_get_their_range_not_a_mean_and_std(shipped):
    _, tree, report, _ = page_of(shipped, "春天来")
    text = flow_cell(tree, "input.ids").text()
    ids = [t["id"] for t in report["tokens"]]
    assert "μ" not in text and "σ" not in text and text == f"[{min(ids)}, {max(ids)}]"
    assert "μ" in flow_cell(tree, "embed.out").text()


def test_next_token_bars_are_scaled_to_probability(shipped):
    _, tree, report, _ = page_of(shipped, "春天")
    static = tree.find_all("div", cls="static-bars")[0]
    widths = [float(re.search(r"width:([\d.]+)%", b.attrs["style"]).group(1)) for b in static.find_all("div", cls="fill")]
    probs = [e["prob"] for e in report["top_k"]]
    assert widths == pytest.approx([round(100 * p, 1) for p in probs], abs=0.051)
    assert probs[0] < 0.95 and widths[0] < 95  # the top token is not drawn as a full bar


def test_the_header_shows_a_short_prompt():
    from tracer.html.card import header as page_header

    prompt = "春天来了" * 60  # 240 characters
    tree, _ = parse(page_header({"prompt": prompt, "model": {"name": "m"}, "sections": ["model"]}))
    header = tree.find_all("p", cls="prompt")[0]
    shown = header.find_all("strong")[0].text()
    assert len(shown) == 160 and shown.endswith("…") and "240 characters" in header.text()


def test_special_tokens_show_no_bytes_of_their_names(shipped):
    _, tree, _, _ = page_of(shipped, "春天")
    row = tree.find_all("table", cls="tokens")[0].find_all("tbody")[0].find_all("tr")[0]
    cells = [td.text() for td in row.find_all("td")]
    assert cells[1] == "<s>" and "3c 73 3e" not in " ".join(cells) and "special token" in cells[4]
    assert tree.find_all("table", cls="tokens")[0].find_all("tr")[2].find_all("td")[4].text() == "e6 98 a5"  # 春


def test_report_without_the_model_names_tokens_from_the_trace(tmp_path):
    trace = tmp_path / "t.safetensors"
    assert runner.invoke(app, ["run", "--model", str(model_dir("llama")), "hello", "--save", str(trace)]).exit_code == 0
    page = tmp_path / "p.html"
    result = runner.invoke(app, ["report", str(trace), "-o", str(page)])
    assert result.exit_code == 0, result.output
    assert result.output.count("wrote") == 1  # one confirmation
    tree, _ = parse(page.read_text(encoding="utf-8"))
    meta = Trace.load(trace).meta
    pieces = [c.text() for c in tree.find_all("table", cls="tokens")[0].find_all("td", cls="piece")]
    assert pieces[0] == "<s>" and pieces[1:] == [t["piece"] for t in meta["tokens"][0][1:]]
    assert not any(re.fullmatch(r"<\d+>", p) for p in pieces)
    names = [c.text() for c in tree.find_all("div", cls="static-bars")[0].find_all("td", cls="piece")]
    known = {t["piece"] for t in meta["tokens"][0]}
    assert names and all(n in known or re.fullmatch(r"id \d+", n) for n in names)


def test_report_of_a_generate_trace_shows_the_generation_and_the_cache_strip(tmp_path):
    trace_file = tmp_path / "g.safetensors"
    result = runner.invoke(app, ["generate", "春天", "--max-new-tokens", "3", "--check-cache", "--save", str(trace_file)])
    assert result.exit_code == 0, result.output
    page = tmp_path / "g.html"
    assert runner.invoke(app, ["report", str(trace_file), "-o", str(page)]).exit_code == 0
    tree, errors = parse(page.read_text(encoding="utf-8"))
    assert errors == []
    sec = tree.find_all("section", data_section="generation")[0]
    trace = Trace.load(trace_file)
    gen = trace.meta["generation"]["rows"][0]
    assert gen["text"] in sec.text() and "--check-cache" in sec.text()
    rows = sec.find_all("table", cls="kv")[0].find_all("tbody")[0].find_all("tr")
    assert [int(r.attrs["data-t"]) for r in rows] == [0, 1, 2]
    n_prompt = len(trace.meta["tokens"][0])
    for r in rows:
        t, cache = int(r.attrs["data-t"]), int(r.attrs["data-cache"])
        assert cache == n_prompt + t  # each step adds one column
        cells = [td for td in r.find_all("td") if "empty" not in td.classes()]
        assert len(cells) == cache and sum("prompt" in c.classes() for c in cells) == n_prompt
        w = (trace["blocks.2.attn.weights"][0, :, -1] if t == 0 else trace[f"decode.{t}.blocks.2.attn.weights"][0, :, 0]).mean(0)
        shown = [float(c.find_all("title")[0].text().rsplit(": ", 1)[1]) if c.find_all("title") else
                 float(c.attrs["title"].rsplit(": ", 1)[1]) for c in cells]
        assert np.abs(np.array(shown) - w).max() < 1e-4  # printed to 4 places


def diff_steps():
    return [{"name": "input.ids", "status": "pass", "metrics": {"max_abs": 0.0}, "block": None},
            {"name": "embed.out", "status": "pass", "metrics": {"max_abs": 0.0}, "block": None},
            *[{"name": f"blocks.{b}.{s}", "status": "pass", "metrics": {"max_abs": v, "cosine": 1 - 7.2e-6}, "block": b}
              for b in range(3) for s, v in [("ln1.out", 1e-7), ("attn.mask", 0.0)] + [(f"s{k}", 2e-6) for k in range(17)]]]


def test_the_diff_chart_names_block_0_draws_exact_steps_off_the_gridlines_and_prints_the_cosine_gap():
    steps = diff_steps()
    steps[-1] = dict(steps[-1], status="fail", metrics={"max_abs": 0.5, "cosine": 1 - 7.2e-6})
    diff = {"verdict": "diverged", "reference": "a", "mine": "b", "atol": 1e-4, "rtol": 1e-3, "steps": steps,
            "first_divergence": {"step": steps[-1]["name"], "reason": "numeric", "detail": "d", "block": 2},
            "counts": {"pass": len(steps) - 1, "fail": 1}, "notes": [], "blocks": []}
    tree, errors = parse(diff_page(diff))
    assert errors == []
    chart = tree.find_all("svg", cls="chart")[0]
    labels = [t.text() for t in chart.find_all("text") if "rotate(40)" in t.attrs.get("transform", "")]
    assert labels == ["block 0", "block 1", "block 2"]  # 59 steps: input and embed sit too close to block 0 to label
    grid_y = {float(g.attrs["y1"]) for g in chart.find_all("line", cls="grid") if g.attrs["y1"] == g.attrs["y2"]}
    exact = [c for c in chart.find_all("circle") if "exact" in c.classes()]
    assert len(exact) == 2 + 3 and all(abs(float(c.attrs["cy"]) - y) > 4 for c in exact for y in grid_y)
    page_text = tree.text()
    assert f"cosine 1 − {num(7.2e-06, 2)}" in page_text and not re.search(r"cosine 1(?![ .\d−])", page_text)  # the shared number format
