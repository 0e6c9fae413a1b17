"""RoBERTa: BERT's encoder, with positions counted from the mask and stored after `padding_idx + 1` rows.

transformers derives position ids as cumsum(mask) * mask + padding_idx: real
tokens start at padding_idx + 1, so left padding does not shift them.
The LM head is dense, GELU, LayerNorm, decoder (tied to the word embeddings unless untied), bias.
"""

from __future__ import annotations

from tracer.arch.bert import encoder_spec, encoder_weights, mlm_head_weights
from tracer.arch.canonical import Source
from tracer.arch.spec import Spec
from tracer.checkpoint.config import cfg_int, cfg_size
from tracer.errors import TracerError

IGNORED = ("pooler.*", "roberta.pooler.*", "*.position_ids", "*.token_type_ids")


def spec_from_config(cfg: dict) -> Spec:
    pad = cfg_int(cfg, "pad_token_id", "roberta", minimum=0, maximum=1 << 24, default=1)
    max_rows = cfg_size(cfg, "max_position_embeddings", "roberta", "positions")
    if max_rows <= pad + 1:
        raise TracerError(f"config.json (roberta): max_position_embeddings {max_rows} leaves no position after the "
                          f"pad_token_id + 1 = {pad + 1} rows RoBERTa reserves")
    return encoder_spec(
        cfg, "roberta",
        max_positions=max_rows - (pad + 1),  # the table holds pad + 1 unused rows before position 0
        position_offset=pad + 1,
        position_rule="mask",
        token_types=cfg_int(cfg, "type_vocab_size", "roberta", minimum=0, maximum=1024, default=1),
        head_activation="gelu",  # RobertaLMHead always uses GELU
    )  # fmt: skip


def weight_sources(spec: Spec) -> dict[str, Source]:
    return encoder_weights(spec, "roberta.") | mlm_head_weights(spec, "roberta.", "lm_head.dense", "lm_head.layer_norm",
                                                                "lm_head.")
