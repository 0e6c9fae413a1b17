"""The live page in headless chromium: the readouts (#row-readout, #dist-readout) against the trace's own numbers.

References are computed here with NumPy in float64 from the tensors stored in the saved trace (attn.scores, the
keep mask, logits), independently of the page's script: the renormalised row is softmax over the kept keys
(tolerance 1e-6), the wrong way sums to 1 minus exactly the weight it dropped, and temperature T gives
softmax(logits / T) over the stored top logits. The article's example is checked against its printed table."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from cdp import Browser
from conftest import model_dir
from html_tree import parse
from pngread import colour_summary
from tracer.cli.main import app
from tracer.trace import Trace

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")]
runner = CliRunner()
TOL = 1e-6


def dump(tmp_path, page, fragment: str = "", name: str = "d") -> tuple[object, list[str]]:
    """The DOM after the page's script ran, and the console/uncaught lines chromium logged."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
           "--disable-background-networking", "--disable-component-update", f"--user-data-dir={tmp_path / ('p-' + name)}",
           "--enable-logging=stderr", "--v=0", "--dump-dom", page.resolve().as_uri() + fragment]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    errors = [line for line in out.stderr.splitlines() if "Uncaught" in line or re.search(r":CONSOLE[:(]", line)]
    dom, _ = parse(out.stdout)
    return dom, errors


def readout(dom, ident: str) -> dict:
    node = [n for n in dom.iter() if n.attrs.get("id") == ident][0]
    return {k[5:]: v for k, v in node.attrs.items() if k.startswith("data-")}


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


# ---------- the article's example: tracer mask --row ... --export-html ----------


@pytest.fixture(scope="module")
def row_page(tmp_path_factory):
    page = tmp_path_factory.mktemp("row") / "row.html"
    result = runner.invoke(app, ["mask", "--row", "1.2,2.0,0.4", "--tokens", "猫,追,球", "--query", "1",
                                 "--export-html", str(page)])
    assert result.exit_code == 0, result.output
    return page


@pytest.mark.parametrize("fragment, expected", [
    ("", [0.3100, 0.6900, 0.0]),  # causal for query 1, as the command prints it
    ("#causal=off", [0.2721, 0.6056, 0.1223]),  # the article's table row
    ("#causal=off&off=2", list(softmax(np.array([1.2, 2.0]))) + [0.0]),
])
def test_the_article_row_opens_as_the_command_computes_it(tmp_path, row_page, fragment, expected):
    dom, errors = dump(tmp_path, row_page, fragment)
    assert errors == []
    r = readout(dom, "row-readout")
    weights = json.loads(r["weights"])
    tol = 5e-5 if fragment != "#causal=off&off=2" else 1e-12  # printed tables are rounded to 4 places
    assert weights == pytest.approx(expected, abs=tol)
    assert (r["layer"], r["head"], r["q"]) == ("0", "0", "1")
    assert json.loads(r["off"]) == ([2] if "off=2" in fragment else [])


def test_the_wrong_way_drops_exactly_the_blocked_weight(tmp_path, row_page):
    r = readout(dump(tmp_path, row_page)[0], "row-readout")
    unmasked = softmax(np.array([1.2, 2.0, 0.4]))
    assert json.loads(r["wrong"]) == pytest.approx([unmasked[0], unmasked[1], 0.0], abs=1e-12)
    assert float(r["wrong-sum"]) == pytest.approx(1 - unmasked[2], abs=1e-12) and float(r["wrong-sum"]) < 1
    assert float(r["dropped"]) == pytest.approx(unmasked[2], abs=1e-12)


def test_clicks_switch_the_mask_and_a_key_and_update_the_fragment(tmp_path, row_page):
    b = Browser(CHROMIUM, tmp_path / "cdp", row_page.resolve().as_uri())
    try:
        b.wait_for("document.documentElement.getAttribute('data-live') === 'ready'")
        weights = lambda: json.loads(b.eval("document.getElementById('row-readout').getAttribute('data-weights')"))  # noqa: E731
        assert weights() == pytest.approx([0.3100, 0.6900, 0], abs=5e-5)
        b.click('#row-panel input[data-part="causal"]')  # the article's toggle
        assert weights() == pytest.approx([0.2721, 0.6056, 0.1223], abs=5e-5)
        b.click('button.key-toggle[data-key="2"]')
        assert weights() == pytest.approx(list(softmax(np.array([1.2, 2.0]))) + [0.0], abs=1e-12)
        assert b.eval("location.hash") == "#layer=0&head=0&q=1&off=2&causal=off"
        b.click('button.key-toggle[data-key="2"]')  # and back on
        assert weights() == pytest.approx([0.2721, 0.6056, 0.1223], abs=5e-5)
        assert b.errors() == []
    finally:
        b.close()


def test_the_row_page_screenshot_is_not_blank(tmp_path, row_page):
    shot = tmp_path / "row.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'shot'}",
                    f"--screenshot={shot}", "--window-size=1000,700", row_page.resolve().as_uri()],
                   capture_output=True, timeout=120)
    top, colours, dark = colour_summary(shot)
    assert top < 0.97 and colours > 10 and dark > 0.002, (top, colours, dark)


# ---------- a run page against its saved trace ----------


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    page, trace = folder / "run.html", folder / "t.safetensors"
    result = runner.invoke(app, ["run", "春天来", "--save", str(trace), "--export-html", str(page)])
    assert result.exit_code == 0, result.output
    return page, Trace.load(trace)


def kept_row(trace, layer: int, q: int, off=()) -> np.ndarray:
    keep = np.broadcast_to(trace[f"blocks.{layer}.attn.mask"], trace[f"blocks.{layer}.attn.scores"].shape)[0, 0, q].copy()
    keep[list(off)] = False
    return keep


def test_row_readout_is_softmax_over_the_kept_keys_of_the_stored_scores(tmp_path, run_files):
    page, trace = run_files
    for layer, head, q, off in ((1, 2, 3, (1,)), (0, 0, 2, ()), (2, 3, 3, (0, 3))):
        fragment = f"#layer={layer}&head={head}&q={q}" + (f"&off={','.join(map(str, off))}" if off else "")
        dom, errors = dump(tmp_path, page, fragment, name=f"r{layer}{head}{q}")
        assert errors == []
        r = readout(dom, "row-readout")
        assert (int(r["layer"]), int(r["head"]), int(r["q"]), json.loads(r["off"])) == (layer, head, q, list(off))
        s = trace[f"blocks.{layer}.attn.scores"][0, head, q].astype(np.float64)
        keep = kept_row(trace, layer, q, off)
        expected = np.zeros_like(s)
        expected[keep] = softmax(s[keep])
        got = np.array(json.loads(r["weights"]))
        assert got.shape == s.shape and np.abs(got - expected).max() < TOL
        if not off:  # no toggle: the page shows what the model computed
            assert np.abs(got - trace[f"blocks.{layer}.attn.weights"][0, head, q]).max() < TOL
        wide = softmax(s)
        dropped = wide[~keep].sum()
        assert float(r["dropped"]) == pytest.approx(dropped, abs=TOL)
        assert float(r["wrong-sum"]) == pytest.approx(1 - dropped, abs=TOL)
        assert sum(json.loads(r["wrong"])) == pytest.approx(1 - dropped, abs=TOL)


def test_temperature_gives_softmax_of_the_stored_top_logits(tmp_path, run_files):
    page, trace = run_files
    logits = trace["logits"][0]
    for fragment, pos, temp, k in (("#temp=0.7&topk=5", 3, 0.7, 5), ("#temp=2&pos=2", 2, 2.0, 10),
                                   ("#temp=0.1&topk=3&pos=1", 1, 0.1, 3)):
        dom, errors = dump(tmp_path, page, fragment, name=f"t{pos}")
        assert errors == []
        d = readout(dom, "dist-readout")
        assert (int(d["pos"]), float(d["temp"]), int(d["topk"]), int(d["n"])) == (pos, temp, k, 256)
        order = np.argsort(-logits[pos], kind="stable")[:256]
        expected = softmax(logits[pos][order].astype(np.float64) / temp)[:k]
        assert np.abs(np.array(json.loads(d["probs"])) - expected).max() < TOL
        assert json.loads(d["ids"]) == order[:k].tolist()


def test_a_click_on_a_heatmap_row_opens_it_and_the_step_link_opens_its_block(tmp_path, run_files):
    page, trace = run_files
    b = Browser(CHROMIUM, tmp_path / "cdp-run", page.resolve().as_uri() + "#step=blocks.1.attn.weights")
    try:
        b.wait_for("document.documentElement.getAttribute('data-live') === 'ready'")
        assert b.eval("document.querySelector('tr.step-focus td').getAttribute('title')") == "blocks.1.attn.weights"
        assert b.eval("document.querySelector('tr.step-focus').closest('details').open") is True
        # the fourth cell of row 2 (q 2, k 2) of layer 0, head 1
        b.click('svg.heatmap[data-layer="0"][data-head="1"] rect.cell:nth-of-type(11)')
        r = b.eval("Object.assign({}, document.getElementById('row-readout').dataset)")
        assert (r["layer"], r["head"], r["q"]) == ("0", "1", "2")
        assert np.abs(np.array(json.loads(r["weights"])) - trace["blocks.0.attn.weights"][0, 1, 2]).max() < TOL
        assert b.eval("location.hash").startswith("#layer=0&head=1&q=2")
        b.click('.pill[data-pos="1"]')  # a token chip: that query's row, and the distribution after it
        r = b.eval("Object.assign({}, document.getElementById('row-readout').dataset)")
        d = b.eval("Object.assign({}, document.getElementById('dist-readout').dataset)")
        assert (r["layer"], r["head"], r["q"], d["pos"]) == ("0", "1", "1", "1")
        assert "q=1" in b.eval("location.hash") and "pos=1" in b.eval("location.hash")
        assert b.errors() == []
    finally:
        b.close()


# ---------- a long prompt: size, load time, windowed rows ----------


@pytest.fixture(scope="module")
def long_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("long")
    model = folder / "llama-long"
    shutil.copytree(model_dir("llama"), model)
    cfg = json.loads((model / "config.json").read_text())
    cfg["max_position_embeddings"] = 1024
    (model / "config.json").write_text(json.dumps(cfg))
    ids = ",".join(str(int(i)) for i in np.random.default_rng(0).integers(5, 380, size=512))
    page, trace = folder / "long.html", folder / "t.safetensors"
    result = runner.invoke(app, ["run", "--model", str(model), "--ids", ids, "--save", str(trace), "--export-html", str(page)])
    assert result.exit_code == 0, result.output
    return page, Trace.load(trace)


def load_ms(b: Browser, url: str) -> float:
    """Navigation start to the end of the load event, once the page's script marked itself ready."""
    b.call("Page.navigate", url=url)
    b.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete' && "
               "document.documentElement.getAttribute('data-live') === 'ready'", timeout=60)
    return b.eval("performance.getEntriesByType('navigation')[0].loadEventEnd")


def test_a_512_token_page_is_small_loads_fast_and_holds_exact_rows(tmp_path, long_files):
    page, trace = long_files
    assert page.stat().st_size < 10_000_000
    text = page.read_text(encoding="utf-8")
    assert re.search(r"holds the scores of query rows 0-3, 4\d\d-511 over all 512 keys", text)
    url = page.resolve().as_uri() + "#layer=1&head=3&q=500&off=0,499"
    b = Browser(CHROMIUM, tmp_path / "cdp-long", "about:blank")
    try:
        # The machine is shared, so a single wall-clock load says little. A warm browser loads the page until one
        # load ends within 2 s (at most 10 tries); the page's own script time (data-live-ms, measured with
        # performance.now() inside the page) must stay well under it on the best load too.
        loads, script = [], []
        for k in range(10):
            loads.append(load_ms(b, url.replace("#", f"?load={k}#")))
            script.append(float(b.eval("document.documentElement.getAttribute('data-live-ms')")))
            if loads[-1] < 2000 and k >= 1:  # the first load also warms the browser's caches
                break
        assert min(loads) < 2000, (loads, script)
        assert min(script) < 1000, (loads, script)
        r = b.eval("Object.assign({}, document.getElementById('row-readout').dataset)")
        s = trace["blocks.1.attn.scores"][0, 3, 500].astype(np.float64)
        keep = kept_row(trace, 1, 500, (0, 499))
        expected = np.zeros(512)
        expected[keep] = softmax(s[keep])
        got = np.array(json.loads(r["weights"]))
        assert got.shape == (512,) and np.abs(got - expected).max() < TOL
        drawn = b.eval("Array.prototype.map.call(document.querySelectorAll('canvas.big'), function (c) { return c.getAttribute('data-drawn'); })")
        assert drawn and all(d and d != "0x0" for d in drawn)  # every large map (attention, mask grids) was drawn
        assert b.errors() == []
    finally:
        b.close()


# ---------- layout: heads side by side, readable labels ----------


def test_heads_use_the_page_width_and_labels_stay_readable(tmp_path):
    short, medium = tmp_path / "short.html", tmp_path / "medium.html"
    assert runner.invoke(app, ["run", "春天来了花开了鸟儿在唱歌我们", "--export-html", str(short)]).exit_code == 0
    text = "春天来了，花开了，鸟儿在唱歌。我们一起去公园散步吧，天气很好，风也很轻。"
    assert runner.invoke(app, ["run", text, "--lens", "--export-html", str(medium)]).exit_code == 0
    b = Browser(CHROMIUM, tmp_path / "cdp-layout", short.resolve().as_uri(), size=(1200, 900))
    try:
        b.wait_for("document.documentElement.getAttribute('data-live') === 'ready'")
        lefts = b.eval("Array.prototype.map.call(document.querySelectorAll('svg.heatmap[data-layer=\"2\"]'),"
                       " function (s) { return Math.round(s.getBoundingClientRect().left); })")
        assert len(lefts) == 4 and len(set(lefts)) >= 2, lefts  # not one column with half the page empty
        load_ms(b, medium.resolve().as_uri())
        tops = b.eval("Array.prototype.map.call(document.querySelectorAll('canvas.thumb[data-layer=\"2\"]'),"
                      " function (c) { return Math.round(c.getBoundingClientRect().top); })")
        assert len(tops) == 4 and len(set(tops)) == 1, tops  # small multiples, one row
        sizes = b.eval("Array.prototype.map.call(document.querySelectorAll('svg.heatmap text'),"
                       " function (t) { return parseFloat(getComputedStyle(t).fontSize); })")
        assert sizes and min(sizes) >= 10.5, min(sizes)
        assert b.eval("document.querySelector('svg[data-lens]').getAttribute('class')") == "heatmap small", medium.read_text()[:300]
        assert b.errors() == []
    finally:
        b.close()


def test_the_steps_explained_carry_this_models_shapes_and_the_guided_button_reveals_them(tmp_path, run_files):
    page, trace = run_files
    tree, _ = parse(page.read_text(encoding="utf-8"))
    cards = [li.text() for li in tree.find_all("li", cls="explain")]
    titles = [c.split(" ", 2)[2].split(" ")[0] for c in cards]
    assert len(cards) == 11 and titles[0] == "token" and "softmax" in cards[-1]
    scores = trace.step("blocks.0.attn.scores").shape
    assert f"attn.scores is [batch={scores[0]}, heads={scores[1]}, q_len={scores[2]}, kv_len={scores[3]}]" in cards[3]
    assert "√32" in cards[3]  # d_head of the shipped model
    b = Browser(CHROMIUM, tmp_path / "cdp-guided", page.resolve().as_uri())
    try:
        b.wait_for("document.documentElement.getAttribute('data-live') === 'ready'")
        visible = "Array.prototype.filter.call(document.querySelectorAll('li.explain'), function (c) { return !c.hidden; }).length"
        assert b.eval(visible) == 11
        b.click("#guided")
        assert b.eval(visible) == 1 and b.eval("location.hash") == "#layer=2&head=0&q=3&step=input.ids"
        b.click("#guided-next")
        b.click("#guided-next")
        assert b.eval(visible) == 3 and b.eval("document.querySelector('tr.step-focus td').getAttribute('title')") == "blocks.0.attn.q"
        assert b.errors() == []
    finally:
        b.close()


def test_a_sliding_window_and_a_soft_cap_switch_and_show(tmp_path):
    page, trace_file = tmp_path / "g.html", tmp_path / "g.safetensors"
    result = runner.invoke(app, ["run", "--model", str(model_dir("gemma2")), "the cat sat on the mat today",
                                 "--save", str(trace_file), "--export-html", str(page)])
    assert result.exit_code == 0, result.output
    trace = Trace.load(trace_file)
    windows = trace.meta["mask"]["windows"]
    layer = next(int(k) for k, w in windows.items() if w)  # a sliding layer (window 3)
    q = trace["input.ids"].shape[1] - 1
    s = trace[f"blocks.{layer}.attn.scores"][0, 0, q].astype(np.float64)
    keys = np.arange(s.size)
    windowed = (keys <= q) & (keys > q - windows[str(layer)])
    assert np.array_equal(kept_row(trace, layer, q), windowed) and not windowed.all()  # the recorded mask: causal & window
    for fragment, keep in ((f"#layer={layer}&head=0&q={q}", windowed),
                           (f"#layer={layer}&head=0&q={q}&window=off", keys <= q)):
        dom, errors = dump(tmp_path, page, fragment, name="w" + str(len(fragment)))
        assert errors == []
        r = readout(dom, "row-readout")
        assert ("window" in json.loads(r["parts"])) == ("window=off" not in fragment)
        expected = np.zeros_like(s)
        expected[keep] = softmax(s[keep])
        assert np.abs(np.array(json.loads(r["weights"])) - expected).max() < TOL
        rows = [n for n in dom.iter() if n.tag == "tr" and n.attrs.get("data-key") == "0"]
        assert ("window (too far back)" in rows[0].text()) == ("window=off" not in fragment)
    raw = [n for n in dom.iter() if n.tag == "td" and "c-raw" in n.classes()]
    assert raw and "hidden" not in raw[0].attrs  # the soft-cap's input is shown beside the capped score
    assert float(raw[q].text()) == pytest.approx(float(trace[f"blocks.{layer}.attn.scores.raw"][0, 0, q, q]), abs=1e-4)


def test_the_panel_opens_on_the_asked_head_and_layer(tmp_path):
    page = tmp_path / "h.html"
    assert runner.invoke(app, ["run", "春天来", "--head", "1", "--layer", "0", "--export-html", str(page)]).exit_code == 0
    r = readout(dump(tmp_path, page)[0], "row-readout")
    assert (r["layer"], r["head"], r["q"]) == ("0", "1", "3")  # --layer, --head, the last real token


def test_a_generation_page_works_each_decoding_steps_new_query_row(tmp_path):
    trace_file, page = tmp_path / "g.safetensors", tmp_path / "g.html"
    result = runner.invoke(app, ["generate", "春天", "--max-new-tokens", "3", "--save", str(trace_file)])
    assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["report", str(trace_file), "-o", str(page)]).exit_code == 0
    trace = Trace.load(trace_file)
    n_prompt = trace["input.ids"].shape[1]
    dom, errors = dump(tmp_path, page, "#layer=2&head=1&decode=2&off=0")
    assert errors == []
    r = readout(dom, "row-readout")
    assert (r["decode"], r["q"], json.loads(r["off"])) == ("2", str(n_prompt - 1 + 2), [0])
    s = trace["decode.2.blocks.2.attn.scores"][0, 1, 0].astype(np.float64)  # the new query against the whole cache
    assert s.size == n_prompt + 2
    expected = np.r_[0.0, softmax(s[1:])]
    assert np.abs(np.array(json.loads(r["weights"])) - expected).max() < TOL
    assert float(r["dropped"]) == pytest.approx(softmax(s)[0], abs=TOL)
    b = Browser(CHROMIUM, tmp_path / "cdp-gen", page.resolve().as_uri())
    try:
        b.wait_for("document.documentElement.getAttribute('data-live') === 'ready'")
        b.click('table.kv tr[data-t="1"] th')
        r = b.eval("Object.assign({}, document.getElementById('row-readout').dataset)")
        w = trace["decode.1.blocks.2.attn.weights"][0, 0, 0]
        assert (r["decode"], r["layer"]) == ("1", "2") and np.abs(np.array(json.loads(r["weights"])) - w).max() < TOL
        assert "decode=1" in b.eval("location.hash") and b.errors() == []
    finally:
        b.close()


# ---------- the row panel on the encoder and encoder-decoder routes ----------


def row_now(b: Browser, fragment: str) -> dict:
    """Set the fragment (the page's hashchange restores the view) and read #row-readout."""
    b.eval(f"location.hash = {json.dumps(fragment)}")
    b.wait_for(f"document.getElementById('row-readout').getAttribute('data-attn') && location.hash === {json.dumps(fragment)}")
    return b.eval("Object.assign({}, document.getElementById('row-readout').dataset)")


def expected_row(scores: np.ndarray, keep: np.ndarray) -> np.ndarray:
    out = np.zeros(scores.shape, dtype=np.float64)
    out[keep] = softmax(scores.astype(np.float64)[keep])
    return out


@pytest.mark.parametrize("model", ["t5", "bart"])
def test_encoder_decoder_rows_encoder_decoder_and_cross_attention(tmp_path, model):
    """Batch row 1 has a padded encoder input: the encoder rows and cross-attention block that key for padding
    only; decoder self-attention is causal. Keep-masks are rebuilt here from input.mask, not read from the page."""
    page, trace_file = tmp_path / "ed.html", tmp_path / "ed.safetensors"
    result = runner.invoke(app, ["run", "--model", str(model_dir(model)), "--ids", "5,7,9,11,13", "--ids", "5,7,9",
                                 "--decoder-ids", "2,4,6", "--batch-row", "1", "--save", str(trace_file),
                                 "--export-html", str(page)])
    assert result.exit_code == 0, result.output
    trace = Trace.load(trace_file)
    enc_keep = trace["input.mask"][1].astype(bool)  # [enc_pos]
    assert not enc_keep.all()
    b = Browser(CHROMIUM, tmp_path / "cdp-ed", page.resolve().as_uri())
    try:
        b.wait_for("document.documentElement.getAttribute('data-live') === 'ready'")
        opened = b.eval("Object.assign({}, document.getElementById('row-readout').dataset)")
        assert opened["attn"] == "decoder"  # the panel opens where the output is read
        cases = (("encoder", "encoder.blocks.1.attn.scores", 1, 1, 0, (), lambda q: enc_keep.copy()),
                 ("encoder", "encoder.blocks.0.attn.scores", 0, 0, 2, (1,), lambda q: enc_keep.copy()),
                 ("decoder", "decoder.blocks.1.attn.scores", 1, 2, 1, (), lambda q: np.arange(3) <= q),
                 ("cross", "decoder.blocks.1.cross_attn.scores", 1, 3, 2, (), lambda q: enc_keep.copy()),
                 ("cross", "decoder.blocks.0.cross_attn.scores", 0, 1, 0, (0,), lambda q: enc_keep.copy()))
        for attn, step, layer, head, q, off, keep_of in cases:
            fragment = f"#attn={attn}&layer={layer}&head={head}&q={q}" + (f"&off={','.join(map(str, off))}" if off else "")
            r = row_now(b, fragment)
            assert (r["attn"], int(r["layer"]), int(r["head"]), int(r["q"]), json.loads(r["off"])) == (attn, layer, head, q, list(off))
            s = trace[step][1, head, q]
            keep = keep_of(q)
            if attn != "decoder":
                assert json.loads(r["parts"]) == ["padding"]  # no causal part: padding is the only reason
            keep[list(off)] = False
            got = np.array(json.loads(r["weights"]))
            assert got.shape == s.shape and np.abs(got - expected_row(s, keep)).max() < TOL, (attn, layer)
            if not off:  # no toggle: what the model computed
                assert np.abs(got - trace[step.replace(".scores", ".weights")][1, head, q]).max() < TOL
            assert float(r["dropped"]) == pytest.approx(softmax(s.astype(np.float64))[~keep].sum(), abs=TOL)
        reason = b.eval("document.querySelector('#rp-table tr[data-key=\"4\"]').textContent")
        assert "encoder padding" in reason  # the last cross case: key 4 is the encoder's pad
        r = row_now(b, "#attn=cross&layer=1&head=0&q=2&padding=off")  # the padding part switched as a whole
        assert np.abs(np.array(json.loads(r["weights"])) - expected_row(trace["decoder.blocks.1.cross_attn.scores"][1, 0, 2],
                                                                         np.ones(5, bool))).max() < TOL
        # a click on a cross-attention heatmap cell works that row, and the fragment says which kind
        b.click('svg.heatmap[data-stack="decoder"][data-part="cross_attn"][data-layer="0"][data-head="1"] rect.cell')
        r = b.eval("Object.assign({}, document.getElementById('row-readout').dataset)")
        assert (r["attn"], r["layer"], r["head"], r["q"]) == ("cross", "0", "1", "0")
        assert b.eval("location.hash").startswith("#attn=cross&layer=0&head=1&q=0")
        assert b.eval("document.getElementById('rp-attn').value") == "cross"
        assert b.eval("document.querySelectorAll('#rp-q option').length") == 3  # decoder rows
        b.click('.pill[data-stack="encoder"][data-pos="1"]')  # an encoder chip: the encoder's row
        r = b.eval("Object.assign({}, document.getElementById('row-readout').dataset)")
        assert (r["attn"], r["q"]) == ("encoder", "1")
        assert b.errors() == []
    finally:
        b.close()


def test_an_encoder_row_is_bidirectional_and_blocks_padding_only(tmp_path):
    page, trace_file = tmp_path / "bert.html", tmp_path / "bert.safetensors"
    result = runner.invoke(app, ["run", "--model", str(model_dir("bert")), "--ids", "1,5,7,9,2", "--ids", "1,5,2",
                                 "--batch-row", "1", "--save", str(trace_file), "--export-html", str(page)])
    assert result.exit_code == 0, result.output
    trace = Trace.load(trace_file)
    keep = trace["input.mask"][1].astype(bool)
    assert keep.tolist() == [True, True, True, False, False]
    dom, errors = dump(tmp_path, page, "#layer=1&head=1&q=0")
    assert errors == []
    r = readout(dom, "row-readout")
    assert (r["attn"], r["q"], json.loads(r["parts"])) == ("self", "0", ["padding"])
    s = trace["blocks.1.attn.scores"][1, 1, 0]
    got = np.array(json.loads(r["weights"]))
    assert np.abs(got - expected_row(s, keep)).max() < TOL and got[1:3].min() > 0  # later keys are read: no causal part
    rows = {n.attrs["data-key"]: n.text() for n in dom.iter() if n.tag == "tr" and "data-key" in n.attrs}
    assert "padding (a pad key)" in rows["3"] and "blocked" not in rows["2"]
