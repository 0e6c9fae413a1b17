"""Spec.from_dict inverts Spec.to_dict for every fixture, also after the JSON round trip a trace file makes."""

from __future__ import annotations

import json

import pytest

from conftest import MODELS
from tracer import load_model
from tracer.arch.spec import MoeSpec, RopeSpec, Spec

FIXTURES = sorted(p.name for p in MODELS.iterdir() if (p / "config.json").is_file())


@pytest.mark.parametrize("name", FIXTURES)
def test_from_dict_inverts_to_dict(name):
    spec = load_model(MODELS / name).spec
    assert Spec.from_dict(spec.to_dict()) == spec
    assert Spec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec  # lists back to tuples


def test_nested_specs_come_back_as_dataclasses():
    spec = load_model(MODELS / "gemma3_text").spec
    back = Spec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert isinstance(back.rope, RopeSpec) and isinstance(back.rope_local, RopeSpec)
    moe = Spec.from_dict(json.loads(json.dumps(load_model(MODELS / "qwen2_moe").spec.to_dict()))).moe
    assert isinstance(moe, MoeSpec) and isinstance(moe.layers, tuple) and moe.on(0) in (True, False)
    seq2seq = Spec.from_dict(json.loads(json.dumps(load_model(MODELS / "t5").spec.to_dict())))
    assert isinstance(seq2seq.encoder, Spec) and seq2seq.encoder.relative_bias is not None


def test_fields_a_newer_version_added_are_ignored():
    d = load_model(MODELS / "llama").spec.to_dict()
    d["a_future_field"] = 1
    d["rope"]["a_future_rope_field"] = 2
    assert Spec.from_dict(d) == load_model(MODELS / "llama").spec


def test_cost_of_a_moe_trace_counts_from_its_metadata_alone():
    """report/cost.py rebuilt the Spec with moe as a dict, so counting a MoE run without the model failed."""
    from tracer.report import RunOptions, build_report
    from tracer.report.cost import measured_cost

    m = load_model(MODELS / "qwen2_moe")
    ticks = iter(range(10_000))
    trace = m.run(ids=[[5, 17, 42]], clock=lambda: float(next(ticks)))  # timed: the times are not saved
    cost = build_report(trace, RunOptions(sections=("cost",)))["cost"]
    assert cost["total_flops"] == measured_cost(trace, m.spec)["total_flops"] > 0
    assert any(r["step"] == "blocks.{i}.mlp.router.logits" and r["flops"] for r in cost["rows"])
