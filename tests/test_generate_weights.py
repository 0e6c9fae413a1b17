"""Decoding reads every weight at every step: bf16/f16 weights are widened once per generation when they fit
the budget (not once per token), and a bigger model keeps widening a tensor at a time. Same tokens either way."""

from collections import Counter

import numpy as np
import pytest

from conftest import model_dir
from tracer.model import generate as generate_module
from tracer import load_model
from tracer.model.generate import GenerateOptions, generate


def _count_reads(monkeypatch, model) -> Counter:
    reads = Counter()
    real = model.weights.files.get

    def get(name):
        reads[name] += 1
        return real(name)

    monkeypatch.setattr(model.weights.files, "get", get)
    return reads


@pytest.mark.parametrize("name,dtype", [("llama-bf16", "float32"), ("llama", "float64")])
def test_weights_are_made_once_per_generation_when_they_fit(monkeypatch, name, dtype):
    m = load_model(model_dir(name), dtype=dtype)
    assert m.weights.made_bytes() > 0
    options = GenerateOptions(6, ignore_eos=True)
    reads = _count_reads(monkeypatch, m)
    held = generate(m, ids=[[5, 17, 42]], options=options)
    assert reads and max(reads.values()) == 1, "a weight was widened more than once"
    monkeypatch.setattr(generate_module, "HELD_WEIGHTS_BUDGET", 0)  # too big to hold: widened at every step
    reads.clear()
    streamed = generate(m, ids=[[5, 17, 42]], options=options)
    assert max(reads.values()) >= 6
    assert [r.new_ids for r in held.rows] == [r.new_ids for r in streamed.rows]
    assert len(held.rows[0].new_ids) == 6


def test_float32_files_cost_nothing_to_hold():
    m = load_model(model_dir("llama"))
    assert m.weights.made_bytes() == 0  # views of the memory map
    bf16 = load_model(model_dir("llama-bf16")).weights
    assert bf16.made_bytes() == 4 * sum(int(np.prod(bf16.files.shape(h))) for h, _ in bf16._resolved.values())
    assert bf16.held(bf16.made_bytes()) is not bf16 and bf16.held(bf16.made_bytes() - 1) is bf16
