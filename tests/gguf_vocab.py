"""Small GGUF files that carry only a tokenizer, written with gguf.GGUFWriter (no llama.cpp, no torch).

The tokenizer keys are written the way convert_hf_to_gguf.py writes them: byte-level BPE from a tokenizer.json
(`_set_vocab_gpt2`: added special tokens CONTROL, other added tokens USER_DEFINED) and SentencePiece from a
trained sentencepiece model (`_create_vocab_sentencepiece`: unknown, control, unused and byte pieces typed).
Shared by tests/test_gguf_tokenizer.py and the live tests against llama-tokenize.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def write_vocab_gguf(path: Path, fields: dict, arch: str = "llama") -> Path:
    """A GGUF holding `fields` (tokenizer.ggml.* -> value) and the few llama keys llama.cpp needs to load a vocab."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_layer_norm_rms_eps(1e-5)
    for key, value in fields.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, bytes):
            w.add_array(key, list(value))
        else:
            w.add_array(key, value)  # GGUFWriter types a list by its first item: str, int32, float32
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def read_metadata(path: Path) -> dict:
    """Plain Python metadata of a GGUF (what the gguf reader hands tokenizer_spec_from_gguf)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    return {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}


def byte_level_fields(tokenizer_json: Path, pre: str, add_bos: bool | None = None) -> dict:
    """tokenizer.ggml.* of a byte-level BPE tokenizer.json, as _set_vocab_gpt2 writes them."""
    tj = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    vocab = dict(tj["model"]["vocab"])
    for added in tj["added_tokens"]:
        vocab[added["content"]] = added["id"]
    by_id = {i: t for t, i in vocab.items()}
    tokens = [by_id[i] for i in range(len(by_id))]
    added = {a["id"]: a for a in tj["added_tokens"]}
    types = [(CONTROL if added[i]["special"] else USER_DEFINED) if i in added else NORMAL for i in range(len(tokens))]
    merges = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]
    fields = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, "tokenizer.ggml.tokens": tokens,
              "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges}
    config = json.loads((tokenizer_json.parent / "tokenizer_config.json").read_text(encoding="utf-8"))
    for role in ("bos", "eos"):
        name = config.get(f"{role}_token")
        name = name.get("content") if isinstance(name, dict) else name
        if isinstance(name, str) and name in vocab:
            fields[f"tokenizer.ggml.{role}_token_id"] = vocab[name]
    if add_bos is not None:
        fields["tokenizer.ggml.add_bos_token"] = add_bos
    return fields


def train_sentencepiece(model_type: str, vocab_size: int = 1000, **options):
    """A sentencepiece model trained on the fixture corpus in well under a second: (processor, model bytes)."""
    import sentencepiece as spm

    text = "".join((REPO / "fixtures/corpus" / n).read_text(encoding="utf-8") for n in ("tiny.txt", "seasons.txt"))
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text.splitlines()), model_writer=out, vocab_size=vocab_size, model_type=model_type,
        byte_fallback=True, normalization_rule_name="identity", character_coverage=0.98, minloglevel=2,
        hard_vocab_limit=False, user_defined_symbols=["<tool>"], control_symbols=["<ctl>"], **options)
    return spm.SentencePieceProcessor(model_proto=out.getvalue()), out.getvalue()


def sentencepiece_fields(sp, model: str, remove_extra_whitespaces: bool = False) -> dict:
    """tokenizer.ggml.* of a sentencepiece model, as _create_vocab_sentencepiece types its pieces."""
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(float(sp.get_score(i)))
        types.append(UNKNOWN if sp.is_unknown(i) else CONTROL if sp.is_control(i) else UNUSED if sp.is_unused(i)
                     else BYTE if sp.is_byte(i) else NORMAL)
    types[sp.piece_to_id("<tool>")] = USER_DEFINED  # the converter types added_tokens user-defined
    fields = {"tokenizer.ggml.model": model, "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": scores,
              "tokenizer.ggml.token_type": types, "tokenizer.ggml.bos_token_id": sp.bos_id(),
              "tokenizer.ggml.eos_token_id": sp.eos_id(), "tokenizer.ggml.unknown_token_id": sp.unk_id()}
    if model == "t5":  # as the T5 converter copies them from the model's normalizer_spec
        fields["tokenizer.ggml.add_space_prefix"] = True
        fields["tokenizer.ggml.remove_extra_whitespaces"] = remove_extra_whitespaces
    return fields
