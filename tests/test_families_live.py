"""Issue 10's families through the transformers capture: names point at real modules, hooks agree with
transformers' outputs, every captured step is a catalogue step with its axes, and each step comes out in
the layout tracer computes it in. (Fresh-reference parity is in test_parity_live.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from test_capture_live import _forward, _model, _prompt_ids, build_fixtures
from tracer.arch import hf_names
from tracer.steps import describe

pytestmark = pytest.mark.live
NEW = ("qwen3", "olmo2", "starcoder2", "phi", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "opt-350m", "opt-project",
       "llama-dynamic", "llama-longrope")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_fixtures(tmp_path_factory, NEW, lambda builder, folder: builder.write_prompts(folder))


@pytest.mark.parametrize("name", NEW)
def test_hf_names_point_at_real_modules_when_their_condition_holds(built, name):
    from tracer.capture.hf import _condition_holds

    model, family = _model(built[name])
    modules = dict(model.named_modules())
    for template, (module, _) in hf_names.HF_NAMES[family].items():
        if _condition_holds(family, template, model.config):
            assert module.format(i=1) in modules, (template, module)


@pytest.mark.parametrize("name", NEW)
def test_hooks_agree_with_transformers_outputs_and_follow_the_catalogue(built, name):
    model, hooks, outputs = _forward(built[name], _prompt_ids(built[name]))
    for step in sorted(set(hooks) & set(outputs)):
        np.testing.assert_array_equal(hooks[step], outputs[step], err_msg=step)
    for step, array in {**hooks, **outputs}.items():
        doc = describe(step)
        assert doc is not None and array.ndim == len(doc.axes), step


@pytest.mark.parametrize("name", NEW)
def test_captured_steps_have_tracers_values(built, name):
    """Every step the capture takes from a hook equals tracer's own step (float32 tolerance)."""
    from test_parity import ATOL32, compare
    from tracer import load_model
    from tracer.capture import capture

    ids = _prompt_ids(built[name])
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
    from test_parity import ATOL32, compare
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
