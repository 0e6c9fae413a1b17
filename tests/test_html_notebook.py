"""Notebooks: Trace._repr_html_ shows the report inline (a frame sized for a cell); tracer.report.html(trace) is the page."""

from __future__ import annotations

import html
import re

import pytest

from conftest import model_dir
from html_tree import parse
import tracer
from tracer.trace import Trace


@pytest.fixture(scope="module")
def llama():
    return tracer.load_model(model_dir("llama"))


def frame_page(markup: str) -> str:
    m = re.fullmatch(r'<iframe class="tracer-report" srcdoc="([^"]*)" style="([^"]*)" sandbox="allow-scripts"></iframe>', markup)
    assert m, markup[:200]
    assert "width:100%" in m.group(2) and re.search(r"height:\d+px", m.group(2))  # sized for a notebook cell
    return html.unescape(m.group(1))


def test_a_run_trace_displays_its_report_inline(llama):
    trace = llama.run(text="hello world")
    page = frame_page(trace._repr_html_())
    assert page == tracer.report.html(trace)  # the same page, deterministic
    tree, errors = parse(page)
    assert errors == []
    assert [n for n in tree.iter() if n.attrs.get("id") == "row-readout"]
    assert [n for n in tree.iter() if n.attrs.get("id") == "dist-readout"]
    pieces = [c.text() for c in tree.find_all("td", cls="piece")][: len(trace.meta["tokens"][0])]
    assert pieces[0] == "<s>" and not any(re.fullmatch(r"<\d+>", p) for p in pieces)


def test_a_loaded_trace_displays_too_and_the_model_adds_the_lens(tmp_path, llama):
    trace = llama.run(text="hello world")
    loaded = Trace.load(trace.save(tmp_path / "t.safetensors"))
    page = frame_page(loaded._repr_html_())
    assert "<!DOCTYPE html>" in page and 'id="sec-attention"' in page and 'id="sec-lens"' not in page
    with_model = tracer.report.html(loaded, model=llama)
    assert 'id="sec-lens"' in with_model


def test_a_foreign_trace_has_no_report(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    save_file({"x": np.zeros((2, 2), dtype=np.float32)}, str(tmp_path / "f.safetensors"))
    with pytest.raises(tracer.errors.TracerError, match="no tracer metadata"):
        tracer.report.html(Trace.load(tmp_path / "f.safetensors"))
