"""Self-consistency checks on one model: padded batch rows against each prompt alone, chunked prefill against
the whole prefill (issue 18, part 4)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import tracer.engine.forward as engine_forward
from tracer.api import load_model
from tracer.cli.default_model import default_model_path
from tracer.cli.main import app
from tracer.diff.batch_check import check_batch, verdict_line
from tracer.engine.cache import LayerCache
from tracer.model.chunked import check_chunked

from conftest import model_dir

runner = CliRunner()
PROMPTS = ["a", "bb ccc dd ee"]


def _leaky_mask(monkeypatch):
    """A mask builder that forgets the padding: every key is kept."""
    real = engine_forward.build_keep
    monkeypatch.setattr(engine_forward, "build_keep", lambda mask, *a, **k: real(np.ones_like(mask), *a, **k))


@pytest.mark.parametrize("name", ["default", "gpt2", "mistral", "t5"])
def test_padded_rows_equal_their_prompt_alone(name):
    m = load_model(default_model_path() if name == "default" else model_dir(name))
    c = check_batch(m, text=["春" if name == "default" else "a", "春天来了吗 hello there"])
    assert c.passed, [verdict_line(v) for v in c.sides]
    assert [v.side for v in c.sides] == ["left", "right"] and all(v.status == "pass" for v in c.sides)
    assert all(v.padded_rows == 1 and v.steps > 20 for v in c.sides)


@pytest.mark.parametrize("name", ["bert", "bart"])
def test_index_positions_differ_by_design_under_left_padding(name):
    c = check_batch(load_model(model_dir(name)), text=PROMPTS)
    left, right = c.sides
    assert left.status == "by-design" and left.leak.step == "input.positions" and left.held.status == "pass"
    assert "ML012" in verdict_line(left) and "by design" in verdict_line(left)
    assert right.status == "pass" and c.passed


def test_a_leaking_mask_is_named_at_the_attention_weights(monkeypatch):
    _leaky_mask(monkeypatch)
    c = check_batch(load_model(default_model_path()), text=["春", "春天来了吗"])
    left, right = c.sides
    assert not c.passed and left.status == "fail" and left.leak.row == 0
    assert left.leak.step == "blocks.0.attn.weights" and left.leak.max_abs > 0.01
    assert right.status == "pass"  # causal: pads after the prompt are never seen by its real tokens
    assert "padding leaks at blocks.0.attn.weights (row 0" in verdict_line(left)


def test_a_leaking_mask_fails_bert_right_padding_too(monkeypatch):
    _leaky_mask(monkeypatch)
    c = check_batch(load_model(model_dir("bert")), text=PROMPTS)
    left, right = c.sides
    assert right.status == "fail" and right.leak.step == "blocks.0.attn.weights"
    assert left.status == "by-design" and not left.held.passed and not c.passed


def test_cli_check_batch_exit_and_json(monkeypatch):
    ok = runner.invoke(app, ["run", "--check-batch", "春天来", "夏天", "--json"])
    assert ok.exit_code == 0, ok.output
    d = json.loads(ok.stdout)["check_batch"]
    assert d["passed"] and [s["side"] for s in d["sides"]] == ["left", "right"]
    _leaky_mask(monkeypatch)
    bad = runner.invoke(app, ["run", "--check-batch", "春天来", "夏天"])
    assert bad.exit_code == 1 and "left padding: ✗ padding leaks at blocks.0.attn.weights" in bad.stdout
    one = runner.invoke(app, ["run", "--check-batch", "春天来"])
    assert one.exit_code == 2 and "at least two prompts" in one.output


@pytest.mark.parametrize("chunk", [1, 2, 3])
@pytest.mark.parametrize("name", ["default", "mistral", "gemma2"])
def test_chunked_prefill_equals_the_whole(name, chunk):
    m = load_model(default_model_path() if name == "default" else model_dir(name))
    c = check_chunked(m, ["春天来", "春天来了吗 hello there"], chunk=chunk)
    assert c.passed, c.line()
    assert c.chunks == -(-c.prompt_len // chunk) and c.logits_max_abs > 0 or chunk >= c.prompt_len


def test_chunked_prefill_catches_an_off_by_one_cache(monkeypatch):
    real = LayerCache.extend

    def shifted(self, k_new, v_new):  # a later chunk written one slot too early
        if self.length > 0:
            self.length -= 1
            k, v = real(self, k_new, v_new)
            self.length += 1
            return self.k[:, :, :self.length], self.v[:, :, :self.length]
        return real(self, k_new, v_new)

    monkeypatch.setattr(LayerCache, "extend", shifted)
    c = check_chunked(load_model(default_model_path()), ["春天来了吗"], chunk=2)
    assert not c.passed and c.first_layer == 0 and "✗ beyond the bound" in c.line()


def test_cli_check_chunked(monkeypatch):
    ok = runner.invoke(app, ["generate", "春天来", "-n", "2", "--check-chunked", "2", "--json"])
    assert ok.exit_code == 0, ok.output
    d = json.loads(ok.stdout)["check_chunked"]
    assert d["passed"] and d["chunk"] == 2
    monkeypatch.setattr(LayerCache, "extend", _noisy(LayerCache.extend))
    bad = runner.invoke(app, ["generate", "春天来", "-n", "2", "--check-chunked", "2"])
    assert bad.exit_code == 1 and "chunked prefill:" in bad.stdout and "✗" in bad.stdout


def _noisy(real):
    def extend(self, k_new, v_new):
        return real(self, k_new + (0.5 if self.length > 0 and k_new.shape[2] > 1 else 0.0), v_new)
    return extend
