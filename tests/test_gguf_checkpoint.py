"""GGUF files as checkpoints: every architecture, built from the committed fixtures with the converter's
transforms (tests/gguf_build.py, no torch, no llama.cpp), runs step by step like its source folder.

Tolerances: F32 file vs folder, every recorded step max-abs <= 1e-6 (the same float32 arithmetic on the same
numbers; only the undo of the converter's changes lies between). Where the converter drops a config field
(listed in LOST, each with llama.cpp's reason), the folder is compared with that field as llama.cpp runs it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from gguf_build import ARCHS, FIXTURES, build_gguf
from tracer.model.model import load_model

IDS = [[0, 5, 9, 17, 33, 2, 100, 7, 250, 11]]

# what the GGUF cannot carry, and the value llama.cpp runs with instead (config edits on the folder side)
LOST = {
    "mistral": {"sliding_window": None},  # LlamaModel writes no sliding_window
    "qwen2": {"use_sliding_window": False, "layer_types": None},  # Qwen2Model writes none either
    "starcoder2": {"sliding_window": None},  # StarCoder2Model: TextModel defaults, no window
    "qwen3_moe": {"norm_topk_prob": True},  # llama.cpp's qwen3moe graph always renormalises (norm_w = true)
    "gemma2": {"query_pre_attn_scalar": 16},  # llama.cpp: 1/sqrt(head_dim) unless the 27B shape
    "gemma3_text": {"query_pre_attn_scalar": 16,  # as gemma2
                    "layer_types": ["sliding_attention", "sliding_attention"]},  # llama.cpp: 5 of every 6 slide
}


def folder_as_llamacpp_runs_it(family: str, tmp: Path) -> Path:
    """The fixture folder, with LOST's config edits (weights and tokenizer linked, not copied)."""
    src = FIXTURES / family
    if family not in LOST:
        return src
    out = tmp / f"{family}-as-gguf"
    out.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    for k, v in LOST[family].items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (out / "config.json").write_text(json.dumps(cfg))
    for name in ("model.safetensors", "tokenizer.json"):
        os.symlink(src / name, out / name)
    return out


def max_step_error(a, b) -> dict[str, float]:
    """Per step of two traces: max |a - b| over the tensors both kept (-inf where both are -inf counts 0), over the
    step's scale max(1, max |b|): a matrix stored the other way round (GPT-2's Conv1D, the permuted q/k rows) is
    multiplied in another float32 order, a few ulps apart (5.3e-7 of the scale seen on an AMD EPYC, 0 elsewhere)."""
    assert a.names() == b.names()
    out = {}
    for s, r in zip(a.steps, b.steps):
        if s.array is None or r.array is None or s.array.dtype == bool:
            continue
        assert s.array.shape == r.array.shape, s.name
        x, y = s.array.astype(np.float64), r.array.astype(np.float64)
        same_inf = np.isinf(x) & np.isinf(y) & (np.sign(x) == np.sign(y))
        assert not (np.isinf(x) ^ np.isinf(y)).any(), f"{s.name}: -inf in one trace only"
        with np.errstate(invalid="ignore"):
            scale = max(1.0, float(np.abs(y[np.isfinite(y)]).max())) if np.isfinite(y).any() else 1.0
            out[s.name] = float(np.abs(np.where(same_inf, 0.0, x - y)).max()) / scale if x.size else 0.0
    return out


@pytest.mark.parametrize("family", sorted(ARCHS))
def test_f32_gguf_runs_like_its_folder_step_by_step(family, tmp_path):
    path = build_gguf(FIXTURES / family, tmp_path / f"{family}.gguf")
    gguf_trace = load_model(path).run(ids=IDS)
    folder_trace = load_model(folder_as_llamacpp_runs_it(family, tmp_path)).run(ids=IDS)
    errors = max_step_error(gguf_trace, folder_trace)
    assert len(errors) > 30  # every step of the forward was compared, not a few
    worst = max(errors, key=errors.get)
    assert errors[worst] <= 1e-6, f"{family}: {worst} off by {errors[worst]:.3g}"
    # a Mistral file is a llama file (same graph in llama.cpp; the window is gone, see LOST)
    expected = "llama" if family == "mistral" else folder_trace.meta["model"]["family"]
    assert gguf_trace.meta["model"]["family"] == expected


@pytest.mark.parametrize("family", ["mistral", "qwen3_moe", "gemma2"])
def test_what_the_converter_drops_does_change_the_run(family, tmp_path):
    """LOST is not a free pass: against the untouched folder the same file differs (so the edits matter)."""
    path = build_gguf(FIXTURES / family, tmp_path / f"{family}.gguf")
    ours, source = (load_model(p).run(ids=IDS, keep=["logits"]) for p in (path, FIXTURES / family))
    assert np.abs(ours["logits"] - source["logits"]).max() > 1e-3


def test_a_llama_file_read_without_undoing_the_permutation_would_differ(tmp_path):
    """The q/k permutation is real: the GGUF's attn_q rows are not transformers' rows (so undoing it is checked)."""
    import gguf

    path = build_gguf(FIXTURES / "llama", tmp_path / "llama.gguf")
    stored = {t.name: t.data for t in gguf.GGUFReader(path).tensors}["blk.0.attn_q.weight"]
    from tracer.checkpoint.weights import WeightFiles

    hf = WeightFiles(FIXTURES / "llama").get("model.layers.0.self_attn.q_proj.weight")
    assert stored.shape == hf.shape and np.abs(stored - hf).max() > 0.1
    assert np.array_equal(np.sort(stored, axis=None), np.sort(hf, axis=None))  # same numbers, moved


def test_llama3_rope_freqs_read_back_as_llama3_scaling(tmp_path):
    """A Llama-3.1-style rope (head_dim 128, theta 500000, factor 8, low 1, high 4, original 8192): the
    converter's rope_freqs tensor is read back as those llama3 parameters, and the file runs like the folder.
    (The tiny fixture's 4 frequencies put only one on the ramp: there the factors are kept as divisors.)"""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(5)
    d, heads, f, vocab = 256, 2, 128, 64
    cfg = {"model_type": "llama", "hidden_size": d, "num_hidden_layers": 1, "num_attention_heads": heads,
           "num_key_value_heads": heads, "head_dim": 128, "intermediate_size": f, "vocab_size": vocab,
           "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
           "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    shapes = {"model.embed_tokens.weight": (vocab, d), "lm_head.weight": (vocab, d), "model.norm.weight": (d,),
              "model.layers.0.input_layernorm.weight": (d,), "model.layers.0.post_attention_layernorm.weight": (d,),
              "model.layers.0.self_attn.q_proj.weight": (d, d), "model.layers.0.self_attn.k_proj.weight": (d, d),
              "model.layers.0.self_attn.v_proj.weight": (d, d), "model.layers.0.self_attn.o_proj.weight": (d, d),
              "model.layers.0.mlp.gate_proj.weight": (f, d), "model.layers.0.mlp.up_proj.weight": (f, d),
              "model.layers.0.mlp.down_proj.weight": (d, f)}
    folder = tmp_path / "llama"
    folder.mkdir()
    save_file({n: (rng.standard_normal(s) * 0.1 + (len(s) == 1)).astype(np.float32) for n, s in shapes.items()},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg))
    g = load_model(build_gguf(folder, tmp_path / "l3.gguf"))
    rope = g.spec.rope
    assert (rope.scaling, rope.factor, rope.low_freq_factor, rope.high_freq_factor, rope.original_max_positions) == \
        ("llama3", 8.0, 1.0, 4.0, 8192)
    ids = [[1, 7, 3, 60, 22, 9]]
    errors = max_step_error(g.run(ids=ids), load_model(folder).run(ids=ids))
    assert max(errors.values()) <= 1e-6


def test_phi3_longrope_factors_read_back(tmp_path):
    """Phi-3's long context: rope_factors_long / _short and rope.scaling.attn_factor from the converter become
    transformers' longrope again; 10 tokens past original_max_position_embeddings 8 use the long factors."""
    folder = tmp_path / "phi3"
    folder.mkdir()
    cfg = json.loads((FIXTURES / "phi3" / "config.json").read_text())
    cfg["original_max_position_embeddings"] = 8
    cfg["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 8,
                              "short_factor": [1.0, 1.1, 1.5, 2.0], "long_factor": [1.0, 2.0, 4.0, 8.0]}
    (folder / "config.json").write_text(json.dumps(cfg))
    os.symlink(FIXTURES / "phi3" / "model.safetensors", folder / "model.safetensors")
    g, f = load_model(build_gguf(folder, tmp_path / "phi3.gguf")), load_model(folder)
    assert g.spec.rope.scaling == "longrope" and g.spec.rope.long_factor == (1.0, 2.0, 4.0, 8.0)
    ours, theirs = g.spec.rope, f.spec.rope
    assert ours.attention_factor == theirs.attention_factor  # the converter's float32 value is transformers' formula
    assert np.allclose(ours.short_factor, theirs.short_factor, rtol=1e-7)  # stored as float32, computed in float32
    assert max(max_step_error(g.run(ids=IDS), f.run(ids=IDS)).values()) <= 1e-6


def test_llama_q_and_k_biases_are_unpermuted_too(tmp_path):
    """attention_bias llama (as InternLM- or Qwen-in-llama-clothing files): the converter permutes q_proj.bias and
    k_proj.bias with their weights; read back, the run is the folder's."""
    from safetensors.numpy import save_file

    from tracer.checkpoint.weights import WeightFiles

    src = WeightFiles(FIXTURES / "llama")
    tensors = {n: np.array(src.get(n)) for n in src.names()}
    rng = np.random.default_rng(9)
    for i in range(2):
        for x, rows in (("q", 32), ("k", 16), ("v", 16), ("o", 32)):
            tensors[f"model.layers.{i}.self_attn.{x}_proj.bias"] = rng.standard_normal(rows).astype(np.float32)
    folder = tmp_path / "llama"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    cfg = json.loads((FIXTURES / "llama" / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(dict(cfg, attention_bias=True)))
    g, f = load_model(build_gguf(folder, tmp_path / "b.gguf")), load_model(folder)
    assert g.spec.qkv_bias and g.spec.o_bias
    assert max(max_step_error(g.run(ids=IDS), f.run(ids=IDS)).values()) <= 1e-6
