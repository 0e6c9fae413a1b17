"""Live: a real TransformerLens cache, saved with safetensors, matches tracer through `--names tl`."""

import json

import pytest
from typer.testing import CliRunner

from conftest import model_dir
from tracer.cli.main import app

pytestmark = pytest.mark.live
torch = pytest.importorskip("torch")
pytest.importorskip("transformer_lens")

IDS = [[5, 17, 42, 8, 3]]


def tl_cache(folder, out):
    from safetensors.torch import save_file
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoTokenizer

    bridge = TransformerBridge.boot_transformers(str(folder), tokenizer=AutoTokenizer.from_pretrained(folder), device="cpu")
    bridge.enable_compatibility_mode(no_processing=True, disable_warnings=True)  # no weight folding: same activations
    with torch.no_grad():
        _, cache = bridge.run_with_cache(torch.tensor(IDS))
    save_file({k: v.detach().clone().contiguous() for k, v in cache.items()}, str(out))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_transformer_lens_cache_matches_tracer(tmp_path, family):
    runner = CliRunner()
    ref = tmp_path / "ref.safetensors"
    assert runner.invoke(app, ["run", "--model", str(model_dir(family)), "--ids", ",".join(map(str, IDS[0])),
                               "--save", str(ref), "--json"]).exit_code == 0
    tl_cache(model_dir(family), tmp_path / "tl.safetensors")
    r = runner.invoke(app, ["diff", str(ref), str(tmp_path / "tl.safetensors"), "--names", "tl", "--json"])
    data = json.loads(r.output)
    assert r.exit_code == 0, data["first_divergence"]
    compared = {s["name"] for s in data["steps"] if s["status"] == "pass"}
    for step in ("embed.out", "blocks.0.ln1.out", "blocks.0.attn.q", "blocks.0.attn.weights", "blocks.1.mlp.out",
                 "blocks.1.resid_post", "final_norm.out", "logits"):
        assert step in compared, step
