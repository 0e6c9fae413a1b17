"""Issue 10, the rest of the families: qwen2_moe (routed experts plus a gated shared expert, a dense layer),
qwen3_moe with dense layers (mlp_only_layers, decoder_sparse_step), phi with qk_layernorm. Parity with
transformers is in test_parity.py (float32, float64, right-padded batch) and the expert choice token by
token in test_family_pieces.py; here the pieces, the views and the refusals."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import model_dir
from hostile import assert_contract, copy_model, edit_config, run_model
from tracer import load_model
from tracer.cli.main import app

IDS = [[5, 17, 42, 60, 61, 70, 9]]


def _cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"NO_COLOR": "1", "COLUMNS": "100"})


# ---------- qwen2_moe: the shared expert ----------


def test_qwen2_moe_output_is_routed_sum_plus_gated_shared_expert():
    t = load_model(model_dir("qwen2_moe")).run(ids=IDS)
    w, y = t["blocks.0.mlp.router.weights"], t["blocks.0.mlp.expert_out"]  # [b, t, k], [b, t, k, d]
    gate, shared = t["blocks.0.mlp.shared.gate"], t["blocks.0.mlp.shared.out"]  # [b, t], [b, t, d]
    assert gate.shape == t["input.ids"].shape and np.all((gate > 0) & (gate < 1))
    routed = (w[..., None] * y).sum(axis=2)
    np.testing.assert_allclose(routed + gate[..., None] * shared, t["blocks.0.mlp.out"], rtol=1e-5, atol=1e-6)
    assert np.abs(gate[..., None] * shared).max() > 1e-2, "the shared expert must matter in the fixture"
    assert not np.allclose(w.sum(-1), 1.0), "norm_topk_prob false: router probabilities, not renormalised"


def test_qwen2_moe_dense_layer_has_an_mlp_and_no_router():
    model = load_model(model_dir("qwen2_moe"))
    assert [model.spec.moe.on(i) for i in range(3)] == [True, False, True]
    assert model.spec.qkv_bias and not model.spec.o_bias and model.spec.moe.d_shared == 48
    t = model.run(ids=IDS)
    assert t["blocks.1.mlp.pre"].shape[-1] == model.spec.d_ff == 64
    assert not any(n.startswith("blocks.1.mlp.router") or n.startswith("blocks.1.mlp.shared") for n in t.names())
    assert "blocks.0.mlp.pre" not in t and "blocks.2.mlp.shared.out" in t


def test_qwen3_moe_sparse_step_makes_the_first_layer_dense():
    model = load_model(model_dir("qwen3_moe-dense"))
    assert model.spec.moe.layers == (False, True)
    t = model.run(ids=IDS)
    assert "blocks.0.mlp.up" in t and "blocks.0.mlp.router.logits" not in t and "blocks.1.mlp.router.logits" in t


@pytest.mark.parametrize("fields,expected", [
    ({}, (True,) * 6),
    ({"decoder_sparse_step": 2}, (False, True, False, True, False, True)),
    ({"decoder_sparse_step": 3, "mlp_only_layers": [5]}, (False, False, True, False, False, False)),
    ({"mlp_only_layers": [0, 4]}, (False, True, True, True, False, True)),
    ({"num_experts": 0}, (False,) * 6),
])
def test_moe_layers_follow_transformers_rule(fields, expected):
    """not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0 (transformers' Qwen2/3-MoE decoder layer)."""
    from tracer.arch.qwen3_moe import sparse_layers

    cfg = {"num_hidden_layers": 6, "num_experts": 4, **fields}
    assert sparse_layers(cfg, "qwen3_moe") == expected


def test_every_layer_dense_is_a_dense_model():
    from tracer.arch import qwen2_moe

    cfg = json.loads((model_dir("qwen2_moe") / "config.json").read_text())
    assert qwen2_moe.spec_from_config(dict(cfg, mlp_only_layers=[0, 1, 2])).moe is None


def test_qwen2_moe_sliding_default_is_transformers_5s():
    """Without layer_types: even-numbered layers below max_window_layers slide (Qwen2MoeConfig.__post_init__)."""
    from tracer.arch.qwen2_moe import layer_windows

    cfg = {"num_hidden_layers": 5, "use_sliding_window": True, "sliding_window": 4, "max_window_layers": 3}
    assert layer_windows(cfg) == (4, None, 4, None, None)
    assert layer_windows(dict(cfg, use_sliding_window=False)) == (None,) * 5


def test_routing_view_and_load_skip_the_dense_layer():
    result = _cli("run", "--model", model_dir("qwen2_moe"), "--ids", "5,17,42,60", "--only", "routing", "--json")
    assert result.exit_code == 0, result.output
    routing = json.loads(result.output)["routing"]
    assert routing["layers"] == [0, 2] and routing["normalized"] is False and routing["shared"] == 48
    gates = [t["shared_gate"] for t in routing["tokens"]]
    assert len(gates) == 4 and all(0 < g < 1 for g in gates) and len(set(gates)) > 1
    assert [sum(row["tokens"]) for row in routing["load"]] == [8, 8]  # 4 tokens x 2 experts, MoE layers only
    screen = _cli("run", "--model", model_dir("qwen2_moe"), "--ids", "5,17,42", "--only", "routing")
    assert screen.exit_code == 0 and "Routing" in screen.output and "shared gate" in screen.output
    mixtral = _cli("run", "--model", model_dir("mixtral"), "--ids", "5,17,42", "--only", "routing")
    assert "shared gate" not in mixtral.output


def test_diff_names_the_first_token_routed_differently_past_a_dense_layer():
    from fixture_tools import rerouted_copy
    from tracer.diff.compare import compare

    ref = load_model(model_dir("qwen2_moe")).run(ids=IDS)
    mine = rerouted_copy(ref, block=2, pos=4)
    choice = compare(ref, mine).extras["expert_choice"]
    assert (choice["block"], choice["pos"], choice["tokens_rerouted"]) == (2, 4, 1)


def test_cost_counts_the_shared_expert_and_the_dense_layer():
    result = _cli("cost", "--model", model_dir("qwen2_moe"), "--tokens", "8", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["step"]: r for r in json.loads(result.output)["steps"]["rows"]}
    assert rows["blocks.{i}.mlp.shared.out"]["layers"] == 2 and rows["blocks.{i}.mlp.shared.out"]["macs"] > 0
    assert rows["blocks.{i}.mlp.router.logits"]["layers"] == 2 and rows["blocks.{i}.mlp.pre"]["layers"] == 1
    assert rows["blocks.{i}.mlp.out"]["layers"] == 3
    order = list(rows)  # the dense layer's steps sit between ln2.out and mlp.out, as in a pass
    assert order.index("blocks.{i}.ln2.out") < order.index("blocks.{i}.mlp.pre") < order.index("blocks.{i}.mlp.out")
    assert order.index("blocks.{i}.ln1.out") < order.index("blocks.{i}.attn.q") and order[-1] == "probs"


def test_shared_expert_flops_are_a_gated_mlp_on_every_token():
    from tracer.cost.counts import Pass
    from tracer.cost.routes import pass_costs

    spec = load_model(model_dir("qwen2_moe")).spec
    costs = {c.name: c for c in pass_costs(spec, Pass(batch=1, q_len=8, itemsize=4))}
    assert costs["blocks.0.mlp.shared.out"].macs == 8 * 3 * spec.d_model * 48
    assert costs["blocks.0.mlp.shared.gate"].macs == 8 * spec.d_model
    assert "blocks.1.mlp.shared.out" not in costs and costs["blocks.1.mlp.pre"].macs == 8 * spec.d_model * spec.d_ff


@pytest.mark.parametrize("name", ["qwen2_moe", "qwen3_moe-dense"])
def test_one_layer_per_kind_stands_for_the_others(name):
    """cost's fast path counts one layer per (window, MoE or dense) kind: the totals must not change."""
    from tracer.cost.counts import Pass
    from tracer.cost.routes import pass_costs

    spec = load_model(model_dir(name)).spec
    full = pass_costs(spec, Pass(batch=1, q_len=8, itemsize=4))
    fast = pass_costs(spec, Pass(batch=1, q_len=8, itemsize=4), one_per_window=True)
    assert sum(c.flops for c in full) == sum(c.flops * c.repeat for c in fast)


def test_steps_lists_the_shared_expert_steps():
    result = _cli("steps", "--json")
    assert result.exit_code == 0, result.output
    text = result.output
    assert "blocks.{i}.mlp.shared.out" in text and "blocks.{i}.mlp.shared.gate" in text


# ---------- phi with qk_layernorm ----------


def test_phi_qk_layernorm_is_a_layernorm_over_d_head_per_head():
    model = load_model(model_dir("phi-qk"))
    assert model.spec.qk_norm == "head" and model.spec.norm == "layernorm"
    t = model.run(ids=IDS)
    w, b = model.weights["blocks.0.attn.q_norm.w"], model.weights["blocks.0.attn.q_norm.b"]  # [d_head]
    assert np.abs(b).max() > 0.01, "the fixture's norm bias must not be zero"
    unit = (t["blocks.0.attn.q_norm"] - b) / w  # [batch, heads, pos, d_head]
    np.testing.assert_allclose(unit.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(unit.var(-1), 1.0, rtol=1e-3)
    assert "blocks.0.attn.k_norm" in t and "blocks.0.attn.q_rot" in t


def test_plain_phi_has_no_qk_norm():
    assert load_model(model_dir("phi")).spec.qk_norm == "none"


# ---------- left padding: the same numbers as right padding on real tokens ----------


@pytest.mark.parametrize("name", ["qwen2_moe", "qwen3_moe-dense", "phi-qk"])
def test_left_and_right_padding_agree_on_real_tokens(name):
    model = load_model(model_dir(name))
    rows = [[5, 17, 42, 60, 61, 70, 9], [33, 8, 12]]
    right, left = model.run(ids=rows, pad_side="right"), model.run(ids=rows, pad_side="left")
    for step in ("logits", "blocks.0.mlp.out", f"blocks.{model.spec.n_layers - 1}.resid_post"):
        np.testing.assert_allclose(left[step][1, -3:], right[step][1, :3], atol=1e-5, err_msg=step)
    if model.spec.moe is not None:
        layer = next(i for i in range(model.spec.n_layers) if model.spec.moe.on(i))
        experts = f"blocks.{layer}.mlp.router.experts"
        np.testing.assert_array_equal(left[experts][1, -3:], right[experts][1, :3])


# ---------- refusals: one error line, exit 2 ----------


@pytest.mark.parametrize("fields,fragment", [
    ({"mlp_only_layers": ["1"]}, "mlp_only_layers holds"),
    ({"mlp_only_layers": [7]}, "mlp_only_layers holds 7"),
    ({"mlp_only_layers": 1}, "mlp_only_layers is 1"),
    ({"decoder_sparse_step": 0}, "decoder_sparse_step is 0"),
    ({"num_experts_per_tok": 5}, "num_experts_per_tok is 5"),
    ({"shared_expert_intermediate_size": 0}, "shared_expert_intermediate_size is 0"),
    ({"qkv_bias": "yes"}, "qkv_bias"),
])
def test_bad_qwen2_moe_configs_are_refused(tmp_path, fields, fragment):
    folder = copy_model(tmp_path, "qwen2_moe")
    edit_config(folder, **fields)
    assert_contract(run_model(folder), fragment)


def test_qwen2_moe_config_disagreeing_with_its_weights_is_refused(tmp_path):
    folder = copy_model(tmp_path, "qwen2_moe")
    edit_config(folder, mlp_only_layers=[])  # layer 1 now expects experts the checkpoint lacks
    assert_contract(run_model(folder))


def test_phi_qk_layernorm_of_the_wrong_type_is_refused(tmp_path):
    folder = copy_model(tmp_path, "phi-qk")
    edit_config(folder, qk_layernorm="true")
    assert_contract(run_model(folder), "qk_layernorm")
