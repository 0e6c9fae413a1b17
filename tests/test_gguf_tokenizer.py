"""The tokenizer of a GGUF file (tokenizer.ggml.*), rebuilt with `tokenizers`, on files written by gguf.GGUFWriter.

References, independent of the code under test: the fixture's own tokenizer.json run by `tokenizers` (a byte-level
BPE whose ByteLevel pre-tokenizer is GPT-2's regex, so `pre = gpt-2` must tokenize alike), and the sentencepiece
library on the model the GGUF vocabulary was taken from (llama.cpp's SentencePiece BPE and Unigram follow it).
Exact id equality throughout. No llama.cpp here: tests/test_gguf_tokenizer_live.py holds the same to llama-tokenize.
"""

from __future__ import annotations

import pytest

from gguf_vocab import REPO, byte_level_fields, read_metadata, sentencepiece_fields, train_sentencepiece, write_vocab_gguf
from tracer.checkpoint.gguf_tokenizer import tokenizer_spec_from_gguf
from tracer.checkpoint.tokenizer import Tokenizer
from tracer.errors import TracerError

gguf = pytest.importorskip("gguf")

TEXTS = ["Hello world", "春天来了，万物复苏", "  two  spaces,   three\n\nnewlines\n", "digits 1234567 3.14",
         "emoji 🚀🦙 ok", "I've 'RE sure", "tabs\t\tand\u00a0nbsp", ""]


def _from_gguf(tmp_path, fields, name="t.gguf") -> Tokenizer:
    path = write_vocab_gguf(tmp_path / name, fields)
    return Tokenizer.from_spec(tokenizer_spec_from_gguf(read_metadata(path)), str(path))


def _ids(tok: Tokenizer, text: str, special_tokens: bool = True) -> list[int]:
    return [t.id for t in tok.encode(text, special_tokens=special_tokens)]


@pytest.mark.parametrize("fixture", ["models/llama", "default-model"])
def test_byte_level_bpe_matches_the_folders_tokenizer_json(tmp_path, fixture):
    folder = REPO / "fixtures" / fixture
    ref = Tokenizer(folder / "tokenizer.json")
    tok = _from_gguf(tmp_path, byte_level_fields(folder / "tokenizer.json", "gpt-2", add_bos=True))
    for text in TEXTS + ["<s>after a special</s> and </s>x"]:
        assert _ids(tok, text) == _ids(ref, text), text
    assert tok.encode("a")[0].special and tok.encode("a")[0].id == ref.token_id("<s>")
    assert tok.decode(_ids(tok, "Hello 春天", special_tokens=False)) == "Hello 春天"
    assert b"".join(t.bytes for t in tok.encode("春天", special_tokens=False)) == "春天".encode()


def test_add_bos_follows_the_file_and_llama_cpps_default(tmp_path):
    tj = REPO / "fixtures/models/llama/tokenizer.json"
    no_key = byte_level_fields(tj, "gpt-2")
    assert _ids(_from_gguf(tmp_path, no_key, "a.gguf"), "hi")[0] != 0  # gpt-2 pre: llama.cpp adds no BOS by default
    assert _ids(_from_gguf(tmp_path, dict(no_key, **{"tokenizer.ggml.pre": "llama-bpe"}), "b.gguf"), "hi")[0] == 0
    off = dict(no_key, **{"tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.add_bos_token": False})
    assert _ids(_from_gguf(tmp_path, off, "c.gguf"), "hi")[0] != 0


def test_the_pre_tokenizer_name_chooses_the_split(tmp_path):
    tj = REPO / "fixtures/models/llama/tokenizer.json"
    pieces = {}
    for pre in ("gpt-2", "llama-bpe", "qwen2"):
        tok = _from_gguf(tmp_path, byte_level_fields(tj, pre), f"{pre}.gguf")
        pieces[pre] = tok._tok.pre_tokenizer.pre_tokenize_str("x 12345")
    # GPT-2 keeps a digit run whole, llama3 cuts it in threes, qwen2 digit by digit (llama-vocab.cpp regexes)
    assert [p for p, _ in pieces["gpt-2"]] == ["x", "Ġ12345"]
    assert [p for p, _ in pieces["llama-bpe"]] == ["x", "Ġ", "123", "45"]
    assert [p for p, _ in pieces["qwen2"]] == ["x", "Ġ", "1", "2", "3", "4", "5"]


def test_user_defined_tokens_are_cut_out_but_not_special(tmp_path):
    fields = byte_level_fields(REPO / "fixtures/models/llama/tokenizer.json", "gpt-2")
    i = fields["tokenizer.ggml.tokens"].index("Ġthe") if "Ġthe" in fields["tokenizer.ggml.tokens"] else 300
    fields["tokenizer.ggml.tokens"][i] = "<tool>"  # the converter stores user-defined tokens as raw text
    fields["tokenizer.ggml.token_type"][i] = 4
    tok = _from_gguf(tmp_path, fields)
    toks = tok.encode("a<tool>b", special_tokens=False)
    assert [t.id for t in toks][1] == i and not toks[1].special and toks[1].bytes == b"<tool>"
    assert tok.encode("</s>", special_tokens=False)[0].special  # CONTROL


@pytest.mark.parametrize("model_type,gguf_model,squeeze", [("bpe", "llama", False), ("unigram", "t5", False),
                                                           ("unigram", "t5", True)])
def test_sentencepiece_vocabularies_match_sentencepiece(tmp_path, model_type, gguf_model, squeeze):
    """llama.cpp's SPM keeps every space (no remove_extra_whitespaces); its Unigram squeezes them when asked."""
    pytest.importorskip("sentencepiece")
    sp, _ = train_sentencepiece(model_type, remove_extra_whitespaces=squeeze)
    tok = _from_gguf(tmp_path, sentencepiece_fields(sp, gguf_model, squeeze))
    for text in TEXTS[:-1] + ["a rare ŧ char and 𝄞"]:  # rare characters fall back to <0xNN> byte pieces
        ids = sp.encode(text)
        if gguf_model == "llama":
            assert _ids(tok, text) == [sp.bos_id()] + ids, text
            assert tok.decode(_ids(tok, text, special_tokens=False)) == sp.decode(ids)
        else:  # llama.cpp's UGM has no byte fallback: sentencepiece's run of byte pieces is one unknown there
            assert _ids(tok, text) == _bytes_as_unknown(sp, ids) + [sp.eos_id()], text


def _bytes_as_unknown(sp, ids: list[int]) -> list[int]:
    out: list[int] = []
    for i in ids:
        i = sp.unk_id() if sp.is_byte(i) else i
        if not (out and i == sp.unk_id() and out[-1] == sp.unk_id()):
            out.append(i)
    return out


def test_sentencepiece_bpe_restarts_the_space_prefix_after_a_special_token(tmp_path):
    """llama.cpp's SPM tokenize_impl prepends U+2581 to every stretch of text at the start or after a special
    token (is_prev_special), so "<tool>x" spells x as a first word; sentencepiece itself would not."""
    pytest.importorskip("sentencepiece")
    sp, _ = train_sentencepiece("bpe", remove_extra_whitespaces=False)
    tok = _from_gguf(tmp_path, sentencepiece_fields(sp, "llama"))
    tool = sp.piece_to_id("<tool>")
    assert _ids(tok, "<tool>world", special_tokens=False) == [tool] + sp.encode("world")
    assert _ids(tok, "hello<tool>", special_tokens=False) == sp.encode("hello") + [tool]


def test_byte_pieces_spell_their_byte(tmp_path):
    pytest.importorskip("sentencepiece")
    sp, _ = train_sentencepiece("bpe", remove_extra_whitespaces=False)
    tok = _from_gguf(tmp_path, sentencepiece_fields(sp, "llama"))
    toks = tok.encode("𝄞", special_tokens=False)
    assert b"".join(t.bytes for t in toks).strip() == "𝄞".encode()
    assert any(t.piece.startswith("<0x") for t in toks)


@pytest.mark.parametrize("change,message", [
    ({"tokenizer.ggml.model": "rwkv"}, "'rwkv'"),
    ({"tokenizer.ggml.pre": "no-such-pre"}, "'no-such-pre'"),
    ({"tokenizer.ggml.pre": "kimi-k2"}, "'kimi-k2'"),
])
def test_an_unknown_model_or_pre_tokenizer_is_named(tmp_path, change, message):
    fields = dict(byte_level_fields(REPO / "fixtures/models/llama/tokenizer.json", "gpt-2"), **change)
    with pytest.raises(TracerError, match=message):
        tokenizer_spec_from_gguf(read_metadata(write_vocab_gguf(tmp_path / "t.gguf", fields)))


def test_a_file_without_a_tokenizer_says_so():
    with pytest.raises(TracerError, match="no tokenizer"):
        tokenizer_spec_from_gguf({"general.architecture": "llama"})
    with pytest.raises(TracerError, match="vocabulary"):
        tokenizer_spec_from_gguf({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": []})
    with pytest.raises(TracerError, match="token_type has 1 entries for 2 tokens"):
        tokenizer_spec_from_gguf({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a", "b"],
                                  "tokenizer.ggml.token_type": [1]})
