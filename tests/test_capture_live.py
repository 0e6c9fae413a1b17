"""The transformers capture and the fixture builder, checked against transformers itself.

Rebuilds the tiny fixtures into a temporary folder with fixtures/build_fixtures.py
and checks that captures use tracer's step names, axes and layouts, that the two
ways of seeing one forward pass (module hooks, transformers' outputs) agree, and
that the fused q/k/v and gate/up splits are the right slices (attention and the
MLP recomputed from the captured pieces reproduce transformers' own results).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys

import numpy as np
import pytest

from hf_capture import build_fixtures, hf_forward, hf_model, load_builder, prompt_ids
from tracer.errors import TracerError
from tracer.names import hf as hf_names
from tracer.steps import describe

FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "gemma", "phi3", "gpt_neox", "opt")
GATED = {"llama", "mistral", "qwen2", "gemma", "phi3"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """{family: folder} of freshly built fixtures (weights, tokenizer, references)."""
    return build_fixtures(tmp_path_factory, FAMILIES, lambda builder, folder: builder.write_references(folder))


# ---------- names, axes, shapes ----------


@pytest.mark.live
@pytest.mark.parametrize("family", FAMILIES)
def test_steps_follow_the_catalogue(built, family):
    from tracer.capture import capture

    folder = built[family]
    trace = capture(folder, prompt_ids(folder))
    config = json.loads((folder / "config.json").read_text())
    model, _ = hf_model(folder)
    from tracer.capture.hf import head_sizes

    heads, kv_heads, d_head = head_sizes(model.config)
    T = len(prompt_ids(folder)[0])
    d_ff = config.get("intermediate_size") or config.get("n_inner") or config.get("ffn_dim")
    sizes = {"batch": 1, "pos": T, "q_len": T, "kv_len": T, "d_model": model.config.hidden_size, "heads": heads, "kv_heads": kv_heads,
             "d_head": d_head, "d_ff": d_ff, "vocab": config["vocab_size"]}  # fmt: skip
    for step in trace.steps:
        doc = describe(step.name)
        assert doc is not None, f"{step.name} is not a catalogue step"
        assert step.axes == doc.axes, step.name
        expected = tuple(sizes[a] for a in step.axes)
        if step.name.endswith(".attn.mask"):  # broadcast over heads
            expected = expected[:1] + (1,) + expected[2:]
        assert step.shape == expected, step.name
        assert trace[step.name].shape == expected
        assert step.hf_module == hf_names.hf_module(family, step.name)
    assert trace.meta["model"] == {
        "name": family,
        "family": family,
        "config_sha256": hashlib.sha256((folder / "config.json").read_bytes()).hexdigest(),
    }
    assert trace.meta["source"].startswith("transformers ") and trace.meta["source"].endswith(" eager")


@pytest.mark.live
@pytest.mark.parametrize("family", FAMILIES)
def test_every_expected_step_is_there_in_execution_order(built, family):
    from tracer.capture import capture

    folder = built[family]
    names = capture(folder, prompt_ids(folder)).names()
    n_layers = json.loads((folder / "config.json").read_text()).get("num_hidden_layers") or 2
    block = ["ln1.out", "attn.q", "attn.k", "attn.v", "attn.weights", "attn.out", "ln2.out", "mlp.pre", "mlp.post", "mlp.out", "resid_post"]
    block += ["resid_mid"] if family != "gpt_neox" else []  # parallel residual: no stream between the sublayers
    block += ["mlp.up"] if family in GATED else []
    for i in range(n_layers):
        for part in block:
            assert f"blocks.{i}.{part}" in names
    assert f"blocks.{n_layers}.ln1.out" not in names
    assert ("blocks.0.resid_mid" in names) == (family != "gpt_neox")
    assert ("blocks.0.mlp.up" in names) == (family in GATED)
    assert names[:3] == ["input.ids", "input.mask", "input.positions"]
    assert names[-3:] == ["final_norm.out", "logits", "probs"]
    assert names.index("embed.out") < names.index("blocks.0.ln1.out")
    blocks = [int(n.split(".")[1]) for n in names if n.startswith("blocks.")]
    assert blocks == sorted(blocks)
    first = [n.split(".", 2)[2] for n in names if n.startswith("blocks.0.")]
    assert first.index("ln1.out") < first.index("attn.q") < first.index("attn.weights") < first.index("attn.out")
    assert first.index("ln2.out") < first.index("mlp.pre") < first.index("mlp.post") < first.index("mlp.out") < first.index("resid_post")


@pytest.mark.live
@pytest.mark.parametrize("family", FAMILIES)
def test_hf_names_point_at_real_modules(built, family):
    model, _ = hf_model(built[family])
    modules = dict(model.named_modules())
    from tracer.capture.hf import _condition_holds

    for template, (module, take) in hf_names.HF_NAMES[family].items():
        if not _condition_holds(family, template, model.config):  # e.g. opt's project_in exists in opt-350m only
            continue
        concrete = template.format(i=1)
        path = hf_names.hf_module(family, concrete)
        assert path == module.format(i=1) and path in modules, (template, path)
        assert hf_names.hf_source(family, concrete) == (path, take)
    assert hf_names.hf_module(family, "probs") is None


# ---------- the two views of one forward pass agree ----------


@pytest.mark.live
@pytest.mark.parametrize("family", FAMILIES)
def test_hidden_states_equal_hooks(built, family):
    folder = built[family]
    _, hooks, outputs = hf_forward(folder, prompt_ids(folder))
    n_layers = len([k for k in outputs if k.endswith(".attn.weights")])
    expected = {"embed.out", "final_norm.out", "logits"} | {f"blocks.{i}.resid_post" for i in range(n_layers - 1)}
    expected |= {f"blocks.{i}.attn.weights" for i in range(n_layers)}
    both = set(hooks) & set(outputs)
    assert expected <= both
    for name in sorted(both):
        np.testing.assert_array_equal(hooks[name], outputs[name], err_msg=name)
    # the last hidden state is after the final norm, so the last block's output only comes from a hook
    last = f"blocks.{n_layers - 1}.resid_post"
    assert last in hooks and last not in outputs
    assert not np.allclose(hooks[last], outputs["final_norm.out"])


@pytest.mark.live
@pytest.mark.parametrize("family", FAMILIES)
def test_split_q_k_v_reproduce_attention(built, family):
    """weights = softmax(rot(q) rot(k)^T / sqrt(d) + mask) and z = weights @ v, from the captured pieces."""
    import torch

    folder = built[family]
    model, hooks, _ = hf_forward(folder, prompt_ids(folder))
    T = hooks["blocks.0.attn.q"].shape[2]
    for i in range(model.config.num_hidden_layers):
        q, k, v = (torch.from_numpy(hooks[f"blocks.{i}.attn.{p}"]) for p in "qkv")
        q, k = _rotate(model, family, q, k, T)
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        keep = torch.from_numpy(hooks[f"blocks.{i}.attn.mask"])
        scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1)
        np.testing.assert_allclose(weights.numpy(), hooks[f"blocks.{i}.attn.weights"], atol=2e-6, err_msg=f"{family} {i}")
        z = torch.from_numpy(hooks[f"blocks.{i}.attn.weights"]) @ v
        np.testing.assert_allclose(z.numpy(), hooks[f"blocks.{i}.attn.z"], atol=2e-6)


def _rotate(model, family, q, k, T):
    """q and k after transformers' own rotary embedding (learned-position families pass through)."""
    import torch

    if family in ("gpt2", "opt"):
        return q, k
    base = model.gpt_neox if family == "gpt_neox" else model.model
    cos, sin = base.rotary_emb(q, torch.arange(T)[None, :])
    apply = sys.modules[type(model).__module__].apply_rotary_pos_emb
    return apply(q, k, cos, sin)


@pytest.mark.live
@pytest.mark.parametrize("family", FAMILIES)
def test_mlp_pieces_reproduce_the_activation(built, family):
    """post = act(pre) * up (gated) or act(pre): the gate/up split and the taps are the right tensors."""
    import torch
    from transformers.activations import ACT2FN

    folder = built[family]
    model, hooks, _ = hf_forward(folder, prompt_ids(folder))
    config = model.config
    act = ACT2FN[getattr(config, "hidden_act", None) or getattr(config, "activation_function")]
    for i in range(config.num_hidden_layers):
        pre = torch.from_numpy(hooks[f"blocks.{i}.mlp.pre"])
        post = act(pre) * torch.from_numpy(hooks[f"blocks.{i}.mlp.up"]) if family in GATED else act(pre)
        np.testing.assert_allclose(post.numpy(), hooks[f"blocks.{i}.mlp.post"], atol=1e-6, err_msg=f"{family} {i}")


# ---------- padding and positions ----------


@pytest.mark.live
@pytest.mark.parametrize("family", FAMILIES)
def test_padded_batch_matches_single_prompts(built, family):
    from tracer.capture import capture

    folder = built[family]
    prompts = json.loads((folder / "prompts.json").read_text())
    batch = capture(folder, prompts["batch"]["ids"], attention_mask=prompts["batch"]["attention_mask"])
    mask = np.asarray(prompts["batch"]["attention_mask"])
    assert mask[1].min() == 0 and mask[0].min() == 1  # the second row really is padded
    pad_position = -1 if family == "opt" else 0  # OPT derives positions from the mask: cumsum*mask - 1
    positions = batch["input.positions"]
    assert (positions[mask == 0] == pad_position).all()
    for row, ids in enumerate(prompts["batch"]["ids"]):
        n = int(mask[row].sum())
        assert positions[row, :n].tolist() == list(range(n))
        single = capture(folder, [ids[:n]])
        np.testing.assert_allclose(batch["logits"][row, :n], single["logits"][0], atol=1e-5)
    reference = batch.meta["tokens"][1]
    assert [t["pad"] for t in reference] == (mask[1] == 0).tolist()


@pytest.mark.live
def test_float64_capture_is_float64_and_close_to_float32(built):
    from tracer.capture import capture

    folder = built["llama"]
    t32, t64 = capture(folder, prompt_ids(folder)), capture(folder, prompt_ids(folder), dtype="float64")
    assert t64["logits"].dtype == np.float64 and t32["logits"].dtype == np.float32
    assert t64["input.ids"].dtype == np.int64
    np.testing.assert_allclose(t32["logits"], t64["logits"], atol=1e-4)
    assert not np.array_equal(t32["logits"].astype(np.float64), t64["logits"])


@pytest.mark.live
@pytest.mark.parametrize("family", ["llama", "gpt_neox", "gemma"])
def test_widened_rope_is_float64_and_stock_rope_is_not(built, family):
    """Stock transformers keeps rope in float32 in a float64 run; the widening makes it float64."""
    import torch
    from tracer.capture.hf import float32_as_float64, load_model, recompute_rotary_in_float64

    T = 20
    expected = np.cos(_angles_float64(load_model(built[family], "float64")[0].config, T))
    for widen in (True, False):
        model, _ = load_model(built[family], "float64")
        base = model.gpt_neox if family == "gpt_neox" else model.model
        if widen:
            assert recompute_rotary_in_float64(model) == 1
        with float32_as_float64() if widen else contextlib.nullcontext():
            cos, _ = base.rotary_emb(torch.zeros(1, dtype=torch.float64), torch.arange(T)[None])
        assert cos.dtype == torch.float64
        error = np.abs(cos[0].numpy() - expected).max()
        assert (error < 1e-14) if widen else (error > 1e-9), (widen, error)


@pytest.mark.live
@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_widened_float64_rmsnorm_and_softmax(built, family):
    """RMSNorm and the eager softmax cast to float32 in stock transformers; widened, they agree with float64 NumPy."""
    from tracer.capture import capture

    folder = built[family]
    model, _ = hf_model(folder, "float64")
    weight = model.model.layers[0].input_layernorm.weight.detach().numpy()
    gain = 1.0 + weight if family == "gemma" else weight
    eps = model.config.rms_norm_eps
    for widen in (True, False):
        trace = capture(folder, prompt_ids(folder), dtype="float64", widen_float32=widen)
        x = trace["embed.out"]
        expected = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * gain
        norm_error = np.abs(trace["blocks.0.ln1.out"] - expected).max()
        scores = trace["blocks.0.attn.weights"]
        assert trace["blocks.0.ln1.out"].dtype == np.float64
        assert (norm_error < 1e-13) if widen else (norm_error > 1e-9), (widen, norm_error)
        assert ("float64 throughout" in trace.meta["notes"][0]) == widen
        assert np.abs(scores.sum(-1) - 1).max() < (1e-14 if widen else 1e-6)


def _angles_float64(config, T: int) -> np.ndarray:
    """[T, rotary_dim] angles of HF's half-split layout, straight from the rope formulas in float64."""
    rope = config.rope_parameters
    d_head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(d_head * rope.get("partial_rotary_factor", 1.0))
    inv = 1.0 / rope["rope_theta"] ** (np.arange(0, dim, 2) / dim)
    if rope["rope_type"] == "llama3":
        old = rope["original_max_position_embeddings"]
        low, high = rope["low_freq_factor"], rope["high_freq_factor"]
        wavelen = 2 * np.pi / inv
        scaled = np.where(wavelen > old / low, inv / rope["factor"], inv)
        smooth = (old / wavelen - low) / (high - low)
        medium = (wavelen >= old / high) & (wavelen <= old / low)
        inv = np.where(medium, (1 - smooth) * scaled / rope["factor"] + smooth * scaled, scaled)
    angles = np.arange(T)[:, None] * inv[None, :]
    return np.concatenate([angles, angles], axis=-1)


# ---------- the fixture builder ----------


@pytest.mark.live
def test_builder_is_deterministic(built, tmp_path):
    builder = load_builder()
    again = builder.build_model("llama", tmp_path, builder.train_tokenizer())
    builder.write_references(again)
    first = {p.name: p.read_bytes() for p in built["llama"].iterdir()}
    second = {p.name: p.read_bytes() for p in again.iterdir()}
    assert first.keys() == second.keys()
    for name in first:
        assert first[name] == second[name], name


@pytest.mark.live
@pytest.mark.parametrize("family", FAMILIES)
def test_tokenizer_prepends_the_family_bos(built, family):
    from tokenizers import Tokenizer

    builder = load_builder()
    folder = built[family]
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    prompts = json.loads((folder / "prompts.json").read_text())
    ids = prompts["reference"]["ids"]
    bos = builder.BOS_PREFIX[family]
    plain = tokenizer.encode(prompts["reference"]["text"], add_special_tokens=False).ids
    assert ids == ([tokenizer.token_to_id(bos)] if bos else []) + plain
    config = json.loads((folder / "config.json").read_text())
    assert config["vocab_size"] == tokenizer.get_vocab_size()
    assert config["bos_token_id"] == tokenizer.token_to_id(bos or "<s>")
    assert config["pad_token_id"] == tokenizer.token_to_id("<pad>")
    assert 12 <= len(ids) <= 20


@pytest.mark.live
def test_vector_parameters_are_perturbed(built):
    import torch

    for family in ("gemma", "gpt2", "qwen2"):
        model, _ = hf_model(built[family])
        for name, p in model.named_parameters():
            if p.ndim == 1:
                neutral = torch.zeros_like(p) if ("bias" in name or family == "gemma") else torch.ones_like(p)
                assert (p - neutral).abs().max() > 0.01, f"{family} {name} left at its neutral value"


# ---------- errors ----------


@pytest.mark.live
def test_capture_rejects_bad_input(built, tmp_path):
    from tracer.capture import capture

    folder = built["llama"]
    with pytest.raises(TracerError, match="no config.json"):
        capture(tmp_path, [[1, 2]])
    with pytest.raises(TracerError, match="dtype"):
        capture(folder, [[1, 2]], dtype="float16")
    with pytest.raises(TracerError, match="rectangular"):
        capture(folder, [[1, 2], [3]])
    with pytest.raises(TracerError, match="token ids"):
        capture(folder, [[1, 10_000]])


def test_capture_without_torch_says_how_to_install(monkeypatch):
    import tracer.capture.hf as hf

    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(TracerError, match=r"pip install -e '\.\[torch\]' from the tracer checkout"):
        hf.capture("anywhere", [[1]])
