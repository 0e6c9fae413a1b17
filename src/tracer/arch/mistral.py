"""Mistral: Llama plus a sliding window of W keys (including the query's own) on every layer
(`sliding_window`; 4096 when the field is missing, as transformers' MistralConfig; null: full attention)."""

from tracer.arch.llama import IGNORED, llama_spec, llama_weights  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.windows import DEFAULT_WINDOW, every_layer


def spec_from_config(cfg: dict):
    return llama_spec(cfg, "mistral", sliding_window=every_layer(cfg, "mistral", absent=DEFAULT_WINDOW))


def weight_sources(spec):
    return llama_weights(spec)
