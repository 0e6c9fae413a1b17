"""Issue 10's families through the transformers capture: names point at real modules, hooks agree with
transformers' outputs, every captured step is a catalogue step with its axes, and each step comes out in
the layout tracer computes it in. (Fresh-reference parity is in test_parity_live.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from hf_capture import build_fixtures, hf_forward, hf_model, prompt_ids
from tracer.names import hf as hf_names
from tracer.steps import describe

pytestmark = pytest.mark.live
NEW = ("qwen3", "olmo2", "starcoder2", "phi", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "opt-350m", "opt-project",
       "llama-dynamic", "llama-longrope", "qwen2_moe", "qwen3_moe-dense", "phi-qk")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_fixtures(tmp_path_factory, NEW, lambda builder, folder: builder.write_prompts(folder))


@pytest.mark.parametrize("name", NEW)
def test_hf_names_point_at_real_modules_when_their_condition_holds(built, name):
    from tracer.capture.hf import _condition_holds, _in_layer

    model, family = hf_model(built[name])
    modules = dict(model.named_modules())
    for template, (module, _) in hf_names.HF_NAMES[family].items():
        if _condition_holds(family, template, model.config):
            layers = [i for i in range(model.config.num_hidden_layers) if _in_layer(family, template, model.config, i)]
            for i in layers:  # qwen2/3_moe: the router where the layer has experts, the MLP where it does not
                assert module.format(i=i) in modules, (template, module, i)


@pytest.mark.parametrize("name", NEW)
def test_hooks_agree_with_transformers_outputs_and_follow_the_catalogue(built, name):
    model, hooks, outputs = hf_forward(built[name], prompt_ids(built[name]))
    for step in sorted(set(hooks) & set(outputs)):
        np.testing.assert_array_equal(hooks[step], outputs[step], err_msg=step)
    for step, array in {**hooks, **outputs}.items():
        doc = describe(step)
        assert doc is not None and array.ndim == len(doc.axes), step


@pytest.mark.parametrize("name", NEW)
def test_captured_steps_have_tracers_values(built, name):
    """Every step the capture takes from a hook equals tracer's own step (float32 tolerance)."""
    from parity_check import ATOL32, compare
    from tracer import load_model
    from tracer.capture import capture

    ids = prompt_ids(built[name])
    ref = capture(built[name], ids)
    ours = load_model(built[name]).run(ids=ids)
    errors = compare(ref, ours, ATOL32)
    hooked = [s.name for s in ref.steps if s.op.startswith("hf:") and not s.name.startswith("input.")
              and "hidden_states" not in s.op and "attentions" not in s.op]
    assert hooked and all(n in errors for n in hooked if n in ours), [n for n in hooked if n in ours and n not in errors]


def test_llama_with_mlp_bias_matches_transformers(tmp_path):
    """`mlp_bias: true` puts a bias on gate, up and down: all three must be read and applied."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    from parity_check import ATOL32, compare
    from tracer import load_model
    from tracer.capture import capture

    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, mlp_bias=True, max_position_embeddings=32)
    model = tf.LlamaForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("mlp.gate_proj.bias") or name.endswith("mlp.up_proj.bias") or name.endswith("mlp.down_proj.bias"):
                param.normal_(0, 0.5)
    model.save_pretrained(tmp_path)
    ref = capture(tmp_path, ids=[[3, 9, 27, 5]])
    ours = load_model(tmp_path)
    assert ours.spec.mlp_bias and "blocks.0.mlp.b_up" in ours.weights
    errors = compare(ref, ours.run(ids=[[3, 9, 27, 5]]), ATOL32)
    assert "logits" in errors and "blocks.1.mlp.out" in errors


# ---------- qwen2/3_moe dense layers, phi qk_layernorm: left padding and the layer rule against transformers ----------


@pytest.mark.parametrize("name", ["qwen2_moe", "qwen3_moe-dense", "phi-qk", "qwen3_moe", "mixtral"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_left_padded_batch_matches_transformers(built, name, dtype):
    """A left-padded batch captured from transformers now: every step within the parity tolerance, and
    the chosen experts equal token by token."""
    from parity_check import ATOL32, ATOL64, compare, run_like
    from tracer import load_model
    from tracer.capture import capture

    rows = [prompt_ids(built[name])[0], [33, 8, 12, 40]]
    width = max(len(r) for r in rows)
    ids = [[2] * (width - len(r)) + r for r in rows]  # 2: <pad>
    mask = [[0] * (width - len(r)) + [1] * len(r) for r in rows]
    ref = capture(built[name], ids, attention_mask=mask, dtype=dtype)
    assert ref["input.mask"][1, 0] == 0
    ours = run_like(load_model(built[name], dtype=dtype), ref)
    errors = compare(ref, ours, ATOL32 if dtype == "float32" else ATOL64)
    assert "logits" in errors
    real = ref["input.mask"].astype(bool)
    routers = [n for n in ref.names() if n.endswith("mlp.router.experts")]
    assert bool(routers) == ("moe" in name or name == "mixtral")
    for n in routers:
        np.testing.assert_array_equal(ours[n][real], ref[n][real], err_msg=n)


@pytest.mark.parametrize("family", ["qwen2_moe", "qwen3_moe"])
@pytest.mark.parametrize("fields", [dict(decoder_sparse_step=2), dict(mlp_only_layers=[0, 3]),
                                    dict(decoder_sparse_step=3, mlp_only_layers=[2]), dict(num_experts=0)])
def test_moe_layers_are_the_ones_transformers_builds(family, fields):
    """tracer's MoE-or-dense decision per layer equals the block class transformers instantiates."""
    import json

    tf = pytest.importorskip("transformers")
    from tracer.arch.registry import adapter_for

    cls = {"qwen2_moe": tf.Qwen2MoeConfig, "qwen3_moe": tf.Qwen3MoeConfig}[family]
    sizes = dict(vocab_size=16, hidden_size=8, intermediate_size=12, moe_intermediate_size=4, num_hidden_layers=6,
                 num_attention_heads=2, num_key_value_heads=1, num_experts=4, num_experts_per_tok=2)
    if family == "qwen2_moe":
        sizes["shared_expert_intermediate_size"] = 4
    config = cls(**{**sizes, **fields})
    model = tf.AutoModelForCausalLM.from_config(config)
    theirs = tuple(type(layer.mlp).__name__.endswith("SparseMoeBlock") for layer in model.model.layers)
    spec = adapter_for(json.loads(config.to_json_string())).spec_from_config(json.loads(config.to_json_string()))
    ours = tuple(spec.moe.on(i) for i in range(6)) if spec.moe is not None else (False,) * 6
    assert ours == theirs
