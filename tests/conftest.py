from __future__ import annotations

import os
from pathlib import Path

# NumPy's BLAS threads, pinned for the whole suite so its float32 sums split the same way on every machine
# (OpenBLAS divides a product among its threads; their count changes the order of the partial sums): in this
# process with threadpoolctl (NumPy is loaded by pytest's plugins before this file runs), and for the
# processes the tests start through the environment. Checked by tests/test_blas_threads.py.
BLAS_THREADS = os.environ.setdefault("TRACER_TEST_BLAS_THREADS", "2")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = BLAS_THREADS
try:
    from threadpoolctl import threadpool_limits

    _BLAS_LIMIT = threadpool_limits(limits=int(BLAS_THREADS), user_api="blas")  # held for the session
except ImportError:  # the test extra brings it; without it only the environment pins the threads
    _BLAS_LIMIT = None

import pytest
from hypothesis import HealthCheck, settings

# Property suites (tests/test_fuzz_*.py, marker `fuzz`): the default profile is a short run with a fixed seed
# (derandomize) that CI runs with every suite; `pytest -m fuzz --hypothesis-profile long` is the long campaign.
_FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                   HealthCheck.data_too_large, HealthCheck.filter_too_much],
             print_blob=True, database=None)
settings.register_profile("ci", max_examples=40, derandomize=True, **_FUZZ)
settings.register_profile("long", max_examples=2000, **_FUZZ)
settings.load_profile("ci")

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "fixtures" / "models"
FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "gemma", "phi3", "gpt_neox", "opt")
VARIANTS = ("llama-bf16", "llama-sharded", "llama-v4config")
ENCODERS = ("bert", "bert-mlm", "roberta")  # encoder-only route fixtures (bert: BertModel, no head)
SEQ2SEQ = ("t5", "t5-gated", "bart")  # encoder-decoder route fixtures
# issue 10: newer families, and llama under each rope scaling
FAMILIES += ("qwen3", "olmo2", "starcoder2", "phi", "gemma2", "gemma3_text", "mixtral", "qwen3_moe")
ROPE_VARIANTS = ("llama-linear", "llama-dynamic", "llama-yarn", "llama-longrope")
OPT_VARIANTS = ("opt-350m", "opt-project")  # embeddings projected in/out; opt-350m also post-norm, no final norm
VARIANTS += ROPE_VARIANTS + OPT_VARIANTS
FAMILIES += ("qwen2_moe",)  # issue 10: routed experts plus a shared expert, a dense middle layer
FAMILY_VARIANTS = ("phi-qk", "qwen3_moe-dense")  # phi with qk_layernorm; qwen3_moe with a dense first layer
VARIANTS += FAMILY_VARIANTS


def model_dir(name: str) -> Path:
    path = MODELS / name
    assert (path / "config.json").is_file(), f"fixture {name} missing: run python fixtures/build_fixtures.py"
    return path


@pytest.fixture(scope="session")
def models_root() -> Path:
    return MODELS


def pytest_addoption(parser):
    # tests/test_random_configs_live.py: configs drawn per family (default: a handful; env TRACER_RANDOM_CONFIGS)
    parser.addoption("--random-configs", type=int, default=None, help="random configs per family to check against transformers")
