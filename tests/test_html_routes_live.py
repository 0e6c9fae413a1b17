"""The HTML report on the encoder and encoder-decoder routes, on tiny random checkpoints made by transformers."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from html_tree import parse
from tracer.cli.main import app

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.live
runner = CliRunner()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("routes")
    torch.manual_seed(0)
    bert = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=64)
    transformers.BertForMaskedLM(bert).save_pretrained(root / "bert-mlm")
    transformers.BertModel(bert).save_pretrained(root / "bert-base")
    t5 = transformers.T5Config(vocab_size=120, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                               num_heads=4, decoder_start_token_id=0, pad_token_id=0)
    transformers.T5ForConditionalGeneration(t5).save_pretrained(root / "t5")
    return root


def page(tmp_path, *args):
    out = tmp_path / "p.html"
    result = runner.invoke(app, ["run", *map(str, args), "--export-html", str(out)])
    assert result.exit_code == 0, result.output
    tree, errors = parse(out.read_text(encoding="utf-8"))
    assert errors == []
    return tree


def maps(tree, stack, part):
    return [s for s in tree.find_all("svg", cls="heatmap")
            if s.attrs.get("data-stack") == stack and s.attrs.get("data-part") == part and "data-layer" in s.attrs]


def test_encoder_decoder_page_has_three_attention_views_and_the_decoder_lens(tmp_path, checkpoints):
    tree = page(tmp_path, "--model", checkpoints / "t5", "--ids", "5,7,9,1", "--decoder-ids", "0,4,6", "--lens")
    for stack, part, q, k in (("encoder", "attn", 4, 4), ("decoder", "attn", 3, 3), ("decoder", "cross_attn", 3, 4)):
        svgs = maps(tree, stack, part)
        assert len(svgs) == 2 * 4, (stack, part)  # 2 layers x 4 heads
        assert all(len(s.find_all("rect", cls="cell")) == q * k for s in svgs)
    causal = maps(tree, "decoder", "attn")[0]
    assert len(causal.find_all("rect", cls="blocked")) == 3  # above the diagonal of 3 x 3
    lens = tree.find_all("svg", data_lens="1")[0]
    assert (lens.attrs["data-rows"], lens.attrs["data-cols"]) == ("3", "3")  # embed + 2 decoder blocks x 3 positions
    tokens = tree.find_all("section", data_section="tokens")[0]
    assert [h.text() for h in tokens.find_all("h3")] == ["encoder input", "decoder input"]
    assert tree.find_all("section", data_section="mask")[0].find_all("svg", data_grid="keep")  # self and cross


def test_masked_lm_page_and_pooled_vector_page(tmp_path, checkpoints):
    tree = page(tmp_path, "--model", checkpoints / "bert-mlm", "--ids", "1,5,7,9,2", "--position", "2")
    svgs = maps(tree, "", "attn")
    assert len(svgs) == 8 and all(not s.find_all("rect", cls="blocked") for s in svgs)  # bidirectional
    assert "in place of position 2" in tree.find_all("section", data_section="top_k")[0].text()
    tree = page(tmp_path, "--model", checkpoints / "bert-base", "--ids", "1,5,7,9,2", "--ids", "1,5,2")
    pooled = tree.find_all("section", data_section="pooled")[0]
    cosine = pooled.find_all("svg", data_cosine="2")[0]
    assert len(cosine.find_all("rect", cls="cell")) == 4


def test_report_of_a_transformers_capture_needs_and_uses_the_model(tmp_path):
    from conftest import model_dir

    trace, out = tmp_path / "cap.safetensors", tmp_path / "cap.html"
    result = runner.invoke(app, ["capture", str(model_dir("llama")), "Hello there", "-o", str(trace)])
    assert result.exit_code == 0, result.output
    bare = runner.invoke(app, ["report", str(trace), "-o", str(out)])
    assert bare.exit_code == 2 and "--model" in bare.output
    result = runner.invoke(app, ["report", str(trace), "-o", str(out), "--model", str(model_dir("llama"))])
    assert result.exit_code == 0, result.output
    tree, errors = parse(out.read_text(encoding="utf-8"))
    assert errors == [] and len([s for s in tree.find_all("svg", cls="heatmap") if "data-layer" in s.attrs]) == 2 * 4
    assert tree.find_all("svg", data_lens="1")
