"""Random tiny configurations of every family against transformers 5.24 float32 eager, step by step.

A seeded generator (tests/random_configs.py) draws each family's config space (sizes, heads and kv heads,
head_dim, rope variants, windows and layer types, norms, tied or untied heads and embeddings, biases,
experts, the two sides of an encoder-decoder); each draw is saved with random weights (save_pretrained,
safetensors), captured with transformers' eager forward on a random one- or two-row prompt (padded left or
right), and run by tracer on the same inputs. Every recorded step must match: logits, attention weights,
hidden states (resid_post) and everything in between, within ATOL = 1e-5 x max(1, max |transformers|)
(the rule of test_parity_routes; float32 rounding of logits near 20 is ~2e-6).

CI draws RANDOM_CONFIGS_DEFAULT configs per family (the file stays under a minute); more with
`TRACER_RANDOM_CONFIGS=200 pytest -m live tests/test_random_configs_live.py` or `--random-configs 200`;
`TRACER_RANDOM_SEED` moves the draw.
"""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

import random_configs as rc
import test_parity_routes as routes

pytestmark = pytest.mark.live
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

RANDOM_CONFIGS_DEFAULT = 2
SEED = int(os.environ.get("TRACER_RANDOM_SEED", "16"))


def pytest_generate_tests(metafunc):
    if "draw_index" in metafunc.fixturenames:
        option = metafunc.config.getoption("random_configs", default=None)
        n = int(option or os.environ.get("TRACER_RANDOM_CONFIGS") or RANDOM_CONFIGS_DEFAULT)
        metafunc.parametrize("draw_index", range(n))


def check_one(family: str, index: int, folder) -> dict:
    """Draw, build, capture and compare one config; returns {step: error as a fraction of the tolerance}."""
    from tracer import load_model
    from tracer.capture import capture

    rng = np.random.default_rng([SEED, zlib.crc32(family.encode()), index])
    kwargs = rc.draw(family, rng)
    config = rc.build(family, kwargs, folder, seed=int(rng.integers(1 << 31)))
    inputs = rc.prompt(family, rng)
    ref = capture(folder, **inputs)
    ours = routes.run_like(load_model(folder), ref)
    errors = routes.compare(ref, ours, routes.ATOL32)
    spec = load_model(folder).spec
    must = [f"{p}blocks.{i}.attn.weights" for p, s in _stacks(spec) for i in range(s.n_layers)]
    must += [f"{p}blocks.{i}.resid_post" for p, s in _stacks(spec) for i in range(s.n_layers)]
    must += ["logits"] if spec.head != "none" else ["pooled"]
    missing = [n for n in must if n not in errors]
    assert not missing, f"{family} {kwargs}: the reference lacks {missing} (config {config.to_diff_dict()})"
    return errors


def _stacks(spec):
    return [("encoder.", spec.encoder), ("decoder.", spec)] if spec.encoder is not None else [("", spec)]


@pytest.mark.parametrize("family", rc.FAMILIES)
def test_random_config_matches_transformers(family, draw_index, tmp_path):
    check_one(family, draw_index, tmp_path)
