"""tracer's GGUF tokenizer held to llama.cpp's own `llama-tokenize --ids`, and to the folder's tokenizer.json.

Files: fixture folders converted by the sdist's real convert_hf_to_gguf.py (`--outtype f32`, pre-tokenizer answered
`gpt-2`: see tests/llamacpp_harness.py for why), plus vocabulary-only GGUFs written by gguf.GGUFWriter for what the
fixtures cannot reach (other `tokenizer.ggml.pre` regexes over a fixture vocabulary; SentencePiece BPE and Unigram
vocabularies trained with sentencepiece). llama-tokenize parses special tokens and reads the text verbatim from
stdin. Every comparison is exact id equality.
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from gguf_vocab import REPO, byte_level_fields, read_metadata, sentencepiece_fields, train_sentencepiece, write_vocab_gguf
from llamacpp_harness import convert, llama_tokenize, require_binary
from tracer.checkpoint.gguf_tokenizer import tokenizer_spec_from_gguf
from tracer.checkpoint.tokenizer import Tokenizer

pytestmark = pytest.mark.live
gguf = pytest.importorskip("gguf")

TEXTS = [
    "Hello world",
    "春天来了，万物复苏。",  # CJK with full-width punctuation
    "日本語のテキスト と 한국어",
    "emoji 🚀🦙 and 😶\u200d🌫️ joined",  # a ZWJ sequence
    "two  spaces,   three,    four",  # runs of spaces
    "   leading and trailing   ",
    "lines\nand\n\nblank\n\n\nlines\n",  # newlines
    "tabs\tand\r\nCRLF",
    "digits 1 12 123 1234 12345 3.14159",
    "I've 'RE you sure? We'Ve",
    "ÀÉÎõü naïve café",
    "x",
]
SPECIAL_TEXTS = {  # text with special tokens in it, and text right after one
    "<s>": ["<s>text right after a special token", "a</s>b <s> c", "</s>\n<s>  x"],
    "<tool>": ["<tool>right after a user-defined token", "a<ctl>b <tool> c", "<ctl>\n<tool>  x"],
}
FOLDERS = ["models/llama", "models/qwen2", "models/gpt2", "default-model"]


def _tracer(path) -> Tokenizer:
    return Tokenizer.from_spec(tokenizer_spec_from_gguf(read_metadata(path)), str(path))


def _ids(tok: Tokenizer, text: str, special_tokens: bool = True) -> list[int]:
    return [t.id for t in tok.encode(text, special_tokens=special_tokens)]


@lru_cache(maxsize=None)
def _converted(fixture: str):
    return convert(REPO / "fixtures" / fixture, "f32")


@pytest.mark.parametrize("fixture", FOLDERS)
def test_converted_fixture_tokenizes_as_llama_tokenize(fixture):
    require_binary("llama-tokenize")
    path = _converted(fixture)
    tok = _tracer(path)
    mismatches = [(text, _ids(tok, text), ids) for text in TEXTS + SPECIAL_TEXTS["<s>"]
                  if _ids(tok, text) != (ids := llama_tokenize(path, text))]
    assert not mismatches, mismatches


@pytest.mark.parametrize("fixture", FOLDERS)
def test_converted_fixture_agrees_with_the_folders_tokenizer_json(fixture):
    """Same text pieces (the fixtures' ByteLevel regex is gpt-2's) and the same BOS/EOS policy, since the converter
    copies add_bos_token from the folder."""
    path = _converted(fixture)
    tok, ref = _tracer(path), Tokenizer(REPO / "fixtures" / fixture / "tokenizer.json")
    for text in TEXTS + SPECIAL_TEXTS["<s>"]:
        assert _ids(tok, text) == _ids(ref, text), text
        pieces = [(t.piece, t.bytes, t.special) for t in tok.encode(text)]
        assert pieces == [(t.piece, t.bytes, t.special) for t in ref.encode(text)], text


PRE_NAMES = ["default", "gpt-2", "llama-bpe", "llama3", "qwen2", "deepseek-r1-qwen", "tekken", "smaug-bpe",
             "gpt-4o", "starcoder", "deepseek-llm", "chatglm-bpe", "bloom"]


@pytest.mark.parametrize("pre", PRE_NAMES)
def test_each_pre_tokenizer_splits_as_llama_cpp(tmp_path, pre):
    """One fixture vocabulary under llama.cpp's other pre-tokenizers (its regexes differ on digits, spaces, case,
    punctuation and CJK, which the texts exercise)."""
    require_binary("llama-tokenize")
    fields = byte_level_fields(REPO / "fixtures/models/llama/tokenizer.json", pre)
    path = write_vocab_gguf(tmp_path / f"{pre}.gguf", fields)
    tok = _tracer(path)
    mismatches = [(text, _ids(tok, text), ids) for text in TEXTS + SPECIAL_TEXTS["<s>"]
                  if _ids(tok, text) != (ids := llama_tokenize(path, text))]
    assert not mismatches, mismatches


@pytest.mark.parametrize("model_type,gguf_model,squeeze", [("bpe", "llama", False), ("unigram", "t5", False),
                                                           ("unigram", "t5", True)])
def test_sentencepiece_vocabularies_tokenize_as_llama_tokenize(tmp_path, model_type, gguf_model, squeeze):
    require_binary("llama-tokenize")
    pytest.importorskip("sentencepiece")
    sp, _ = train_sentencepiece(model_type, remove_extra_whitespaces=squeeze)
    arch = "llama" if gguf_model == "llama" else "t5"
    path = write_vocab_gguf(tmp_path / f"{gguf_model}.gguf", sentencepiece_fields(sp, gguf_model, squeeze), arch)
    tok = _tracer(path)
    # llama-tokenize passes add_special = add_bos: a t5 file (no BOS) gets no EOS there either
    specials = gguf_model == "llama"
    mismatches = [(text, got, ids) for text in TEXTS + SPECIAL_TEXTS["<tool>"]
                  if (got := _ids(tok, text, specials)) != (ids := llama_tokenize(path, text))]
    assert not mismatches, mismatches
