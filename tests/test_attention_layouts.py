"""The attention view's layouts on synthetic reports: self-attention and cross-attention (decoder rows, encoder keys),
short and long, at 80 and 150 columns. Labels on screen must be the true row and key positions."""

from __future__ import annotations

import re

import numpy as np
import pytest
from rich.console import Console

from tracer.render.attention_view import AttentionBody, render_attention
from tracer.render.window import window


def report(n_rows: int, n_keys: int, heads: int = 2, selected="all", cross: bool = False, top=None) -> dict:
    rng = np.random.default_rng(n_rows * 1000 + n_keys)
    blocked = np.zeros((n_rows, n_keys), bool) if cross else ~np.tril(np.ones((n_rows, n_keys), bool))
    hs = []
    for h in range(heads):
        s = np.where(blocked, -np.inf, rng.normal(size=(n_rows, n_keys)) * 3)
        w = np.exp(s - s.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        hs.append({"head": h, "kv_head": h, "weights": w.tolist(), "row_sums": w.sum(-1).tolist(),
                   "rows_sum_to_one": True, "max_row_error": 0.0})
    att = {"layer": 0, "batch_row": 0, "n_heads": heads, "n_kv_heads": heads, "selected": selected,
           "heads": hs if selected == "all" else hs[:1], "blocked": blocked.tolist(), "fully_masked_rows": [],
           "max_row_error": 0.0, "rows_sum_to_one": True, "labels": [f"k{i}" for i in range(n_keys)],
           "pad_positions": [], "focus": None, "top": top}
    if cross:
        att.update(row_labels=[f"q{i}" for i in range(n_rows)], row_pad_positions=[], stack="decoder", part="cross_attn")
    return att


def render(att: dict, width: int) -> str:
    console = Console(width=width, no_color=True, color_system=None, record=True, file=open("/dev/null", "w"))
    console.print(render_attention(att))
    return console.export_text()


@pytest.mark.parametrize("width", [80, 150])
@pytest.mark.parametrize("n_rows,n_keys", [(3, 7), (4, 300)])
def test_cross_attention_rows_are_decoder_positions(width, n_rows, n_keys):
    att = report(n_rows, n_keys, cross=True, selected=0)
    out = render(att, width)
    assert "cross-attention" in out
    rows = [int(m.group(1)) for m in re.finditer(r"^\s*(\d+) q(\d+)", out, re.M) if m.group(1) == m.group(2)]
    assert rows == list(range(n_rows))  # every decoder row, labelled by its own position
    assert not re.search(r"^\s*\d+ k\d+", out, re.M)  # no key label used as a row label
    assert max(len(line) for line in out.splitlines()) <= width


@pytest.mark.parametrize("width", [80, 150])
def test_all_heads_cross_attention_on_a_long_input_lists_keys_of_the_last_decoder_row(width):
    att = report(3, 300, cross=True)
    out = render(att, width)
    assert "query 2 (q2)" in out
    w = np.asarray(att["heads"][0]["weights"])[2]
    line = next(line for line in out.splitlines() if line.startswith("head 0"))
    keys = [int(k) for k, _ in re.findall(r"(\d+) (k\d+) ", line)]
    assert keys and keys == [int(k) for k in np.argsort(-w, kind="stable")[: len(keys)]]


def test_layout_follows_width_and_attn_top():
    long = report(120, 120, selected=0)
    assert AttentionBody(long).layout(150) == "window"
    assert AttentionBody(long).layout(80) == "top"
    assert AttentionBody(report(4, 4, selected=0)).layout(80) == "grid"
    assert AttentionBody(report(4, 4), top=3).layout(150) == "top"
    assert AttentionBody(report(4, 4)).layout(80) == "heads"


def test_window_keeps_the_first_position_and_the_focus():
    for n, focus, budget in [(512, 511, 16), (512, 100, 16), (120, 0, 10), (30, 29, 30)]:
        shown = window(n, focus, budget)
        assert len(shown) <= budget and shown[0] == 0 and focus in shown
        real = [k for k in shown if k is not None]
        assert real == sorted(set(real)) and all(0 <= k < n for k in real)
        for a, b in zip(shown, shown[1:]):  # a gap marker stands exactly where positions are left out
            if a is not None and b is not None:
                assert b == a + 1
