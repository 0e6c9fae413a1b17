"""The engine's two ports are Protocols the model's weights and recorders satisfy (no attribute probing)."""

from __future__ import annotations

import numpy as np

from conftest import model_dir
from tracer import load_model
from tracer.engine.ports import ArrayWeights, BlockSink, StepSink, Weights
from tracer.model.generate import _LogitsOnly, _prefixed
from tracer.trace.recorder import NullRecorder, Recorder


def test_the_models_weights_and_recorders_are_the_engines_ports():
    lazy = load_model(model_dir("llama-bf16")).weights
    for w in (lazy, lazy.held(2**30), ArrayWeights({"embed.W_E": np.zeros((4, 2), np.float32)})):
        assert isinstance(w, Weights), type(w)
    for sink in (Recorder(), NullRecorder(), _LogitsOnly(), _prefixed(Recorder(), "decode.0.")):
        assert isinstance(sink, StepSink), type(sink)
    assert isinstance(Recorder().blocks("x", ("a",), "op", (3,), np.float32), BlockSink)


def test_a_decoding_steps_sink_records_and_blocks_under_its_prefix():
    rec = Recorder(keep=("decode.0.logits",))
    sink = _prefixed(rec, "decode.0.")
    sink("logits", np.ones((1, 1, 3), np.float32), ("batch", "pos", "vocab"), "x @ W_U")
    assert sink.keeps("logits") and not sink.keeps("probs")
    sink.blocks("probs", ("batch", "pos", "vocab"), "softmax", (1, 1, 3), np.float32).close()
    assert [s.name for s in rec.steps] == ["decode.0.logits", "decode.0.probs"]


def test_array_weights_read_rows_and_say_their_dtype():
    table = np.arange(12, dtype=np.float64).reshape(6, 2)
    W = ArrayWeights({"embed.W_E": table})
    assert W.dtype == np.float64
    np.testing.assert_array_equal(W.rows("embed.W_E", np.array([[4, 1]])), table[[[4, 1]]])
