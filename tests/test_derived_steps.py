"""Masked scores are where(mask, scores, -inf) exactly: a trace that keeps scores and mask recomputes them on read
instead of holding them, and its file stores the recipe instead of the tensor."""

import re

import numpy as np
import pytest

import tracer
from conftest import ENCODERS, FAMILIES, SEQ2SEQ, VARIANTS, model_dir
from tracer.checkpoint.safetensors_file import SafetensorsFile
from tracer.engine.forward import MaskOverride
from tracer.trace import Trace

IDS = [[5, 17, 42, 8, 9, 11], [5, 17, 42]]


@pytest.mark.parametrize("name", ["llama", "gpt2", "gemma2", "bert", "t5"])
def test_masked_scores_are_derived_and_equal_the_held_ones(name, tmp_path):
    m = tracer.load_model(model_dir(name))
    kw = dict(decoder_ids=[0, 5, 9]) if name == "t5" else {}
    derived = m.run(ids=IDS, keep=("*",), pad_side="left" if name != "t5" else "right", **kw)
    held = m.run(ids=IDS, keep=("*masked_scores",), pad_side="left" if name != "t5" else "right", **kw)
    names = [s.name for s in derived.steps if s.name.endswith("attn.masked_scores")]
    assert names
    for n in names:
        d, h = derived.step(n), held.step(n)
        assert d.kept and d.stored is None and d.derived == "where(mask, scores, -inf)"
        assert h.stored is not None and h.derived is None  # the scores were not kept: held
        np.testing.assert_array_equal(d.array, h.array)
        assert d.array.dtype == h.array.dtype and d.stats == h.stats
    saved = derived.save(tmp_path / "t.safetensors")
    assert not any(k.endswith("masked_scores") for k in SafetensorsFile(saved).keys())
    loaded = Trace.load(saved)
    for n in names:
        assert loaded.step(n).kept
        np.testing.assert_array_equal(loaded[n], held[n])


def test_with_a_mask_bias_the_masked_scores_are_held():
    m = tracer.load_model(model_dir("llama"))
    keep = np.tril(np.ones((6, 6), bool))[None, None]
    bias = np.where(keep, 0.25, -1e9).astype(np.float32)
    t = m.run(ids=IDS[:1], keep=("*",), mask_override=MaskOverride(keep, bias, "test"))
    s = t.step("blocks.0.attn.masked_scores")
    assert s.stored is not None and s.derived is None
    np.testing.assert_array_equal(s.array, np.where(keep, t["blocks.0.attn.scores"] + bias, -np.inf))


def test_a_loaded_derived_step_without_its_inputs_is_statistics_only(tmp_path):
    m = tracer.load_model(model_dir("llama"))
    t = m.run(ids=IDS[:1], keep=("*",))
    t.steps = [s for s in t.steps if s.name != "blocks.0.attn.scores"]  # the file loses one input
    loaded = Trace.load(t.save(tmp_path / "t.safetensors"))
    assert not loaded.step("blocks.0.attn.masked_scores").kept
    assert loaded.step("blocks.1.attn.masked_scores").kept


@pytest.mark.parametrize("length", [512, 1024, 2048, 4096])
def test_the_memory_policy_counts_masked_scores_as_free_only_while_derivable(length):
    from tracer.arch.spec import Spec
    from tracer.model.keep import DEFAULT_BUDGET, auto_keep, step_sizes

    spec = Spec(family="gpt2", d_model=768, n_layers=12, n_heads=12, n_kv_heads=12, d_head=64, d_ff=3072,
                vocab_size=50257, max_positions=4096, norm="layernorm", norm_eps=1e-5, positions="learned")
    keep, dropped = auto_keep(spec, 1, length, 4)
    sizes = step_sizes(spec, 1, length, 4)
    kept = set(sizes) if keep == ("*",) else set(keep)
    masked, scores, mask = "blocks.*.attn.masked_scores", "blocks.*.attn.scores", "blocks.*.attn.mask"
    assert (masked in kept) == (scores in kept and mask in kept), "masked scores are kept only with what derives them"
    held = sum(sizes[g] for g in kept if g != masked)
    assert held <= DEFAULT_BUDGET
    assert not dropped or held + min(sizes[g] for g in dropped) > DEFAULT_BUDGET, "dropped more than needed"


@pytest.mark.parametrize("name", FAMILIES + VARIANTS + ENCODERS + SEQ2SEQ + ("qwen2_moe", "phi-qk", "qwen3_moe-dense"))
def test_the_memory_policy_sizes_exactly_the_steps_the_model_records(name):
    """The memory policy must know every model (arch.steps_of): a step it counts but the model never records makes the
    default policy drop tensors that would have fit; one it misses lets a long input pass the budget."""
    from tracer.model.keep import step_sizes

    m = tracer.load_model(model_dir(name))
    kw = dict(decoder_ids=[0, 5]) if m.route == "encoder-decoder" else {}
    recorded = {re.sub(r"blocks\.\d+\.", "blocks.*.", s.name) for s in m.run(ids=[[5, 17, 42]], keep=(), **kw).steps}
    assert set(step_sizes(m.spec, 1, 3, 4)) == recorded
