"""Mistral: Llama plus a sliding window of W keys (including the query's own) on every layer."""

from tracer.arch.llama import llama_spec, llama_weights


def spec_from_config(cfg: dict):
    n_layers = int(cfg.get("num_hidden_layers", 0))
    window = cfg.get("sliding_window")
    return llama_spec(cfg, "mistral", sliding_window=(int(window) if window else None,) * n_layers)


def weight_sources(spec):
    return llama_weights(spec)
