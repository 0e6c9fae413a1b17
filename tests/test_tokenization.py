"""tracer's tokenization equals transformers' (recorded in each fixture's prompts.json), specials included."""

import json

import pytest

from conftest import ENCODERS, FAMILIES, SEQ2SEQ, model_dir
from tracer import load_model
from tracer.checkpoint.tokenizer import Tokenizer


def _cases(name):
    d = json.loads((model_dir(name) / "prompts.json").read_text(encoding="utf-8"))
    yield d["reference"]["text"], d["reference"]["ids"], None
    for other in d["others"]:
        yield other["text"], other["ids"], other["ids_without_special"]


@pytest.mark.parametrize("name", FAMILIES)
def test_ids_equal_transformers(name):
    model = load_model(model_dir(name))
    for text, with_special, without_special in _cases(name):
        assert [t.id for t in model.tokenizer.encode(text)] == with_special, text
        if without_special is not None:
            assert [t.id for t in model.tokenizer.encode(text, special_tokens=False)] == without_special, text


@pytest.mark.parametrize("name", FAMILIES)
def test_token_bytes_and_spans_reassemble_the_text(name):
    model = load_model(model_dir(name))
    for text, _, _ in _cases(name):
        toks = model.tokenizer.encode(text)
        real = [t for t in toks if not t.special]
        assert b"".join(t.bytes for t in real) == text.encode("utf-8")
        for t in real:
            assert 0 <= t.start <= t.end <= len(text)


def test_special_tokens_are_marked_and_can_be_turned_off():
    model = load_model(model_dir("llama"))
    on = model.run("早上好")
    off = model.run("早上好", special_tokens=False)
    first = on.meta["tokens"][0][0]
    assert first["special"] and first["piece"] == "<s>"
    assert [t["id"] for t in off.meta["tokens"][0]] == [t["id"] for t in on.meta["tokens"][0][1:]]
    assert not any(t["special"] for t in off.meta["tokens"][0])


def _route_cases(name):
    """Every single-text input of a route fixture: reference, unpadded batch rows, decoder text, others."""
    d = json.loads((model_dir(name) / "prompts.json").read_text(encoding="utf-8"))
    yield from _cases(name)
    batch = d["batch"]
    for text, ids, mask in zip(batch["texts"], batch["ids"], batch["attention_mask"]):
        if isinstance(text, str):  # a text pair (bert's second row) is checked through prompts.json's type ids below
            yield text, [i for i, m in zip(ids, mask) if m], None
    if "decoder" in d:
        yield d["decoder"]["text"], None, d["decoder"]["ids"][1:]


@pytest.mark.parametrize("name", ENCODERS + SEQ2SEQ)
def test_route_ids_equal_transformers(name):
    """tracer's tokenizer (tokenizer.json through `tokenizers`) gives the ids transformers' AutoTokenizer gave."""
    tokenizer = Tokenizer(model_dir(name) / "tokenizer.json")
    for text, with_special, without_special in _route_cases(name):
        if with_special is not None:
            assert [t.id for t in tokenizer.encode(text)] == with_special, text
        if without_special is not None:
            plain = [t.id for t in tokenizer.encode(text, special_tokens=False)]
            assert plain[: len(without_special)] == without_special, text


@pytest.mark.parametrize("name", ENCODERS)
def test_encoder_prompts_hold_what_the_routes_need(name):
    """The MLM prompts hold the mask token; bert's hold [UNK] and ## pieces; bert's pair marks type ids 0 then 1."""
    d = json.loads((model_dir(name) / "prompts.json").read_text(encoding="utf-8"))
    tokens = d["reference"]["tokens"]
    assert ("[MASK]" if name.startswith("bert") else "<mask>") in tokens
    if name.startswith("bert"):
        assert "[UNK]" in tokens and any(t.startswith("##") for t in tokens)
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
        types, mask = d["batch"]["token_type_ids"][1], d["batch"]["attention_mask"][1]
        real = [t for t, m in zip(types, mask) if m]
        assert real[0] == 0 and real[-1] == 1 and real == sorted(real)
    else:
        assert tokens[0] == "<s>" and tokens[-1] == "</s>"
    for key, side in (("batch", "right"), ("batch_left", "left")):
        mask = d[key]["attention_mask"]
        assert d[key]["padding_side"] == side and min(min(row) for row in mask) == 0
        padded = [row for row in mask if 0 in row][0]
        assert padded[-1 if side == "right" else 0] == 0


@pytest.mark.parametrize("name", ("bert", "bert-mlm", "roberta"))
def test_route_text_pair_ids_and_types_equal_transformers(name):
    """The batch's text pair (bert) or the reference prompt (roberta): ids and segment ids as AutoTokenizer gave them."""
    d = json.loads((model_dir(name) / "prompts.json").read_text(encoding="utf-8"))
    tokenizer = Tokenizer(model_dir(name) / "tokenizer.json")
    batch = d["batch"]
    for text, ids, types, mask in zip(batch["texts"], batch["ids"], batch["token_type_ids"], batch["attention_mask"]):
        first, second = (text, None) if isinstance(text, str) else text
        tokens = tokenizer.encode(first, pair=second)
        assert [t.id for t in tokens] == [i for i, m in zip(ids, mask) if m], text
        assert [t.type_id for t in tokens] == [t for t, m in zip(types, mask) if m], text
    assert any(not isinstance(text, str) for text in batch["texts"]) == name.startswith("bert")
