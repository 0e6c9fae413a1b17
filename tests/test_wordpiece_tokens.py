"""Real BERT-style tokenizers: [UNK] is unknown text (not a special token), `##` pieces continue a word, the
file's own padding and truncation are switched off, and a text pair is marked with token type 1."""

import json

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, normalizers, pre_tokenizers, processors

from tracer.checkpoint.tokenizer import Tokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "token", "##ization", "##s", "a", "."]


@pytest.fixture
def bert_tokenizer(tmp_path):
    tok = HFTokenizer(models.WordPiece({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.enable_padding(length=16, pad_id=0, pad_token="[PAD]")  # as all-MiniLM-L6-v2's tokenizer.json does
    tok.enable_truncation(max_length=6)
    path = tmp_path / "tokenizer.json"
    path.write_text(tok.to_str())
    assert json.loads(path.read_text())["padding"] is not None
    return Tokenizer(path)


def test_file_padding_and_truncation_are_off(bert_tokenizer):
    toks = bert_tokenizer.encode("the cat sat . the cat sat . the cat")
    assert len(toks) == 12, "no silent truncation to 6, no padding to 16"
    assert toks[0].piece == "[CLS]" and toks[-1].piece == "[SEP]"


def test_unknown_and_continuation_pieces(bert_tokenizer):
    toks = bert_tokenizer.encode("the cats ☃ tokenization")
    by_piece = {t.piece: t for t in toks}
    unk = by_piece["[UNK]"]
    assert unk.unknown and not unk.special, "[UNK] stands for text the vocabulary cannot spell"
    assert unk.bytes == "☃".encode(), "its bytes are the text it replaced"
    assert by_piece["##s"].continuation and by_piece["##s"].bytes == b"s"
    assert by_piece["##ization"].continuation and not by_piece["token"].continuation
    assert by_piece["[CLS]"].special and not by_piece["[CLS]"].unknown
    d = bert_tokenizer.describe_id(1)
    assert d.get("unknown") and not d["special"]


def test_pair_is_marked_with_type_one(bert_tokenizer):
    toks = bert_tokenizer.encode("the cat", pair="a cat")
    assert [t.piece for t in toks] == ["[CLS]", "the", "cat", "[SEP]", "a", "cat", "[SEP]"]
    assert [t.type_id for t in toks] == [0, 0, 0, 0, 1, 1, 1]
    assert toks[4].sequence == 1 and toks[4].to_dict(4, "a cat")["text"] == "a"
