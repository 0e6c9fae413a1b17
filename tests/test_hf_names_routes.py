"""hf_names for the encoder and encoder-decoder routes, the capture's pooling config reader and step axes (no torch)."""

from __future__ import annotations

import json

import pytest

from tracer.names import hf as hf_names
from tracer.capture.hf_routes import read_pooling, step_axes
from tracer.errors import TracerError


@pytest.mark.parametrize(
    "family, step, headless, module",
    [
        ("bert", "blocks.3.attn.q", False, "bert.encoder.layer.3.attention.self.query"),
        ("bert", "blocks.3.attn.q", True, "encoder.layer.3.attention.self.query"),
        ("bert", "embed.token_types", True, "embeddings.token_type_embeddings"),
        ("bert", "head.dense", False, "cls.predictions.transform.dense"),
        ("bert", "head.dense", True, None),  # a BertModel has no head
        ("bert", "logits", True, None),
        ("bert", "pooled", True, None),  # computed, not a module
        ("roberta", "head.act", False, "lm_head.layer_norm"),
        ("t5", "encoder.blocks.1.attn.position_bias", False, "encoder.block.1.layer.0.SelfAttention"),
        ("t5", "decoder.blocks.2.cross_attn.k", False, "decoder.block.2.layer.1.EncDecAttention.k"),
        ("t5", "decoder.blocks.0.mlp.out", False, "decoder.block.0.layer.2.DenseReluDense"),
        ("t5", "encoder.blocks.0.mlp.out", False, "encoder.block.0.layer.1.DenseReluDense"),
        ("t5", "blocks.0.attn.q", False, None),  # t5 steps always carry their stack
        ("bart", "decoder.blocks.1.ln_cross.out", False, "model.decoder.layers.1.encoder_attn_layer_norm"),
        ("bart", "encoder.embed.tokens", False, None),  # embed_tokens already scales by sqrt(d_model)
        ("llama", "blocks.3.attn.q", False, "model.layers.3.self_attn.q_proj"),  # decoders unchanged
    ],
)
def test_hf_module_of_route_steps(family, step, headless, module):
    assert hf_names.hf_module(family, step, headless) == module


@pytest.mark.parametrize(
    "family, path, take, step",
    [
        ("bert", "encoder.layer.1.attention.self", "output[1]", "blocks.1.attn.weights"),  # headless path
        ("bert", "bert.encoder.layer.1.attention.self", "output[1]", "blocks.1.attn.weights"),
        ("bert", "cls.predictions.decoder", "output", "logits"),
        ("t5", "decoder.block.1.layer.1.EncDecAttention", "output[2]", "decoder.blocks.1.cross_attn.weights"),
        ("t5", "encoder.block.1.layer.0.SelfAttention", "output[1]", "encoder.blocks.1.attn.position_bias"),
        ("t5", "encoder.block.0", "input[0]", "encoder.embed.out"),
        ("bart", "model.decoder.layers.0.encoder_attn.k_proj", "output", "decoder.blocks.0.cross_attn.k"),
    ],
)
def test_step_for_module_of_route_modules(family, path, take, step):
    assert hf_names.step_for_module(family, path, take) == step


def test_every_route_template_has_a_stack_prefix_or_none():
    for family in hf_names.ENCODER_DECODER:
        for template in hf_names.HF_NAMES[family]:
            assert template == "logits" or template.startswith(("encoder.", "decoder.")), template
            assert ("cross_attn." in template or "ln_cross" in template or "resid_cross" in template) <= template.startswith("decoder.")
    for family in hf_names.ENCODER_ONLY:
        assert not any(t.startswith(("encoder.", "decoder.", "final_norm")) for t in hf_names.HF_NAMES[family])


@pytest.mark.parametrize(
    "name, axes",
    [
        ("decoder.blocks.0.cross_attn.k", ("batch", "kv_heads", "enc_pos", "d_head")),
        ("decoder.blocks.0.cross_attn.weights", ("batch", "heads", "q_len", "kv_len")),
        ("encoder.blocks.1.attn.position_bias", ("batch", "heads", "q_len", "kv_len")),
        ("embed.token_types", ("batch", "pos", "d_model")),
        ("encoder.final_norm.out", ("batch", "pos", "d_model")),
        ("pooled", ("batch", "d_model")),
        ("input.decoder_ids", ("batch", "dec_pos")),
        ("head.ln.out", ("batch", "pos", "d_model")),
    ],
)
def test_route_step_axes(name, axes):
    assert step_axes(name) == axes


def test_every_route_step_the_capture_records_is_in_the_catalogue():
    for family in hf_names.ENCODER_ONLY + hf_names.ENCODER_DECODER:
        for template in hf_names.HF_NAMES[family]:
            assert step_axes(template.format(i=0)), template


def _st_folder(tmp_path, modules, pooling):
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return tmp_path


def test_pooling_read_in_the_sentence_transformers_2_to_5_layout(tmp_path):
    """As all-MiniLM-L6-v2 ships it."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]  # fmt: skip
    pooling = {"word_embedding_dimension": 384, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
               "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}  # fmt: skip
    assert read_pooling(_st_folder(tmp_path, modules, pooling)) == ("mean", True)


def test_pooling_read_in_the_sentence_transformers_6_layout_and_without_modules_json(tmp_path):
    modules = [{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"}]
    (tmp_path / "st6").mkdir()
    assert read_pooling(_st_folder(tmp_path / "st6", modules, {"pooling_mode": "cls"})) == ("cls", False)
    assert read_pooling(tmp_path) == ("mean", False)  # no modules.json: mean, not normalised


def test_pooling_other_than_cls_mean_max_mean_sqrt_len_is_refused(tmp_path):
    modules = [{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    for n, pooling in enumerate([{"pooling_mode_weightedmean_tokens": True}, {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True}]):
        (tmp_path / str(n)).mkdir()
        with pytest.raises(TracerError, match="pooling must be one of"):
            read_pooling(_st_folder(tmp_path / str(n), modules, pooling))
