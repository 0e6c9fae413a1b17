"""The HTML report: parsed with html.parser, it has the heatmaps, labels, escaping and size it should."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import model_dir
from html_tree import parse
from tracer.api import load_model
from tracer.cli.main import app
from tracer.cli.default_model import default_model_path
from tracer.html import diff_page, run_page
from tracer.report.collect import MAX_SIDE, add_page_data, shown_positions
from tracer.report import RunOptions, build_report
from tracer.report.options import DEFAULT_SECTIONS

runner = CliRunner()


@pytest.fixture(scope="module")
def shipped():
    return load_model(default_model_path())


def page_for(model, text=None, ids=None, sections=DEFAULT_SECTIONS + ("lens",), **options):
    trace = model.run(text=text, ids=ids)
    vocab = model.tokenizer.describe_id if model.tokenizer else None
    report = build_report(trace, RunOptions(sections=sections, **options), vocab=vocab, model=model)
    report = add_page_data(report, trace, model, vocab)
    page = run_page(report)
    tree, errors = parse(page)
    assert errors == []
    return page, tree, report


def heatmaps(tree, **attrs):
    return [s for s in tree.find_all("svg", cls="heatmap") if all(s.attrs.get(k.replace("_", "-")) == str(v) for k, v in attrs.items())]


def test_every_layer_has_one_heatmap_per_head_with_q_times_k_cells(shipped):
    page, tree, report = page_for(shipped, "春天来")
    spec = report["model"]
    n = len(report["tokens"])
    for layer in range(spec["n_layers"]):
        maps = [s for s in heatmaps(tree, data_layer=layer)]
        assert sorted(int(s.attrs["data-head"]) for s in maps) == list(range(spec["n_heads"]))
        cells = [r for s in maps for r in s.find_all("rect", cls="cell")]
        assert len(cells) == spec["n_heads"] * n * n
        # causal: the cells above the diagonal are blocked, the rest carry the weight in their tooltip
        blocked = [r for r in cells if "blocked" in r.classes()]
        assert len(blocked) == spec["n_heads"] * n * (n - 1) // 2
        assert all(re.search(r": \d\.\d{4}$", r.find_all("title")[0].text()) for r in cells if r not in blocked)


def test_heatmap_tooltips_hold_the_recorded_weights(shipped):
    trace = shipped.run(text="春天来")
    page, tree, report = page_for(shipped, "春天来")
    w = trace["blocks.1.attn.weights"][0, 2]  # head 2: [q, k]
    svg = heatmaps(tree, data_layer=1, data_head=2)[0]
    cells = svg.find_all("rect", cls="cell")
    n = w.shape[0]
    for k, rect in enumerate(cells):
        q, key = divmod(k, n)
        if key <= q:
            assert rect.find_all("title")[0].text().endswith(f": {w[q, key]:.4f}")


def test_token_labels_are_escaped_and_present():
    model = load_model(model_dir("llama"))
    prompt = '<zz a="1">&amp; \'q\''
    page, tree, report = page_for(model, prompt)
    assert "<zz" not in page and "&lt;zz" in page  # never raw markup from the prompt
    assert tree.find_all("zz") == []
    svg = heatmaps(tree, data_layer=0, data_head=0)[0]
    rows = [t.text() for t in svg.find_all("text") if t.attrs.get("text-anchor") == "end"]
    assert rows == [f"{t['pos']} {t['token']}" for t in report["tokens"]]
    assert any(c in "".join(rows) for c in "<&\"'")  # the test exercises the characters that need escaping
    cells = tree.find_all("td", cls="piece")
    assert [c.text() for c in cells[: len(report["tokens"])]] == [t["token"] for t in report["tokens"]]


def test_cjk_tokens_are_real_text_not_padded_cells(shipped):
    page, tree, report = page_for(shipped, "春天来")
    pieces = [c.text() for c in tree.find_all("td", cls="piece")][:4]
    assert pieces == ["<s>", "春", "天", "来"]
    svg = heatmaps(tree, data_layer=0, data_head=0)[0]
    cols = [t.text() for t in svg.find_all("text") if "rotate" in t.attrs.get("transform", "")]
    assert cols == ["0 <s>", "1 春", "2 天", "3 来"]


def test_no_external_urls_or_resources(shipped):
    page, tree, _ = page_for(shipped, "春天来")
    for node in tree.iter():
        for attr in ("src", "href", "xlink:href", "action"):
            value = node.attrs.get(attr, "")
            assert not re.match(r"^\s*(https?:|//|ftp:)", value, re.I), (node.tag, attr, value)
    assert tree.find_all("link") == [] and tree.find_all("img") == [] and tree.find_all("iframe") == []
    assert all("src" not in s.attrs for s in tree.find_all("script"))
    assert "http" not in page and "@import" not in page and "url(" not in page.replace("url(#", "")


def test_shape_flow_blocks_are_collapsible(shipped):
    _, tree, report = page_for(shipped, "春天来")
    blocks = tree.find_all("details", cls="block")
    assert len(blocks) == report["model"]["n_layers"]
    assert [("open" in b.attrs) for b in blocks] == [True] + [False] * (len(blocks) - 1)  # block 0 open, as on screen
    names = [td.attrs["title"] for b in blocks for td in b.find_all("td", cls="mono") if "title" in td.attrs]
    assert "blocks.2.attn.weights" in names and "blocks.0.mlp.out" in names


def test_lens_is_a_layers_by_positions_heatmap(shipped):
    _, tree, report = page_for(shipped, "春天来")
    svg = tree.find_all("svg", data_lens="1")[0]
    rows, cols = report["model"]["n_layers"] + 1, len(report["tokens"])
    assert (svg.attrs["data-rows"], svg.attrs["data-cols"]) == (str(rows), str(cols))
    assert len(svg.find_all("rect", cls="cell")) == rows * cols
    # the last layer's lens is the model's own output: at the last position it gives the top token its probability
    last = report["lens_grid"]["layers"][-1]["cells"][-1]
    assert last["top"]["id"] == report["top_k"][0]["id"]
    assert last["final_prob"] == pytest.approx(report["top_k"][0]["prob"], rel=1e-4)


def test_next_token_bars_and_mask_grid(shipped):
    _, tree, report = page_for(shipped, "春天来")
    bars = tree.find_all("div", cls="fill")
    assert len(bars) == len(report["top_k"])
    widths = [float(re.search(r"width:([\d.]+)%", b.attrs["style"]).group(1)) for b in bars]
    assert widths == sorted(widths, reverse=True)  # scaled to probability (test_html_defects checks the widths)
    keep = [s for s in tree.find_all("svg", cls="heatmap") if s.attrs.get("data-grid") == "keep"][0]
    n = len(report["tokens"])
    assert len(keep.find_all("rect", cls="cell")) == n * n


def long_model(tmp_path):
    """The llama fixture allowed 1024 positions (rotary: no position table to outgrow)."""
    import shutil

    folder = tmp_path / "llama-long"
    shutil.copytree(model_dir("llama"), folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["max_position_embeddings"] = 1024
    (folder / "config.json").write_text(json.dumps(cfg))
    return load_model(folder)


def test_long_prompt_shows_a_window_and_stays_small(tmp_path):
    model = long_model(tmp_path)
    ids = [[int(i) for i in np.random.default_rng(0).integers(5, 380, size=512)]]
    trace = model.run(ids=ids)
    page, tree, report = page_for(model, ids=ids)
    assert len(page.encode()) < 3_000_000
    assert heatmaps(tree, data_layer=1) == []  # a long prompt's heads are drawn by the script, as small multiples
    thumbs = [c for c in tree.find_all("canvas", cls="thumb") if c.attrs.get("data-layer") == "1"]
    assert sorted(int(c.attrs["data-head"]) for c in thumbs) == [0, 1, 2, 3]
    assert "showing 48 of them" in page
    data = json.loads(re.search(r'id="tracer-live">(.*?)</script>', page, re.S).group(1))
    m = next(m for m in data["maps"] if m["layer"] == 1)
    assert m["rows"] == m["cols"] == shown_positions(512, 511) and m["rows"][0] == 0 and m["rows"][-1] == 511
    w16 = np.frombuffer(base64.b64decode(m["w16"]), dtype="<f2").reshape(4, MAX_SIDE, MAX_SIDE)
    ix = np.array(m["rows"])
    want = trace["blocks.1.attn.weights"][0][:, ix][:, :, ix]
    assert np.abs(w16.astype(np.float64) - want).max() < 1e-3  # float16, for the eye (rounded to 6 places first)
    blocked = np.array([c == "1" for c in m["blocked"]]).reshape(MAX_SIDE, MAX_SIDE)
    assert (blocked == (ix[None, :] > ix[:, None])).all()  # causal on the window, in absolute positions


def test_shown_positions_window():
    assert shown_positions(10, 9) == list(range(10))
    shown = shown_positions(512, 511)
    assert shown[:4] == [0, 1, 2, 3] and shown[-1] == 511 and len(shown) == MAX_SIDE
    early = shown_positions(512, 10)
    assert early == list(range(MAX_SIDE))
    mid = shown_positions(512, 200)
    assert 200 in mid and len(mid) == MAX_SIDE and mid == sorted(set(mid))


def test_unknown_and_missing_sections_do_not_break_the_page(shipped):
    trace = shipped.run(text="春天来")
    report = build_report(trace, RunOptions(sections=("model", "tokens")), vocab=shipped.tokenizer.describe_id)
    report["sections"] = ["model", "encoder_attention", "tokens", "attention"]  # a newer section; attention absent
    report["encoder_attention"] = {"layers": [{"note": "<new & shiny>"}]}
    tree, errors = parse(run_page(report))
    assert errors == []
    names = [s.attrs["data-section"] for s in tree.find_all("section")]
    assert names == ["model", "encoder_attention", "tokens"]
    assert "<new & shiny>" in tree.find_all("section", data_section="encoder_attention")[0].text()


def test_diff_page_plots_the_error_profile_with_the_first_divergence(tmp_path):
    page = tmp_path / "d.html"
    result = runner.invoke(app, ["diff", str(model_dir("llama")), str(model_dir("mistral")), "--ids", "1,2,3",
                                 "--export-html", str(page)])
    assert result.exit_code == 1, result.output  # same exit status as without the page
    tree, errors = parse(page.read_text(encoding="utf-8"))
    assert errors == []
    diff = json.loads(runner.invoke(app, ["diff", str(model_dir("llama")), str(model_dir("mistral")), "--ids", "1,2,3",
                                          "--json"]).stdout)
    chart = tree.find_all("svg", cls="chart")[0]
    compared = [s for s in diff["steps"] if s["status"] in ("pass", "fail")]
    assert len(chart.find_all("circle")) == len(compared)
    assert len(chart.find_all("circle", cls="fail")) == diff["counts"]["fail"]
    first = chart.find_all("line", cls="first")
    assert len(first) == 1
    index = [s["name"] for s in diff["steps"]].index(diff["first_divergence"]["step"])
    circles = chart.find_all("circle")
    assert float(first[0].attrs["x1"]) == pytest.approx(float(circles[index].attrs["cx"]), abs=0.2)
    ticks = [t.text() for t in chart.find_all("text") if re.fullmatch(r"1e-?\d+", t.text())]
    assert len(ticks) >= 3  # a log axis spans decades


def test_diff_page_of_a_match_has_no_divergence_mark(tmp_path):
    trace = tmp_path / "t.safetensors"
    runner.invoke(app, ["run", "春天来", "--save", str(trace)])
    page = tmp_path / "d.html"
    result = runner.invoke(app, ["diff", str(trace), str(trace), "--export-html", str(page)])
    assert result.exit_code == 0, result.output
    tree, _ = parse(page.read_text(encoding="utf-8"))
    chart = tree.find_all("svg", cls="chart")[0]
    assert chart.find_all("line", cls="first") == [] and chart.find_all("circle", cls="fail") == []
    assert "MATCH" in tree.find_all("h1")[0].text()


def test_diff_page_direct_from_json_escapes_step_names():
    diff = {"verdict": "diverged", "reference": "<a>", "mine": "b&c", "atol": 1e-4, "rtol": 1e-3,
            "first_divergence": {"step": "x<y", "reason": "numeric", "detail": "d", "block": None},
            "counts": {"pass": 1, "fail": 1}, "notes": [], "blocks": [],
            "steps": [{"name": "ok", "status": "pass", "metrics": {"max_abs": 0.0}, "block": None},
                      {"name": "x<y", "status": "fail", "metrics": {"max_abs": 0.5, "nmse_db": -3.0}, "block": None}]}
    page = diff_page(diff)
    assert "x<y" not in page and "<a>" not in page
    tree, errors = parse(page)
    assert errors == [] and "x<y" in tree.text()


def test_deep_models_keep_the_page_within_the_cell_budget():
    from tracer.report.collect import MAX_CELLS, chosen_layers, side_for

    assert chosen_layers(3, 4 * 16, 2) == [0, 1, 2]
    side = side_for(32)
    assert 16 <= side < MAX_SIDE and 32 * side * side <= MAX_CELLS
    picked = chosen_layers(40, 8 * 48 * 48, 17)
    assert 17 in picked and 1 < len(picked) < 40
    assert len(picked) * 8 * 48 * 48 <= MAX_CELLS
    assert chosen_layers(40, 64 * 48 * 48, 39) == [39]  # one layer over budget: still the one in focus


def test_values_are_tables_with_absolute_indices_and_one_number_format(shipped):
    _, tree, report = page_for(shipped, "春天来", sections=("values",), steps=("embed.out", "logits"))
    tables = tree.find_all("table", cls="values")
    assert len(tables) == 2
    heads = [th.text() for th in tables[1].find_all("thead")[0].find_all("th")]
    assert heads[1:4] == ["0", "1", "2"] and heads[-1] == "1279" and "…" in heads  # vocab elided, indices kept
    for table in tables:
        cells = [td.text() for td in table.find_all("td", cls="num")]
        styles = {("e" in c, len(c.split(".")[1].split("e")[0])) for c in cells}
        assert len(styles) == 1, styles


@pytest.mark.parametrize("family", ["gemma2", "gemma3_text", "t5", "llama"])
def test_the_scale_card_states_the_factor_the_scores_were_multiplied_by(tmp_path, family):
    """The card's factor is checked against the trace: attn.scores (before any soft-cap: .raw) = q·k × factor."""
    page, trace_file = tmp_path / "s.html", tmp_path / "s.safetensors"
    args = ["--ids", "5,7,9", "--decoder-ids", "0,4"] if family == "t5" else ["the cat sat"]
    result = runner.invoke(app, ["run", "--model", str(model_dir(family)), *args, "--save", str(trace_file),
                                 "--export-html", str(page)])
    assert result.exit_code == 0, result.output
    from tracer.trace import Trace

    trace = Trace.load(trace_file)
    p = "decoder." if family == "t5" else ""
    q, k = trace[f"{p}blocks.0.attn.q_rot" if f"{p}blocks.0.attn.q_rot" in trace else f"{p}blocks.0.attn.q"], None
    k = trace[f"{p}blocks.0.attn.k_rot" if f"{p}blocks.0.attn.k_rot" in trace else f"{p}blocks.0.attn.k"]
    scores = trace[f"{p}blocks.0.attn.scores.raw" if f"{p}blocks.0.attn.scores.raw" in trace else f"{p}blocks.0.attn.scores"]
    if f"{p}blocks.0.attn.position_bias" in trace:
        scores = scores - trace[f"{p}blocks.0.attn.position_bias"]
    group = q.shape[1] // k.shape[1]
    dots = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), np.repeat(k, group, axis=1).astype(np.float64))
    factor = float(np.median((scores / dots)[np.abs(dots) > 1e-3]))
    tree, _ = parse(page.read_text(encoding="utf-8"))
    card = next(li.text() for li in tree.find_all("li", cls="explain") if "dot product" in li.text())
    d_head = q.shape[-1]
    if family.startswith("gemma"):
        assert "1/√24" in card and "query_pre_attn_scalar" in card and f"√{d_head}" not in card
    elif family == "t5":
        assert "not scaled" in card and "× 1," in card
    else:
        assert f"√d_head = √{d_head}" in card
    stated = float(re.search(r"× ([0-9.]+)", card).group(1))
    assert stated == pytest.approx(factor, rel=1e-3), (card, factor)
    if family == "gemma2":
        assert "soft-capped" in card  # the scores' tanh cap, after the scale
