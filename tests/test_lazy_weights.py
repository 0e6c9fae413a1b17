"""Weights are made when a step reads them: bf16/fp16 files are not widened at load, float32 files stay views
of the memory map, and shapes are still checked at load from the headers alone."""

import tracemalloc

import numpy as np

from conftest import model_dir
from tracer import load_model
from tracer.checkpoint.weights import LazyWeights
from tracer.engine.ports import ArrayWeights


def test_bf16_model_loads_without_widening_and_reads_float32():
    from tracer.arch.registry import adapter_for
    from tracer.model.model import load_weights

    model = load_model(model_dir("llama-bf16"))
    adapter = adapter_for(model.config)
    tracemalloc.start()
    W = load_weights(model.files, adapter.weight_sources(model.spec), model.spec, np.float32)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert isinstance(W, LazyWeights)
    widened = sum(W[name].nbytes for name in W)  # what loading used to allocate
    assert peak < widened / 4, (peak, widened)
    q = model.weights["blocks.0.attn.W_q"]
    assert q.dtype == np.float32 and q.flags.owndata is False  # a transposed view of the widened tensor
    np.testing.assert_array_equal(q, model.files.get("model.layers.0.self_attn.q_proj.weight").T)


def test_float32_files_are_read_as_views_of_the_map():
    W = load_model(model_dir("llama")).weights
    w = W["blocks.1.mlp.W_out"]
    assert not w.flags.owndata and not w.flags.writeable


def test_float64_runs_widen_on_read_and_bias_checks_read_nothing():
    W = load_model(model_dir("qwen2"), dtype="float64").weights
    assert W["blocks.0.attn.b_q"].dtype == np.float64 and W.dtype == np.float64
    assert "blocks.0.attn.b_q" in W and "blocks.0.attn.b_o" not in W and W.get("blocks.0.attn.b_o") is None
    assert len(W) == len(list(W))


def test_lazy_and_eager_runs_agree_exactly():
    model = load_model(model_dir("llama-bf16"))
    eager = ArrayWeights({name: model.weights[name] for name in model.weights})  # a plain dict, as loading used to give
    a = model.run(ids=[[3, 4, 5, 6]])
    model.weights = eager
    b = model.run(ids=[[3, 4, 5, 6]])
    for s in a.steps:
        np.testing.assert_array_equal(s.array, b[s.name], err_msg=s.name)


def test_an_embedding_lookup_widens_only_the_rows_it_reads(monkeypatch):
    import pytest

    for name, dtype in (("llama-bf16", "float32"), ("llama-bf16", "float64"), ("gpt2", "float64"), ("bert", "float32")):
        model = load_model(model_dir(name), dtype=dtype)
        W = model.weights
        ids = np.array([[5, 17, 42, 5], [0, 3, 8, 9]])
        table = next(n for n in ("embed.W_E", "embed.W_pos", "embed.W_type") if n in W)
        want = W[table][ids]
        widened = []
        real_get = W.files.get
        monkeypatch.setattr(W.files, "get", lambda n: widened.append(n) or real_get(n))
        got = W.rows(table, ids)
        monkeypatch.setattr(W.files, "get", real_get)
        assert got.dtype == want.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want)
        assert widened == [], "the whole table was made for a lookup"
    with pytest.raises(IndexError):
        load_model(model_dir("llama")).weights.rows("embed.W_E", np.array([10**6]))
