"""The newer families (qwen3, olmo2, phi, gemma2/3, MoE, ...) and rope scalings beyond parity: the pieces
each adds, checked on their own."""

import numpy as np
import pytest

from conftest import model_dir
from fixture_tools import rerouted_copy
from tracer import load_model
from tracer.arch.spec import RopeSpec
from tracer.engine.ops import softcap
from tracer.engine.rope import inverse_frequencies, yarn_correction_range
from tracer.model.keep import step_sizes
from tracer.report.card import model_card


def test_softcap_bounds_and_keeps_small_values():
    x = np.array([-1e6, -3.0, 0.0, 1e-3, 3.0, 1e6], dtype=np.float32)
    y = softcap(x, 5.0)
    assert y.dtype == np.float32 and np.all(np.abs(y) <= 5.0)
    assert abs(y[3] - 1e-3) < 1e-7 and y[0] == -5.0 and y[-1] == 5.0


def test_gemma2_caps_scores_and_logits():
    t = load_model(model_dir("gemma2")).run(ids=[[3, 4, 5, 6, 7]])
    raw, capped = t["blocks.0.attn.scores.raw"], t["blocks.0.attn.scores"]
    np.testing.assert_allclose(capped, np.tanh(raw / 5.0) * 5.0, rtol=1e-6)
    assert np.abs(t["logits"]).max() < 3.0 < np.abs(t["logits.raw"]).max(), "the fixture's caps must bite"


def test_gemma3_ignores_attention_softcap_like_transformers():
    spec = load_model(model_dir("gemma3_text")).spec
    assert spec.attn_softcap is None and spec.logit_softcap == 3.0
    assert spec.rope.theta != spec.rope_local.theta


def test_olmo2_qk_norm_spans_all_heads():
    t = load_model(model_dir("olmo2")).run(ids=[[3, 4, 5]])
    q = t["blocks.0.attn.q_norm"]  # [batch, heads, pos, d_head]
    per_token = q.transpose(0, 2, 1, 3).reshape(1, 3, -1)  # all heads of one token together
    per_head_rms = np.sqrt((q * q).mean(-1))
    assert per_head_rms.std() > 0.05, "per head the rms varies: the norm is not per head"
    assert per_token.shape[-1] == q.shape[1] * q.shape[3]


def test_phi_shares_one_norm_and_has_no_ln2():
    t = load_model(model_dir("phi")).run(ids=[[3, 4, 5]])
    assert "blocks.0.ln1.out" in t and "blocks.0.ln2.out" not in t and "blocks.0.resid_mid" not in t


def test_longrope_switches_factors_past_original_length():
    rope = RopeSpec(theta=10000.0, rotary_dim=8, scaling="longrope", original_max_positions=8,
                    short_factor=(1.0, 1.0, 1.0, 1.0), long_factor=(2.0, 2.0, 2.0, 2.0))
    short, long = inverse_frequencies(rope, np.float64, 8), inverse_frequencies(rope, np.float64, 9)
    np.testing.assert_allclose(long * 2, short)


def test_dynamic_is_plain_rope_within_max_positions_and_slower_past_it():
    rope = RopeSpec(theta=10000.0, rotary_dim=8, scaling="dynamic", factor=4.0, max_positions=8)
    plain = inverse_frequencies(RopeSpec(theta=10000.0, rotary_dim=8), np.float64)
    np.testing.assert_allclose(inverse_frequencies(rope, np.float64, 8), plain)
    past = inverse_frequencies(rope, np.float64, 32)
    assert past[0] == plain[0] and np.all(past[1:] < plain[1:])


def test_yarn_keeps_high_frequencies_and_divides_low_ones():
    rope = RopeSpec(theta=100.0, rotary_dim=16, scaling="yarn", factor=4.0, original_max_positions=64)
    low, high = yarn_correction_range(rope)
    plain = inverse_frequencies(RopeSpec(theta=100.0, rotary_dim=16), np.float64)
    scaled = inverse_frequencies(rope, np.float64)
    assert scaled[0] == plain[0]  # below the ramp: kept
    np.testing.assert_allclose(scaled[-1], plain[-1] / 4)  # above it: interpolated
    assert 0 <= low < high <= 15


def test_dynamic_model_runs_past_max_position_embeddings_without_a_flag():
    model = load_model(model_dir("llama-dynamic"))
    assert model.spec.extras["max_position_embeddings"] == 8
    t = model.run(ids=[list(range(4, 24))])
    assert t["logits"].shape[1] == 20


@pytest.mark.parametrize("name,needle", [("llama-yarn", "cos/sin x1.139"), ("llama-longrope", "long past"),
                                         ("llama-dynamic", "past 8 positions"), ("gemma3_text", "sliding layers")])
def test_model_card_shows_the_rope_scaling(name, needle):
    model = load_model(model_dir(name))
    card = model_card({"model": {"spec": model.spec.to_dict()}})
    assert needle in card["rope_scaling"]


def test_plain_models_have_no_rope_scaling_line_and_skip_absent_steps_in_the_budget():
    spec = load_model(model_dir("mistral")).spec
    assert model_card({"model": {"spec": spec.to_dict()}})["rope_scaling"] is None
    sizes = step_sizes(spec, 1, 16, 4)
    assert "blocks.*.attn.scores.raw" not in sizes and "blocks.*.attn.q_norm" not in sizes
    assert "blocks.*.attn.scores.raw" in step_sizes(load_model(model_dir("gemma2")).spec, 1, 16, 4)


@pytest.mark.parametrize("name", ["qwen3", "olmo2", "starcoder2", "phi", "gemma2", "gemma3_text", "opt-350m",
                                  "mixtral", "qwen3_moe", "qwen2_moe", "qwen3_moe-dense", "phi-qk"])
def test_shape_flow_knows_the_inputs_of_every_new_step(name):
    from tracer.report.flow import inputs_by_step

    model = load_model(model_dir(name))
    t = model.run(ids=[[3, 4, 5]])
    inputs = inputs_by_step(model.spec, set(t.names()))
    assert [n for n in t.names() if not n.startswith("input.") and not inputs.get(n)] == []


# ---------- mixture of experts ----------


@pytest.mark.parametrize("name", ["mixtral", "qwen3_moe", "qwen2_moe", "qwen3_moe-dense"])
@pytest.mark.parametrize("reference", ["reference.safetensors", "reference_batch.safetensors"])
def test_moe_chooses_the_experts_transformers_chose_token_by_token(name, reference):
    from tracer.trace import Trace
    from parity_check import run_like

    folder = model_dir(name)
    ref = Trace.load(folder / reference)
    ours = run_like(load_model(folder), ref)
    real = ref["input.mask"].astype(bool)
    spec = load_model(folder).spec
    for i in range(spec.n_layers):
        if not spec.moe.on(i):  # qwen2/3_moe's dense layers: no router on either side
            assert f"blocks.{i}.mlp.router.experts" not in ref and f"blocks.{i}.mlp.router.experts" not in ours
            continue
        theirs = ref[f"blocks.{i}.mlp.router.experts"]
        assert theirs.dtype == np.int64 and ours[f"blocks.{i}.mlp.router.experts"].dtype == np.int64
        np.testing.assert_array_equal(ours[f"blocks.{i}.mlp.router.experts"][real], theirs[real])


@pytest.mark.parametrize("name,normalized", [("mixtral", True), ("qwen3_moe", False)])
def test_moe_output_is_the_weighted_sum_of_the_chosen_experts(name, normalized):
    t = load_model(model_dir(name)).run(ids=[[3, 4, 5, 6, 7, 8]])
    w, y = t["blocks.0.mlp.router.weights"], t["blocks.0.mlp.expert_out"]  # [b, t, k], [b, t, k, d]
    np.testing.assert_allclose((w[..., None] * y).sum(axis=2), t["blocks.0.mlp.out"], rtol=1e-5, atol=1e-6)
    assert np.allclose(w.sum(-1), 1.0) == normalized
    experts = t["blocks.0.mlp.router.experts"]
    assert len(np.unique(experts)) > 1, "the fixture should route tokens to different experts"
    logits = t["blocks.0.mlp.router.logits"]
    assert np.all(np.take_along_axis(logits, experts[..., :1], -1) >= logits.max(-1, keepdims=True) - 1e-6)


def test_routing_section_lists_each_tokens_experts_and_the_load(tmp_path):
    from typer.testing import CliRunner

    from tracer.cli.main import app

    result = CliRunner().invoke(app, ["run", "--model", str(model_dir("mixtral")), "--ids", "5,17,42,60,61",
                                      "--only", "routing", "--json"], env={"NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    import json

    routing = json.loads(result.output)["routing"]
    assert routing["top_k"] == 2 and routing["n_experts"] == 4 and len(routing["tokens"]) == 5
    assert all(len(t["experts"]) == 2 and abs(sum(t["weights"]) - 1) < 1e-5 for t in routing["tokens"])
    assert [sum(row["tokens"]) for row in routing["load"]] == [10, 10]  # 5 tokens x 2 experts, every layer
    screen = CliRunner().invoke(app, ["run", "--model", str(model_dir("mixtral")), "--ids", "5,17,42",
                                      "--only", "routing"], env={"NO_COLOR": "1", "COLUMNS": "60"})
    assert screen.exit_code == 0 and "Routing" in screen.output and "e0" in screen.output


def test_routing_section_is_skipped_for_dense_models():
    from typer.testing import CliRunner

    from tracer.cli.main import app

    result = CliRunner().invoke(app, ["run", "--model", str(model_dir("llama")), "--ids", "5,17", "--json"])
    import json

    assert "routing" not in json.loads(result.output)["sections"]


def test_diff_names_the_first_token_routed_differently(tmp_path):
    import json

    from typer.testing import CliRunner

    from tracer.cli.main import app
    from tracer.diff.compare import compare

    ref = load_model(model_dir("mixtral")).run(ids=[[5, 17, 42, 60, 61, 70]])
    mine = rerouted_copy(ref, block=1, pos=3)
    report = compare(ref, mine)
    choice = report.extras["expert_choice"]
    assert (choice["block"], choice["row"], choice["pos"], choice["tokens_rerouted"]) == (1, 0, 3, 1)
    assert sorted(choice["ref"]) != sorted(choice["mine"])
    assert "expert_choice" not in compare(ref, ref).extras
    ref.save(tmp_path / "a.safetensors")
    mine.save(tmp_path / "b.safetensors")
    runner = CliRunner()
    screen = runner.invoke(app, ["diff", str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")],
                           env={"NO_COLOR": "1", "COLUMNS": "100"})
    assert "ROUTED DIFFERENTLY" in screen.output and "position 3" in screen.output
    assert screen.output.index("ROUTED DIFFERENTLY") < screen.output.index("First divergence")
    out = runner.invoke(app, ["diff", str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors"), "--json"])
    assert json.loads(out.output)["expert_choice"]["pos"] == 3


def test_html_page_has_a_routing_section_for_moe(tmp_path):
    from typer.testing import CliRunner

    from tracer.cli.main import app

    page = tmp_path / "moe.html"
    result = CliRunner().invoke(app, ["run", "--model", str(model_dir("qwen3_moe")), "--ids", "5,17,42",
                                      "--export-html", str(page)], env={"NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    html = page.read_text()
    assert 'data-routing="1"' in html and "load: tokens each expert served" in html


@pytest.mark.parametrize("name", ["gemma2", "opt-350m"])
def test_logit_lens_last_layer_is_the_models_output(name):
    """The lens applies what the head does after the final norm: gemma2's capping, opt-350m's project_out."""
    from tracer.report.lens import logit_lens

    model = load_model(model_dir(name))
    t = model.run(ids=[[5, 17, 42, 60]])
    layers = logit_lens(t, model.weights, model.spec, 0, 3)
    np.testing.assert_allclose(layers[-1].probs, t["probs"][0, 3], rtol=1e-5, atol=1e-7)


def test_gemma3_reads_the_transformers_4_rope_layout():
    """4.x configs: rope_theta + rope_scaling for global layers, rope_local_base_freq for sliding ones."""
    import json

    from tracer.arch import gemma3_text

    cfg = json.loads((model_dir("gemma3_text") / "config.json").read_text())
    new = gemma3_text.spec_from_config(cfg)
    old_cfg = {k: v for k, v in cfg.items() if k != "rope_parameters"}
    old_cfg.update(rope_theta=1e6, rope_local_base_freq=10000.0, rope_scaling={"rope_type": "linear", "factor": 4.0})
    old = gemma3_text.spec_from_config(old_cfg)
    assert (old.rope, old.rope_local) == (new.rope, new.rope_local)
