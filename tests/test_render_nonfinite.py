"""Every run view renders non-finite numbers (the README: a NaN or inf in the forward pass is reported and the
run goes on): a property over real reports whose floats are replaced by NaN / inf / -inf, at 80 and 120 columns."""

from __future__ import annotations

import io
import math
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from rich.console import Console

from conftest import model_dir
from tracer import load_model
from tracer.cli.default_model import default_model_path
from tracer.cli.run_cmd import show
from tracer.report import RunOptions, build_report
from tracer.report.options import SECTIONS

NONFINITE = (math.nan, math.inf, -math.inf)
CASES = {  # a causal LM (default model), an MLM, an encoder-decoder, an MoE, an encoder without a head (pooled)
    "default": dict(text="The cat sat on the"),
    "bert-mlm": dict(text="The capital of France is [MASK]."),
    "t5": dict(text="translate: hello there", decoder_text="hallo"),
    "qwen3_moe": dict(text="one two three"),
    "bert": dict(text="a sentence to embed"),
}


def _path(name):
    return default_model_path() if name == "default" else model_dir(name)


@pytest.fixture(scope="module")
def reports():
    out = {}
    for name, inputs in CASES.items():
        m = load_model(_path(name))
        trace = m.run(**inputs, clock=time.perf_counter)
        sections = tuple(s for s in SECTIONS if s != "pooled" or name == "bert")
        if name in ("bert", "bert-mlm"):  # the lens reads a decoder stack; a model without a head has no top-k
            sections = tuple(s for s in sections if s != "lens" and (s != "top_k" or name == "bert-mlm"))
        vocab = m.tokenizer.describe_id if m.tokenizer else None
        out[name] = build_report(trace, RunOptions(sections=sections), vocab=vocab, model=m)
    return out


def poison(x, draw_value):
    """The same report with floats replaced where draw_value says so (ints, bools and strings untouched)."""
    if isinstance(x, dict):
        return {k: poison(v, draw_value) for k, v in x.items()}
    if isinstance(x, list):
        return [poison(v, draw_value) for v in x]
    if isinstance(x, tuple):
        return tuple(poison(v, draw_value) for v in x)
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        y = x.copy()
        flat = y.reshape(-1)
        for i in range(flat.size):
            flat[i] = draw_value(flat[i])
        return y
    if isinstance(x, float):
        return draw_value(x)
    return x


def render(report, width):
    console = Console(file=io.StringIO(), width=width, color_system=None, legacy_windows=False)
    show(console, report)
    return console.file.getvalue()


@pytest.mark.parametrize("name", list(CASES))
def test_every_float_nan_renders(reports, name):
    out = render(poison(reports[name], lambda _: math.nan), 80)
    assert out.count("nan") >= 3  # the values are written, not hidden


def _one_section(report, section):
    return {**report, "sections": (section,)}


@pytest.mark.fuzz
@settings(max_examples=30)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1), rate=st.sampled_from([0.05, 0.3, 1.0]),
       width=st.sampled_from([80, 120]))
def test_some_floats_non_finite_render(reports, data, seed, rate, width):
    name = data.draw(st.sampled_from(list(CASES)))
    section = data.draw(st.sampled_from(reports[name]["sections"]))
    rng = np.random.default_rng(seed)

    def draw(v):
        return NONFINITE[rng.integers(3)] if rng.random() < rate else v

    render(poison(_one_section(reports[name], section), draw), width)


@pytest.mark.parametrize("value", NONFINITE, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("width", [80, 120])
def test_the_diff_screen_renders_a_non_finite_step(value, width):
    from dataclasses import replace

    from diff_toy import toy_trace

    from tracer.diff import diff_traces
    from tracer.render.diff_view import DiffScreen
    from tracer.trace import Trace

    ref = toy_trace([[1, 5, 7]])
    steps = []
    for s in ref.steps:  # mine: the same trace with NaN/inf from the first MLP output on
        if s.array is not None and s.array.dtype.kind == "f" and ".mlp.out" in s.name or s.name in ("logits", "probs"):
            a = s.array.copy()
            a.reshape(-1)[::3] = value
            s = replace(s, array=a, derived=None, source=None)
        steps.append(s)
    report = diff_traces(ref, Trace(steps, dict(ref.meta)))
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(DiffScreen(report, show_all=True))
    out = console.file.getvalue()
    assert "mlp.out" in out and max(len(line) for line in out.splitlines()) <= width
