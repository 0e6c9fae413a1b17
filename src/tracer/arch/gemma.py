"""Gemma (v1): embeddings scaled by sqrt(d_model), RMSNorm as x * (1 + w), GeGLU, tied head."""

import math

from tracer.arch.llama import HF_ACTIVATIONS, IGNORED, llama_spec, llama_weights  # noqa: F401  (IGNORED: re-exported)
from tracer.checkpoint.config import cfg_bool, cfg_choice, cfg_size
from tracer.errors import TracerError


def spec_from_config(cfg: dict):
    d_model = cfg_size(cfg, "hidden_size", "gemma", "d_model")
    return llama_spec(
        cfg,
        "gemma",
        norm_offset=1.0,
        embed_scale=math.sqrt(d_model),
        tied_embeddings=cfg_bool(cfg, "tie_word_embeddings", "gemma", default=True),
        causal=not bidirectional(cfg, "gemma"),
        activation=gemma_activation(cfg),
    )


def bidirectional(cfg: dict, family: str) -> bool:
    """gemma and gemma2 refuse use_bidirectional_attention: transformers 5.24 builds their mask with
    create_causal_mask whatever it says (eager: causal), while sdpa without padding drops the mask and
    follows the module's is_causal = False (bidirectional). tracer cannot tell which one is meant."""
    if cfg_bool(cfg, "use_bidirectional_attention", family, default=False, nullable=True):
        raise TracerError(f"{family}: use_bidirectional_attention is not supported: transformers 5.24 applies it "
                          "inconsistently (eager: causal mask; sdpa without padding: bidirectional)",
                          hint="remove it from config.json to run the model causal, as transformers' eager does")
    return False


def gemma_activation(cfg: dict) -> str:
    """hidden_act (transformers' GemmaConfig turns the legacy "gelu" of the official releases into the tanh gelu)."""
    act = cfg_choice(cfg, "hidden_act", "gemma", HF_ACTIVATIONS, default="gelu_pytorch_tanh")
    return HF_ACTIVATIONS["gelu_pytorch_tanh" if act == "gelu" else act]


def weight_sources(spec):
    return llama_weights(spec)
