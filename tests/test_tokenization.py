"""tracer's tokenization equals transformers' (recorded in each fixture's prompts.json), specials included."""

import json

import pytest

from conftest import FAMILIES, model_dir
from tracer import load_model


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
