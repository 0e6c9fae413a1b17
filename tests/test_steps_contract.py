"""Every recorded step is a documented name with the documented axes, in execution order."""

import numpy as np
import pytest

from conftest import FAMILIES, model_dir
from tracer import load_model
from tracer.steps import CATALOGUE, block_of, describe


@pytest.fixture(scope="module")
def traces():
    return {f: load_model(model_dir(f)).run(ids=[[3, 4, 5, 6]]) for f in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_recorded_steps_follow_the_catalogue(traces, family):
    t = traces[family]
    for s in t.steps:
        doc = describe(s.name)
        assert doc is not None, f"{family}: undocumented step {s.name}"
        assert s.axes == doc.axes, f"{family}: {s.name} axes {s.axes} != documented {doc.axes}"
        for axis, size in zip(s.axes, s.shape):
            expected = {"batch": 1, "pos": 4, "q_len": 4, "kv_len": 4}.get(axis)
            if expected is not None:
                assert size == expected, f"{s.name}: axis {axis} has size {size}"
        assert s.array is not None and s.array.shape == s.shape
    blocks = [block_of(n) for n in t.names() if block_of(n) is not None]
    assert blocks == sorted(blocks), "blocks must be recorded in execution order"


def test_every_documented_step_is_produced_by_some_family(traces):
    produced = {describe(s.name).template for t in traces.values() for s in t.steps}
    assert produced == {d.template for d in CATALOGUE}


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
