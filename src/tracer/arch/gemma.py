"""Gemma (v1): embeddings scaled by sqrt(d_model), RMSNorm as x * (1 + w), GeGLU, tied head."""

import math

from tracer.arch.llama import llama_spec, llama_weights


def spec_from_config(cfg: dict):
    d_model = int(cfg.get("hidden_size", 0))
    return llama_spec(
        cfg,
        "gemma",
        norm_offset=1.0,
        embed_scale=math.sqrt(d_model),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        causal=not cfg.get("use_bidirectional_attention", False),
    )


def weight_sources(spec):
    return llama_weights(spec)
