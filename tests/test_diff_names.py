"""Foreign dumps (transformers module names, TransformerLens hooks, a user's map) matched through the name maps."""

import json

import numpy as np
import pytest
from diff_toy import toy_trace, toy_weights
from safetensors.numpy import save_file

from tracer.diff import diff_traces
from tracer.errors import TracerError
from tracer.trace import Trace

IDS = [[2, 4, 6, 8]]


def _merge_heads(a):  # [b, h, t, d] -> [b, t, h*d], as an nn.Linear returns it
    b, h, t, d = a.shape
    return np.ascontiguousarray(a.transpose(0, 2, 1, 3).reshape(b, t, h * d))


def _heads_last(a):  # [b, h, t, d] -> [b, t, h, d], TransformerLens's layout
    return np.ascontiguousarray(a.transpose(0, 2, 1, 3))


def _load_dump(tmp_path, tensors: dict[str, np.ndarray], name="dump.safetensors") -> Trace:
    path = tmp_path / name
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path))
    return Trace.load(path)


def tl_cache(t: Trace, n_layers=2) -> dict[str, np.ndarray]:
    """What a TransformerLens run_with_cache saves for the toy model, written out by hand."""
    cache = {"hook_embed": t["embed.tokens"], "blocks.0.hook_resid_pre": t["embed.out"]}
    for i in range(n_layers):
        p = f"blocks.{i}."
        cache.update({
            p + "ln1.hook_scale": np.ones(t["embed.out"].shape[:2] + (1,), np.float32),
            p + "ln1.hook_normalized": t[p + "ln1.out"],
            p + "attn.hook_q": _heads_last(t[p + "attn.q"]),
            p + "attn.hook_k": _heads_last(t[p + "attn.k"]),
            p + "attn.hook_v": _heads_last(t[p + "attn.v"]),
            p + "attn.hook_attn_scores": t[p + "attn.masked_scores"],
            p + "attn.hook_pattern": t[p + "attn.weights"],
            p + "attn.hook_z": _heads_last(t[p + "attn.z"]),
            p + "hook_attn_out": t[p + "attn.out"],
            p + "hook_resid_mid": t[p + "resid_mid"],
            p + "ln2.hook_normalized": t[p + "ln2.out"],
            p + "mlp.hook_pre": t[p + "mlp.pre"],
            p + "mlp.hook_pre_linear": t[p + "mlp.up"],
            p + "mlp.hook_post": t[p + "mlp.post"],
            p + "hook_mlp_out": t[p + "mlp.out"],
            p + "hook_resid_post": t[p + "resid_post"],
        })
        if i > 0:
            cache[p + "hook_resid_pre"] = t[f"blocks.{i - 1}.resid_post"]
    cache["ln_final.hook_normalized"] = t["final_norm.out"]
    cache["unembed.hook_out"] = t["logits"]
    return cache


def test_transformer_lens_cache_matches_through_the_tl_map(tmp_path):
    ref = toy_trace(IDS)
    report = diff_traces(ref, _load_dump(tmp_path, tl_cache(ref)), names="transformer-lens")
    assert report.first_divergence is None
    compared = {s.name for s in report.compared}
    assert {"blocks.1.attn.q", "blocks.1.attn.z", "blocks.0.attn.masked_scores", "embed.out", "logits"} <= compared
    names = report.extras["names"]
    assert {"from": "blocks.0.attn.hook_q", "to": "blocks.0.attn.q",
            "layout": "[batch, pos, head, d_head] -> [batch, head, pos, d_head]"} in names["renamed"]
    ignored = {i["name"] for i in names["ignored"]}
    assert {"blocks.1.hook_resid_pre", "blocks.0.ln1.hook_scale"} <= ignored
    assert names["unmatched"] == []


def test_transformer_lens_cache_with_one_wrong_head_diverges_at_that_step(tmp_path):
    ref = toy_trace(IDS)
    cache = tl_cache(ref)
    z = cache["blocks.1.attn.hook_z"].copy()
    z[0, :, 1, :] += 0.5  # head 1, every position: in TL's [batch, pos, head, d_head]
    cache["blocks.1.attn.hook_z"] = z
    first = diff_traces(ref, _load_dump(tmp_path, cache), names="tl").first_divergence
    assert first.name == "blocks.1.attn.z" and first.reason == "numeric"
    assert "heads=1" in first.detail  # reported in tracer's axes after the transpose


def test_without_the_map_a_tl_cache_shares_no_step_names(tmp_path):
    ref = toy_trace(IDS)
    report = diff_traces(ref, _load_dump(tmp_path, tl_cache(ref)))
    assert not report.compared


def hf_dump(t: Trace, n_layers=2) -> dict[str, np.ndarray]:
    """A port's forward hooks on transformers' llama modules, keyed by module path, written out by hand."""
    mask = t["blocks.0.attn.mask"]
    additive = np.where(mask, 0.0, np.finfo(np.float32).min).astype(np.float32)
    dump = {"model.embed_tokens": t["embed.out"]}
    for i in range(n_layers):
        p, m = f"blocks.{i}.", f"model.layers.{i}."
        dump.update({
            m + "input_layernorm": t[p + "ln1.out"],
            m + "self_attn.q_proj": _merge_heads(t[p + "attn.q"]),
            m + "self_attn.k_proj": _merge_heads(t[p + "attn.k"]),
            m + "self_attn.v_proj": _merge_heads(t[p + "attn.v"]),
            m + "self_attn:attention_mask": additive,
            m + "self_attn:output[1]": t[p + "attn.weights"],
            m + "self_attn.o_proj:input": _merge_heads(t[p + "attn.z"]),
            m + "self_attn": t[p + "attn.out"],
            m + "post_attention_layernorm:input": t[p + "resid_mid"],
            m + "post_attention_layernorm": t[p + "ln2.out"],
            m + "mlp.gate_proj": t[p + "mlp.pre"],
            m + "mlp.up_proj": t[p + "mlp.up"],
            m + "mlp.down_proj:input": t[p + "mlp.post"],
            m + "mlp": t[p + "mlp.out"],
            m + "rotary_emb": np.zeros(3, np.float32),  # something the map does not know
        })
        dump[m[:-1]] = t[p + "resid_post"]
    dump["model.norm"] = t["final_norm.out"]
    dump["lm_head"] = t["logits"]
    return dump


def test_transformers_module_dump_matches_through_the_hf_map(tmp_path):
    ref = toy_trace(IDS)
    report = diff_traces(ref, _load_dump(tmp_path, hf_dump(ref)), names="hf")
    assert report.first_divergence is None
    compared = {s.name for s in report.compared}
    assert {"embed.tokens", "embed.out", "blocks.0.attn.q", "blocks.1.attn.z", "blocks.0.attn.mask",
            "blocks.1.resid_mid", "blocks.1.mlp.post", "logits"} <= compared
    assert [u for u in report.extras["names"]["unmatched"]] == ["model.layers.0.rotary_emb", "model.layers.1.rotary_emb"]
    assert {s.name for s in report.steps if s.status == "missing"} >= {"blocks.0.attn.scores", "probs"}


def test_hf_dump_diverges_at_the_module_that_differs(tmp_path):
    ref = toy_trace(IDS)
    dump = hf_dump(ref)
    dump["model.layers.1.mlp.up_proj"] = dump["model.layers.1.mlp.up_proj"] * np.float32(1.05)
    first = diff_traces(ref, _load_dump(tmp_path, dump), names="hf").first_divergence
    assert first.name == "blocks.1.mlp.up"


def test_hf_map_splits_fused_qkv_and_gate_up_projections(tmp_path):
    ref = toy_trace(IDS, family="phi3")
    dump = {}
    for i in range(2):
        p, m = f"blocks.{i}.", f"model.layers.{i}."
        q, k, v = (_merge_heads(ref[p + f"attn.{x}"]) for x in "qkv")
        dump[m + "self_attn.qkv_proj"] = np.concatenate([q, k, v], axis=-1)
        dump[m + "mlp.gate_up_proj"] = np.concatenate([ref[p + "mlp.pre"], ref[p + "mlp.up"]], axis=-1)
    report = diff_traces(ref, _load_dump(tmp_path, dump), names="hf")
    assert report.first_divergence is None
    assert {f"blocks.{i}.{s}" for i in range(2) for s in ("attn.q", "attn.k", "attn.v", "mlp.pre", "mlp.up")} \
        == {s.name for s in report.compared}


def test_hf_map_needs_a_reference_that_knows_its_modules(tmp_path):
    ref = toy_trace(IDS)
    plain = _load_dump(tmp_path, {s.name: s.array for s in ref.steps}, "plain.safetensors")
    with pytest.raises(TracerError, match="transformers modules"):
        diff_traces(plain, _load_dump(tmp_path, hf_dump(ref)), names="hf")


def test_user_json_map_with_block_templates_and_a_transpose(tmp_path):
    ref = toy_trace(IDS)
    dump = {f"layer{i}/q": _heads_last(ref[f"blocks.{i}.attn.q"]) for i in range(2)}
    dump.update({f"layer{i}/out": ref[f"blocks.{i}.resid_post"] for i in range(2)})
    dump["scratch"] = np.zeros(2, np.float32)
    spec = {"layer{i}/q": {"name": "blocks.{i}.attn.q", "transpose": [0, 2, 1, 3]},
            "layer{i}/out": "blocks.{i}.resid_post", "scratch": None}
    (tmp_path / "map.json").write_text(json.dumps(spec))
    report = diff_traces(ref, _load_dump(tmp_path, dump), names=str(tmp_path / "map.json"))
    assert report.first_divergence is None
    assert {s.name for s in report.compared} == {"blocks.0.attn.q", "blocks.1.attn.q", "blocks.0.resid_post", "blocks.1.resid_post"}
    assert report.extras["names"]["ignored"][0]["name"] == "scratch"


def test_user_toml_map_with_dotted_keys(tmp_path):
    ref = toy_trace(IDS)
    dump = {"enc.layers.0.mlp_out": ref["blocks.0.mlp.out"][0]}  # written without the batch axis
    (tmp_path / "map.toml").write_text('[enc.layers]\n"0.mlp_out" = "blocks.0.mlp.out"\n')
    report = diff_traces(ref, _load_dump(tmp_path, dump), names=str(tmp_path / "map.toml"))
    assert [s.name for s in report.compared] == ["blocks.0.mlp.out"]
    assert report.first_divergence is None
    assert report.extras["names"]["renamed"][0]["layout"] == "batch axis added"


def test_a_bad_map_is_a_clear_error(tmp_path):
    ref = toy_trace(IDS)
    (tmp_path / "bad.json").write_text('{"x": {"name": "embed.out", "transpose": [0, 0]}}')
    dump = _load_dump(tmp_path, {"x": ref["embed.out"]})
    with pytest.raises(TracerError, match="transpose"):
        diff_traces(ref, dump, names=str(tmp_path / "bad.json"))
    with pytest.raises(TracerError, match="neither a built-in map nor a map file"):
        diff_traces(ref, dump, names="nonsense")


def test_a_foreign_reference_is_translated_instead_of_the_tracer_trace(tmp_path):
    mine = toy_trace(IDS, toy_weights(seed=0))
    ref = _load_dump(tmp_path, tl_cache(mine))
    report = diff_traces(ref, mine, names="tl")
    assert report.extras["names"]["applied_to"] == "ref"
    assert report.first_divergence is None and len(report.compared) > 20
