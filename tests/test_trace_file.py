"""The trace file: round trip, byte-identical output, interoperability, atomic writes."""

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tracer.trace import Recorder, Trace


def _trace(keep=("*",)) -> Trace:
    rng = np.random.default_rng(0)
    rec = Recorder(keep)
    rec("input.ids", np.array([[1, 2, 3]], dtype=np.int64), ("batch", "pos"), "ids")
    rec("embed.out", rng.standard_normal((1, 3, 4)).astype(np.float32), ("batch", "pos", "d_model"), "W_E[ids]")
    rec("blocks.0.attn.mask", np.tril(np.ones((3, 3), bool))[None, None], ("batch", "heads", "q_len", "kv_len"), "keep")
    rec("logits", rng.standard_normal((1, 3, 7)).astype(np.float32), ("batch", "pos", "vocab"), "x @ W_U")
    return Trace(rec.steps, {"prompts": ["春天"], "model": {"name": "m"}})


def test_round_trip_keeps_order_axes_stats_and_arrays(tmp_path):
    t = _trace()
    t.save(tmp_path / "t.safetensors")
    back = Trace.load(tmp_path / "t.safetensors")
    assert back.names() == t.names()
    for a, b in zip(t.steps, back.steps):
        assert (a.axes, a.shape, a.dtype, a.op) == (b.axes, b.shape, b.dtype, b.op)
        assert a.stats == pytest.approx(b.stats)
        np.testing.assert_array_equal(a.array, b.array)
    assert back.meta["prompts"] == ["春天"]


def test_identical_inputs_give_identical_bytes(tmp_path):
    _trace().save(tmp_path / "a.safetensors")
    _trace().save(tmp_path / "b.safetensors")
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()


def test_official_reader_reads_our_file(tmp_path):
    t = _trace()
    t.save(tmp_path / "t.safetensors")
    loaded = load_file(tmp_path / "t.safetensors")
    assert set(loaded) == set(t.names())
    np.testing.assert_array_equal(loaded["logits"], t["logits"])


def test_stats_only_steps_are_described_but_not_stored(tmp_path):
    t = _trace(keep=("logits",))
    t.save(tmp_path / "t.safetensors")
    back = Trace.load(tmp_path / "t.safetensors")
    assert [s.kept for s in back.steps] == [False, False, False, True]
    assert back.step("embed.out").stats["std"] > 0
    with pytest.raises(KeyError, match="statistics only"):
        back["embed.out"]


def test_foreign_dump_loads_in_file_order(tmp_path):
    arr = np.ones((1, 2, 3), np.float32)
    save_file({"blocks.0.resid_post": arr, "embed.out": arr * 2}, tmp_path / "port.safetensors")
    t = Trace.load(tmp_path / "port.safetensors")
    assert set(t.names()) == {"blocks.0.resid_post", "embed.out"}
    assert t.meta["format"] == "foreign"
    np.testing.assert_array_equal(t["embed.out"], arr * 2)


def test_failed_save_leaves_no_file(tmp_path):
    t = _trace()
    t.steps[1].array = np.array([object()], dtype=object)  # cannot be written
    with pytest.raises(Exception):
        t.save(tmp_path / "t.safetensors")
    assert list(tmp_path.iterdir()) == []


def test_long_inputs_keep_memory_bounded_by_default():
    from tracer.arch.spec import Spec
    from tracer.model.keep import DEFAULT_BUDGET, auto_keep, step_sizes

    spec = Spec(family="gpt2", d_model=768, n_layers=12, n_heads=12, n_kv_heads=12, d_head=64, d_ff=3072,
                vocab_size=50257, max_positions=4096, norm="layernorm", norm_eps=1e-5, positions="learned")
    assert auto_keep(spec, 1, 64, 4) == (("*",), [])
    keep, dropped = auto_keep(spec, 1, 4096, 4)
    assert dropped[0] in ("blocks.*.attn.scores", "blocks.*.attn.masked_scores", "blocks.*.attn.weights")
    sizes = step_sizes(spec, 1, 4096, 4)
    assert sum(sizes[g] for g in keep) <= DEFAULT_BUDGET
    assert "logits" in keep or "logits" in dropped
