"""Which adapter serves which `model_type`. Adding a family is adding a module and a line here."""

from __future__ import annotations

import importlib
from types import ModuleType

from tracer.errors import TracerError

FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "gemma", "phi3", "gpt_neox", "opt", "bert", "roberta", "t5", "bart")
# the families of issue 10 (kept apart for merging)
FAMILIES += ("qwen3", "olmo2", "starcoder2", "phi", "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe")


def adapter_for(cfg: dict) -> ModuleType:
    family = cfg.get("model_type")
    if not family:
        raise TracerError("config.json has no model_type", hint="supported families: " + ", ".join(FAMILIES))
    if family not in FAMILIES:
        raise TracerError(f"model family {family!r} is not supported", hint="supported: " + ", ".join(FAMILIES))
    return importlib.import_module(f"tracer.arch.{family}")
