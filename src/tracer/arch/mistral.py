"""Mistral: Llama plus a sliding window of W keys (including the query's own) on every layer."""

from tracer.arch.llama import IGNORED, llama_spec, llama_weights, sliding_window
from tracer.checkpoint.config import cfg_size


def spec_from_config(cfg: dict):
    n_layers = cfg_size(cfg, "num_hidden_layers", "mistral", "layers")
    return llama_spec(cfg, "mistral", sliding_window=(sliding_window(cfg, "mistral"),) * n_layers)


def weight_sources(spec):
    return llama_weights(spec)
