from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "fixtures" / "models"
FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "gemma", "phi3", "gpt_neox", "opt")
VARIANTS = ("llama-bf16", "llama-sharded", "llama-v4config")
ENCODERS = ("bert", "bert-mlm", "roberta")  # encoder-only route fixtures (bert: BertModel, no head)
SEQ2SEQ = ("t5", "t5-gated", "bart")  # encoder-decoder route fixtures


def model_dir(name: str) -> Path:
    path = MODELS / name
    assert (path / "config.json").is_file(), f"fixture {name} missing: run python fixtures/build_fixtures.py"
    return path


@pytest.fixture(scope="session")
def models_root() -> Path:
    return MODELS
