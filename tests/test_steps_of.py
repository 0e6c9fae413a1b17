"""arch.steps_of is the one description of a pass: the engine records exactly its steps, in its order."""

from __future__ import annotations

import pytest

from conftest import MODELS
from tracer import load_model
from tracer.arch.steps_of import pass_steps, pass_templates
from tracer.steps import describe

FIXTURES = sorted(p.name for p in MODELS.iterdir() if (p / "config.json").is_file())


@pytest.fixture(scope="module", params=FIXTURES)
def run(request):
    model = load_model(MODELS / request.param)
    return model, model.run(ids=[[5, 17, 42, 7]])


def test_the_engine_records_the_described_steps_in_order(run):
    model, trace = run
    assert [s.name for s in trace.steps] == [s.name for s in pass_steps(model.spec)]


def test_every_described_step_reads_only_earlier_steps_and_is_in_the_catalogue(run):
    model, _ = run
    seen: set[str] = set()
    for step in pass_steps(model.spec):
        assert describe(step.name) is not None, step.name
        assert set(step.inputs) <= seen, (step.name, set(step.inputs) - seen)
        seen.add(step.name)
    assert all(describe(t.replace("{i}", "0")) for t in pass_templates(model.spec))


def test_the_diff_reads_the_data_flow_of_the_traces_spec():
    """With a spec in the trace, the diff's inputs are the description's; a step the dump lacks is replaced
    by what it read (the name-only table knew no q/k norms: q_rot read q, not q_norm)."""
    from tracer.diff.profile import plan_of, step_inputs

    trace = load_model(MODELS / "qwen3").run(ids=[[5, 17, 42]])
    order, plan = trace.names(), plan_of(trace)
    assert step_inputs("blocks.0.attn.q_rot", order, plan=plan) == ["blocks.0.attn.q_norm"]
    assert step_inputs("blocks.0.attn.q_rot", order) == ["blocks.0.attn.q"]
    without = set(order) - {"blocks.0.attn.q_norm"}
    assert step_inputs("blocks.0.attn.q_rot", order, without, plan) == ["blocks.0.attn.q"]
    partial = set(order) - {"blocks.0.resid_mid"}  # a dump without resid_mid: the residual's own inputs
    assert step_inputs("blocks.0.ln2.out", order, partial, plan) == ["embed.out", "blocks.0.attn.out"]
    assert plan_of(type(trace)(trace.steps, {"model": {"spec": {"family": "x"}}})) is None


class _Config(dict):
    """config.json read as transformers' config object is (attributes, to_dict, num_hidden_layers), no torch."""

    def __getattr__(self, name):
        if name == "num_hidden_layers" and name not in self:
            return next(self[k] for k in ("n_layer", "num_layers", "encoder_layers") if k in self)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to_dict(self):
        return dict(self)


@pytest.mark.parametrize("name", FIXTURES)
def test_the_transformers_names_list_the_engines_steps_in_its_order(name):
    """Every step a capture records (names.hf through capture.step_order, the config's conditions applied) is
    a step the engine records, in the engine's order."""
    import json

    from tracer.capture.hf import step_order

    model = load_model(MODELS / name)
    config = _Config(json.loads((MODELS / name / "config.json").read_text()))
    captured = step_order(model.family, config, headless=model.spec.head == "none")
    planned = {s.name: i for i, s in enumerate(pass_steps(model.spec))}
    assert [n for n in captured if n not in planned] == []
    assert [planned[n] for n in captured] == sorted(planned[n] for n in captured)
