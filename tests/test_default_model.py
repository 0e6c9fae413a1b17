"""The shipped default model, through tracer's own NumPy engine and CLI."""

import json

import numpy as np
from typer.testing import CliRunner

from tracer import load_model
from tracer.cli.main import app
from tracer.cli.default_model import default_model_path


def _top(trace, k=1):
    p = trace["probs"][0, -1]
    order = np.argsort(-p)[:k]
    return [(int(i), float(p[i])) for i in order]


def test_chuntian_lai_predicts_le_confidently():
    model = load_model(default_model_path())
    trace = model.run("春天来")
    (tid, prob), = _top(trace)
    assert model.tokenizer.decode([tid]) == "了"
    assert prob > 0.9
    assert [t["text"] for t in trace.meta["tokens"][0]] == ["", "春", "天", "来"]


def test_other_corpus_prompts_continue_sensibly():
    model = load_model(default_model_path())
    expected = {"今天下": {"雨", "雪"}, "In spring the": {" flowers"}, "The sun is": {" shining"}}
    for prompt, allowed in expected.items():
        (tid, _), = _top(model.run(prompt))
        assert model.tokenizer.decode([tid]) in allowed, prompt


def test_cli_default_model_json_top_token():
    result = CliRunner().invoke(app, ["run", "春天来", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    first = data["top_k"][0]
    assert first["token"] == "了" and first["rank"] == 1
    assert first["prob"] > 0.9
