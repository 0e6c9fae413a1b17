"""Every recorded step is a documented name with the documented axes, in execution order."""

import numpy as np
import pytest

import conftest
from conftest import FAMILIES, OPT_VARIANTS, model_dir
from tracer import load_model
from tracer.steps import CATALOGUE, block_of, describe

ROUTE_FIXTURES = tuple(getattr(conftest, "ENCODERS", ())) + tuple(getattr(conftest, "SEQ2SEQ", ()))


def _run(name: str):
    m = load_model(model_dir(name))
    if m.spec.head == "mlm":
        return m.run(ids=[[3, 4, 5, 6]], token_types=[[0, 0, 1, 1]] if m.spec.token_types > 1 else None)
    return m.run(ids=[[3, 4, 5, 6]])


@pytest.fixture(scope="module")
def traces():
    return {f: _run(f) for f in FAMILIES + OPT_VARIANTS + ROUTE_FIXTURES}  # opt-350m: project_in/out


@pytest.mark.parametrize("family", FAMILIES + ROUTE_FIXTURES)
def test_recorded_steps_follow_the_catalogue(traces, family):
    t = traces[family]
    for s in t.steps:
        doc = describe(s.name)
        assert doc is not None, f"{family}: undocumented step {s.name}"
        assert s.axes == doc.axes, f"{family}: {s.name} axes {s.axes} != documented {doc.axes}"
        for axis, size in zip(s.axes, s.shape):
            encoder_side = t.meta["model"].get("route") != "encoder-decoder" or s.name.startswith(("encoder.", "input.ids", "input.mask"))
            expected = {"batch": 1, "pos": 4, "q_len": 4, "kv_len": 4}.get(axis) if encoder_side else None
            if expected is not None:
                assert size == expected, f"{s.name}: axis {axis} has size {size}"
        assert s.array is not None and s.array.shape == s.shape
    for stack in ("", "encoder.", "decoder."):  # each stack's blocks in order (the encoder's before the decoder's)
        blocks = [block_of(n) for n in t.names() if block_of(n) is not None and n.startswith(stack) and
                  (stack or not n.startswith(("encoder.", "decoder.")))]
        assert blocks == sorted(blocks), f"{stack or 'the'} blocks must be recorded in execution order"
    names = t.names()
    if any(n.startswith("decoder.") for n in names):
        assert max(i for i, n in enumerate(names) if n.startswith("encoder.")) < min(
            i for i, n in enumerate(names) if n.startswith("decoder.")), "the encoder runs before the decoder"


def test_every_documented_step_is_produced_by_some_family(traces):
    """Every catalogue name of a route that has a fixture is recorded by some fixture of that route."""
    produced = {describe(s.name).template for t in traces.values() for s in t.steps}
    routes = {t.meta["model"].get("route", "decoder") for t in traces.values()}
    assert produced == {d.template for d in CATALOGUE if set(d.routes) & routes}


def test_group_query_shapes(traces):
    t = traces["llama"]
    spec = load_model(model_dir("llama")).spec
    assert spec.n_kv_heads < spec.n_heads
    assert t["blocks.0.attn.k"].shape[1] == spec.n_kv_heads
    assert t["blocks.0.attn.q"].shape[1] == spec.n_heads
    assert t["blocks.0.attn.scores"].shape[1] == spec.n_heads
    w = t["blocks.0.attn.weights"]
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
    assert np.all(np.triu(w[0, 0], 1) == 0), "causal: no weight on future keys"
