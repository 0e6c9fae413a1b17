"""Live: transformers itself, captured and hooked, diffed against tracer on every fixture family."""

import json

import numpy as np
import pytest
from conftest import FAMILIES, model_dir
from typer.testing import CliRunner

from tracer.cli.main import app

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.live

runner = CliRunner()
PROMPT = "Hello, world! 你好"


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("family", FAMILIES)
def test_capture_from_transformers_agrees_with_tracer(tmp_path, family):
    out = tmp_path / "hf.safetensors"
    captured = runner.invoke(app, ["capture", str(model_dir(family)), PROMPT, "-o", str(out)])
    assert captured.exit_code == 0, captured.output
    result = runner.invoke(app, ["diff", str(out), str(model_dir(family)), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["first_divergence"] is None
    compared = {s["name"] for s in report["steps"] if s["status"] == "pass"}
    assert {"embed.out", "blocks.0.attn.weights", "blocks.1.mlp.out", "final_norm.out", "logits"} <= compared
    logits = next(s for s in report["steps"] if s["name"] == "logits")
    assert logits["metrics"]["max_abs"] < 1e-4
    assert logits["distribution"]["top1_agreement"] == 1.0


def test_capture_sees_a_perturbed_copy_diverge_at_its_mlp(tmp_path):
    from fixture_tools import perturbed_copy

    mine = perturbed_copy(model_dir("llama"), tmp_path / "mine", "model.layers.1.mlp.down_proj.weight")
    out = tmp_path / "hf.safetensors"
    assert runner.invoke(app, ["capture", str(mine), PROMPT, "-o", str(out)]).exit_code == 0
    result = runner.invoke(app, ["diff", str(model_dir("llama")), str(out), "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["first_divergence"]["step"] == "blocks.1.mlp.out"


def hooked_dump(folder, ids):
    """What a porter writes: forward hooks on every transformers module, keyed by module path (outputs only)."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    dump, handles = {}, []
    for name, module in model.named_modules():
        if not name:
            continue

        def hook(module, args, output, name=name):
            value = output[0] if isinstance(output, tuple) else output
            if torch.is_tensor(value) and value.is_floating_point():
                dump[name] = value.detach().numpy().copy()

        handles.append(module.register_forward_hook(hook))
    with torch.inference_mode():
        model(input_ids=torch.tensor(ids))
    for h in handles:
        h.remove()
    return dump


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_hooked_transformers_dump_matches_through_the_hf_map(tmp_path, family):
    from safetensors.numpy import save_file

    import tracer

    ref = tracer.load_model(model_dir(family)).run(PROMPT)
    ref.save(tmp_path / "ref.safetensors")
    dump = hooked_dump(model_dir(family), ref["input.ids"].tolist())
    save_file({k: np.ascontiguousarray(v) for k, v in dump.items()}, str(tmp_path / "port.safetensors"))
    result = runner.invoke(app, ["diff", str(tmp_path / "ref.safetensors"), str(tmp_path / "port.safetensors"),
                                 "--names", "hf", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    compared = {s["name"] for s in report["steps"] if s["status"] == "pass"}
    assert {"blocks.0.attn.q", "blocks.0.attn.k", "blocks.1.ln2.out", "blocks.1.resid_post", "logits"} <= compared


def test_the_porting_recipe_in_the_docs_writes_a_trace_tracer_diff_accepts(tmp_path, monkeypatch):
    """Runs the code block of docs/porting.md as written, on the llama fixture loaded in transformers."""
    import re
    from pathlib import Path

    import transformers

    doc = (Path(__file__).resolve().parents[1] / "docs" / "porting.md").read_text()
    recipe = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir("llama"), attn_implementation="eager",
                                                              dtype=torch.float32)
    monkeypatch.chdir(tmp_path)
    exec(compile(recipe, "porting.md", "exec"), {"model": model.eval()})
    result = runner.invoke(app, ["diff", str(model_dir("llama")), "mine.safetensors", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    passed = {s["name"] for s in report["steps"] if s["status"] == "pass"}
    assert {"input.ids", "blocks.0.attn.q", "blocks.1.attn.k", "blocks.1.resid_post", "logits"} <= passed
