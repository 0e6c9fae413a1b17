"""The tokenizer a GGUF file carries (`tokenizer.ggml.*`), as a tokenizer.json spec that behaves as llama.cpp does.

llama.cpp tokenizes from the file's own metadata, not from the folder's tokenizer.json, so this is what a GGUF
model actually sees. Three models (llama.cpp's `llama_vocab::impl::load` and `tokenize_impl`):

- `gpt2`  byte-level BPE: the regexes `tokenizer.ggml.pre` names split the text (checkpoint/gguf_pretokenizers),
          each piece is byte-encoded and merged by `tokenizer.ggml.merges` rank.
- `llama` SentencePiece BPE: spaces become U+2581, a U+2581 is prepended to every stretch of text at the start
          or after a special token (`add_space_prefix`), adjacent pieces merge highest `scores` first, pieces
          the vocabulary lacks fall back to the `<0xNN>` byte tokens.
- `t5`    SentencePiece Unigram over `scores`, after the file's `precompiled_charsmap` normalization; unlike
          sentencepiece, llama.cpp has no byte fallback here (a run of unknown characters is one unknown token).

Token types (`tokenizer.ggml.token_type`): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
llama.cpp cuts control, unknown and user-defined tokens out of the text before anything else (the first two
only when parsing special tokens, which tracer always does): they become `added_tokens`, control and unknown
ones `special`. BOS/EOS follow `add_bos_token`/`add_eos_token`, else llama.cpp's default for the model and
pre-tokenizer.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

from tracer.checkpoint.gguf_pretokenizers import PreTokenizer, known_names, pre_tokenizer
from tracer.errors import TracerError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"  # SentencePiece's visible space
KEY = "tokenizer.ggml."

# llama.cpp's default special ids per model when the file names none (llama_vocab::impl::load)
_DEFAULT_IDS = {"llama": {"bos": 1, "eos": 2, "unk": 0}, "gpt2": {"bos": 11, "eos": 11}, "t5": {"eos": 1, "unk": 2}}


def tokenizer_spec_from_gguf(metadata: Mapping[str, object]) -> dict:
    """tokenizer.json (as a dict, for `tokenizers`) equivalent to llama.cpp's tokenizer for this file."""
    model = metadata.get(KEY + "model")
    if model is None:
        raise TracerError("the GGUF file carries no tokenizer (no tokenizer.ggml.model)",
                          hint="pass a folder's tokenizer.json with --tokenizer json")
    if model not in _DEFAULT_IDS:
        raise TracerError(f"GGUF tokenizer model {model!r} is not supported",
                          hint="tracer reads tokenizer.ggml.model gpt2, llama and t5")
    tokens = _tokens(metadata)
    types = _per_token(metadata, "token_type", len(tokens), int, NORMAL)
    scores = _per_token(metadata, "scores", len(tokens), float, 0.0)
    ids = _special_token_ids(metadata, model, len(tokens))
    if model == "gpt2":
        return _byte_level_bpe(metadata, tokens, types, ids)
    if model == "llama":
        return _sentencepiece_bpe(metadata, tokens, types, scores, ids)
    return _sentencepiece_unigram(metadata, tokens, types, scores, ids)


# --- the three models ---------------------------------------------------------------------------------------

def _byte_level_bpe(metadata, tokens: list[str], types: list[int], ids: dict) -> dict:
    name = metadata.get(KEY + "pre")
    name = "default" if name is None else name  # llama.cpp: missing pre-tokenizer -> 'default' (with a warning)
    if not isinstance(name, str):
        raise TracerError(f"GGUF tokenizer.ggml.pre is {type(name).__name__}, not a string")
    pre = pre_tokenizer(name)
    if pre is None:
        raise TracerError(f"GGUF pre-tokenizer {name!r} (tokenizer.ggml.pre) is not supported",
                          hint=f"tracer knows {', '.join(known_names())}")
    vocab = _vocab(tokens)
    merges = [m for m in (_split_merge(s) for s in _merge_strings(metadata))
              if m is not None and m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
    bos = None if pre.no_bos else ids.get("bos")
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(tokens, types),
        "normalizer": None,
        "pre_tokenizer": _split_sequence(pre),
        "post_processor": _template(tokens, bos if _flag(metadata, "add_bos_token", pre.add_bos) else None,
                                    ids.get("eos") if _flag(metadata, "add_eos_token", False) else None),
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": pre.ignore_merges, "vocab": vocab, "merges": [list(m) for m in merges]},
    }


def _sentencepiece_bpe(metadata, tokens: list[str], types: list[int], scores: list[float], ids: dict) -> dict:
    vocab = _vocab(tokens)
    add_prefix = _flag(metadata, "add_space_prefix", True)
    unk = ids.get("unk")
    normalizer = [{"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]
    if add_prefix:  # per stretch of text: tokenizers normalizes each piece between added tokens separately
        normalizer.insert(0, {"type": "Prepend", "prepend": SPACE})
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(tokens, types),
        "normalizer": {"type": "Sequence", "normalizers": normalizer},
        "pre_tokenizer": None,
        "post_processor": _template(tokens, ids.get("bos") if _flag(metadata, "add_bos_token", True) else None,
                                    ids.get("eos") if _flag(metadata, "add_eos_token", False) else None),
        "decoder": _sentencepiece_decoder(add_prefix),
        "model": {"type": "BPE", "dropout": None, "unk_token": tokens[unk] if unk is not None else None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
                  "byte_fallback": BYTE in types, "ignore_merges": False, "vocab": vocab,
                  "merges": _merges_by_score(tokens, scores, vocab)},
    }


def _sentencepiece_unigram(metadata, tokens: list[str], types: list[int], scores: list[float], ids: dict) -> dict:
    normalizers = []
    charsmap = metadata.get(KEY + "precompiled_charsmap")
    if isinstance(charsmap, (list, bytes, bytearray)) and len(charsmap) > 0:
        raw = bytes(b & 0xFF for b in charsmap) if isinstance(charsmap, list) else bytes(charsmap)
        normalizers.append({"type": "Precompiled", "precompiled_charsmap": base64.b64encode(raw).decode()})
    # llama.cpp's UGM normalize(), per stretch of text, on ASCII spaces only; then one lattice over it all (no split)
    squeeze = _flag(metadata, "remove_extra_whitespaces", False)
    if squeeze:  # runs of spaces -> one, none at either end, and always a U+2581 before the first word
        normalizers += [{"type": "Replace", "pattern": {"Regex": "^ +| +$"}, "content": ""},
                        {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]
    add_prefix = _flag(metadata, "add_space_prefix", False)
    if add_prefix or squeeze:
        normalizers.append({"type": "Prepend", "prepend": SPACE})
    normalizers.append({"type": "Replace", "pattern": {"String": " "}, "content": SPACE})
    unk = ids.get("unk")
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(tokens, types),
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": None,
        "post_processor": _template(tokens, ids.get("bos") if _flag(metadata, "add_bos_token", False) else None,
                                    ids.get("eos") if _flag(metadata, "add_eos_token", True) else None),
        "decoder": _sentencepiece_decoder(add_prefix),
        # llama.cpp's UGM has no byte fallback: a run of characters the vocabulary lacks is one unknown token
        "model": {"type": "Unigram", "unk_id": unk, "byte_fallback": False,
                  "vocab": [[t, s] for t, s in zip(tokens, scores)]},
    }


# --- pieces shared by the models -----------------------------------------------------------------------------

def _split_sequence(pre: PreTokenizer) -> dict:
    """llama.cpp's regex list, each splitting what the previous left (matches and gaps kept), then byte-encoding."""
    splits = [{"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in pre.regexes]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    return {"type": "Sequence", "pretokenizers": splits + [byte_level]}


def _sentencepiece_decoder(add_prefix: bool) -> dict:
    decoders = [{"type": "Replace", "pattern": {"String": SPACE}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}]
    if add_prefix:
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {"type": "Sequence", "decoders": decoders}


def _added_tokens(tokens: list[str], types: list[int]) -> list[dict]:
    """Control, unknown and user-defined tokens, matched in the raw text before the model sees it."""
    return [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": types[i] != USER_DEFINED}
            for i in range(len(tokens)) if types[i] in (UNKNOWN, CONTROL, USER_DEFINED)]


def _template(tokens: list[str], bos: int | None, eos: int | None) -> dict | None:
    if bos is None and eos is None:
        return None
    head = [{"SpecialToken": {"id": tokens[bos], "type_id": 0}}] if bos is not None else []
    tail = [{"SpecialToken": {"id": tokens[eos], "type_id": 0}}] if eos is not None else []
    used = {tokens[i]: i for i in (bos, eos) if i is not None}
    return {
        "type": "TemplateProcessing",
        "single": head + [{"Sequence": {"id": "A", "type_id": 0}}] + tail,
        "pair": head + [{"Sequence": {"id": "A", "type_id": 0}}] + tail
                + [{"Sequence": {"id": "B", "type_id": 1}}] + tail,
        "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in used.items()},
    }


def _vocab(tokens: list[str]) -> dict[str, int]:
    return {t: i for i, t in enumerate(tokens)}  # a repeated string keeps its last id, as llama.cpp's token_to_id


def _merges_by_score(tokens: list[str], scores: list[float], vocab: dict[str, int]) -> list[list[str]]:
    """SentencePiece BPE as ranked merges: every split of a vocabulary piece into two vocabulary pieces, the
    highest-scoring result first (llama.cpp merges the adjacent pair whose concatenation scores highest)."""
    ranked = []
    for merged, i in vocab.items():
        for k in range(1, len(merged)):
            left, right = merged[:k], merged[k:]
            if left in vocab and right in vocab:
                ranked.append((-scores[i], i, left, right))
    ranked.sort()
    return [[left, right] for _, _, left, right in ranked]


def _split_merge(merge: str) -> tuple[str, str] | None:
    pos = merge.find(" ", 1)  # llama.cpp: the first space after the first character
    return (merge[:pos], merge[pos + 1:]) if pos > 0 else None


# --- reading the metadata ------------------------------------------------------------------------------------

def _tokens(metadata) -> list[str]:
    tokens = metadata.get(KEY + "tokens")
    if not isinstance(tokens, (list, tuple)) or not tokens:
        raise TracerError("the GGUF file carries no tokenizer vocabulary (tokenizer.ggml.tokens missing or empty)")
    if not all(isinstance(t, str) for t in tokens):
        raise TracerError("GGUF tokenizer.ggml.tokens holds something other than strings")
    return [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]  # as llama.cpp renames an empty token


def _per_token(metadata, name: str, n: int, kind: type, default) -> list:
    values = metadata.get(KEY + name)
    if values is None:
        return [default] * n
    if not isinstance(values, (list, tuple)) or len(values) < n:
        got = len(values) if isinstance(values, (list, tuple)) else type(values).__name__
        raise TracerError(f"GGUF tokenizer.ggml.{name} has {got} entries for {n} tokens")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values[:n]):
        raise TracerError(f"GGUF tokenizer.ggml.{name} holds something other than numbers")
    return [kind(v) for v in values[:n]]


def _special_token_ids(metadata, model: str, n: int) -> dict:
    ids = dict(_DEFAULT_IDS[model])
    for role, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id")):
        value = metadata.get(KEY + key)
        if isinstance(value, int) and not isinstance(value, bool):
            ids[role] = value
    # llama.cpp warns about an id outside the vocabulary and keeps its default; tracer drops it
    return {role: i for role, i in ids.items() if 0 <= i < n}


def _merge_strings(metadata) -> list[str]:
    merges = metadata.get(KEY + "merges")
    if not isinstance(merges, (list, tuple)):
        raise TracerError("the GGUF file's BPE tokenizer has no merges (tokenizer.ggml.merges)")
    if not all(isinstance(m, str) for m in merges):
        raise TracerError("GGUF tokenizer.ggml.merges holds something other than strings")
    return list(merges)


def _flag(metadata, name: str, default: bool) -> bool:
    value = metadata.get(KEY + name)
    return value if isinstance(value, bool) else default
