"""The shipped default model folder: small, complete, and tokenized the way `tracer run "春天来"` needs.

No torch here: only `tokenizers` and `safetensors`, which the tool itself depends on.
"""

from __future__ import annotations

import json
import re

import pytest
from safetensors import safe_open
from tokenizers import Tokenizer

from conftest import ROOT

MODEL = ROOT / "fixtures" / "default-model"
CORPUS = ROOT / "fixtures" / "corpus" / "seasons.txt"
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(MODEL / "tokenizer.json"))


def test_folder_is_complete_and_under_5_mb():
    names = {p.name for p in MODEL.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"} <= names
    assert ".keep" not in names
    size = sum(p.stat().st_size for p in MODEL.iterdir())
    assert size < 5 * 1024 * 1024, f"default model is {size} bytes"


def test_prompt_starts_with_bos_and_le_is_one_token(tokenizer):
    config = json.loads((MODEL / "tokenizer_config.json").read_text(encoding="utf-8"))
    bos_id = tokenizer.token_to_id(config["bos_token"])
    encoding = tokenizer.encode("春天来")
    assert encoding.ids[0] == bos_id
    assert tokenizer.decode(encoding.ids[1:]) == "春天来"
    le = tokenizer.encode("了", add_special_tokens=False).ids
    assert len(le) == 1 and tokenizer.decode(le) == "了"
    # The training text tokenizes as the prompt followed by 了: the prompt is a token prefix of it.
    assert tokenizer.encode("春天来了，花开了。").ids[: len(encoding.ids) + 1] == encoding.ids + le


def test_every_chinese_character_of_the_corpus_is_one_token(tokenizer):
    chars = set(CJK.findall(CORPUS.read_text(encoding="utf-8")))
    assert len(chars) > 100
    split = sorted(c for c in chars if len(tokenizer.encode(c, add_special_tokens=False).ids) != 1)
    assert split == []


def test_common_english_words_merge(tokenizer):
    for word in (" sun", " shining", " spring", " flowers", " raining"):
        assert len(tokenizer.encode(word, add_special_tokens=False).ids) == 1, word


def test_config_matches_the_weights_and_tokenizer(tokenizer):
    config = json.loads((MODEL / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "llama"
    assert config["vocab_size"] == tokenizer.get_vocab_size()
    assert config["num_key_value_heads"] < config["num_attention_heads"]  # grouped-query attention
    with safe_open(str(MODEL / "model.safetensors"), framework="np") as weights:
        names = set(weights.keys())
        dtypes = {weights.get_slice(n).get_dtype() for n in names}
        embed_shape = weights.get_slice("model.embed_tokens.weight").get_shape()
    assert dtypes == {"F32"}
    assert embed_shape == [config["vocab_size"], config["hidden_size"]]
    assert ("lm_head.weight" in names) != config["tie_word_embeddings"]
