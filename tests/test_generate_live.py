"""Live parity of tracer generate with transformers' generate: the same greedy tokens and the same per-step logits.

Every decoder fixture, a single prompt and a left-padded batch of two, 10 new tokens (past the sliding windows of
mistral and qwen2, which are 3); and tiny T5 and BART checkpoints built here (random, seeded), whose encoder
runs once and whose cross-attention keys and values are cached. EOS is disabled on both sides.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import FAMILIES, model_dir
from tracer import load_model
from tracer.generate import GenerateOptions, generate

pytestmark = pytest.mark.live
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

N_NEW = 10
PROMPTS = {"single": [[5, 6, 7, 8, 9, 10]], "batch": [[5, 6, 7, 8, 9, 10], [11, 12]]}
ATOL = 1e-5


def hf_generate(hf, rows: list[list[int]], pad: int, seq2seq: bool) -> tuple[np.ndarray, np.ndarray]:
    """(new ids [batch, n], per-step scores [batch, n, vocab]) from transformers, greedy, EOS disabled, left-padded."""
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    cfg = hf.generation_config
    cfg.eos_token_id = None
    cfg.forced_eos_token_id = None
    cfg.forced_bos_token_id = None
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=mask, max_new_tokens=N_NEW, do_sample=False, output_scores=True,
                          return_dict_in_generate=True, pad_token_id=pad)
    new = out.sequences[:, 1:] if seq2seq else out.sequences[:, width:]
    return new.numpy(), torch.stack(out.scores, dim=1).float().numpy()


def check(folder, rows, seq2seq: bool) -> None:
    cls = transformers.AutoModelForSeq2SeqLM if seq2seq else transformers.AutoModelForCausalLM
    hf = cls.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    m = load_model(folder)
    new, scores = hf_generate(hf, rows, m._pad_id(), seq2seq)
    g = generate(m, ids=rows, options=GenerateOptions(N_NEW, ignore_eos=True, keep_logits=True))
    mine = np.array([r.new_ids for r in g.rows])
    logits = np.stack([s.logits for s in g.steps], axis=1)  # [batch, n, vocab]
    assert mine.tolist() == new.tolist(), f"{folder.name}: tokens differ"
    worst = float(np.abs(logits - scores).max())
    assert worst <= ATOL, f"{folder.name}: cached logits differ from transformers' scores by {worst}"
    assert len(set(mine.ravel().tolist())) > 1 or seq2seq, "a constant output would test little"


@pytest.mark.parametrize("prompts", sorted(PROMPTS))
@pytest.mark.parametrize("family", FAMILIES)
def test_decoder_families_match_transformers_generate(family, prompts):
    check(model_dir(family), PROMPTS[prompts], seq2seq=False)


@pytest.fixture(scope="module")
def seq2seq_models(tmp_path_factory):
    """Tiny random T5 (v1.0, tied head, relative buckets) and BART (learned positions, post-norm) checkpoints."""
    out = tmp_path_factory.mktemp("seq2seq")
    torch.manual_seed(1)  # a seed and scale under which the tiny T5 does not repeat one token forever
    t5 = transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, decoder_start_token_id=0,
        pad_token_id=0, eos_token_id=1, initializer_factor=1.5))
    t5.save_pretrained(out / "t5")
    torch.manual_seed(0)
    bart = transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, init_std=0.2))
    bart.save_pretrained(out / "bart")
    return out


@pytest.mark.parametrize("prompts", sorted(PROMPTS))
@pytest.mark.parametrize("name", ["t5", "bart"])
def test_encoder_decoder_models_match_transformers_generate(seq2seq_models, name, prompts):
    folder = seq2seq_models / name
    assert load_model(folder).route == "encoder-decoder"
    check(folder, PROMPTS[prompts], seq2seq=True)


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_encoder_decoder_check_cache_and_trace(seq2seq_models, name):
    m = load_model(seq2seq_models / name)
    g = generate(m, ids=PROMPTS["batch"], options=GenerateOptions(6, ignore_eos=True, check_cache=True, record=True))
    assert g.recompute_max_abs() <= 1e-5
    names = g.trace.names()
    assert "encoder.blocks.0.attn.q" in names and not any(n.startswith("decode.1.encoder.") for n in names)
    cross_k = g.trace["decoder.blocks.1.cross_attn.k"]
    np.testing.assert_array_equal(g.trace["decode.5.decoder.blocks.1.cross_attn.k"], cross_k)
    assert g.trace["decode.5.decoder.blocks.1.attn.k"].shape[2] == 6, "start token + 5 fed tokens"


def test_encoder_only_model_exits_2(tmp_path):
    from typer.testing import CliRunner

    from tracer.cli.main import app

    torch.manual_seed(0)
    bert = transformers.BertModel(transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                                          num_attention_heads=4, intermediate_size=64))
    bert.save_pretrained(tmp_path)
    result = CliRunner().invoke(app, ["generate", "--model", str(tmp_path), "--ids", "1,2,3"])
    assert result.exit_code == 2 and "encoder-only model" in result.stderr, result.output
