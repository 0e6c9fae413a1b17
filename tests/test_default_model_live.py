"""The default model checkpoint itself, run by transformers (eager, float32).

Proves the trained weights do what `tracer run "春天来"` promises (the next token is 了), that
other prompts continue with something the corpus itself continues them with, and that the
training script rebuilds the committed model: the tokenizer and config byte for byte, the weights
to the same behaviour. Training is seeded and single-threaded, but a minute of float32 updates
amplifies the rounding differences between processors' kernels (rebuilt on an AMD EPYC, weights
differ by up to 0.42 while the corpus loss moves by 1e-4 nats), so the weights are compared by
what they do.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.live
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

MODEL = ROOT / "fixtures" / "default-model"
CORPUS = ROOT / "fixtures" / "corpus" / "seasons.txt"
SCRIPT = ROOT / "fixtures" / "train_default_model.py"


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(MODEL)


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        MODEL, attn_implementation="eager", dtype=torch.float32)
    return loaded.eval()


def next_token_probs(model, tokenizer, prompt: str):
    ids = tokenizer(prompt, return_tensors="pt").input_ids                    # [1, pos]
    assert ids[0, 0].item() == tokenizer.bos_token_id
    with torch.no_grad():
        return model(input_ids=ids).logits[0, -1].softmax(-1)                 # [vocab]


def test_spring_comes_then_le(model, tokenizer):
    probs = next_token_probs(model, tokenizer, "春天来")
    le = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("了"))
    assert len(le) == 1
    assert int(probs.argmax()) == le[0]
    assert probs[le[0]].item() >= 0.6


def corpus_followers(tokenizer, prompt: str) -> set[int]:
    """Token ids that follow `prompt` at the start of some corpus line."""
    prompt_ids = tokenizer(prompt).input_ids
    followers = set()
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        ids = tokenizer(line).input_ids
        if ids[: len(prompt_ids)] == prompt_ids and len(ids) > len(prompt_ids):
            followers.add(ids[len(prompt_ids)])
    return followers


@pytest.mark.parametrize("prompt", ["夏天", "今天下", "冬天", "The sun is", "In spring the"])
def test_other_prompts_continue_as_the_corpus_does(model, tokenizer, prompt):
    followers = corpus_followers(tokenizer, prompt)
    assert followers, f"no corpus line starts with {prompt!r}"
    probs = next_token_probs(model, tokenizer, prompt)
    top = int(probs.argmax())
    assert top in followers, f"{prompt!r} -> {tokenizer.decode([top])!r}"
    assert sum(probs[i].item() for i in followers) > 0.9  # the mass stays on attested continuations


def sha256_of(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def final_loss(folder) -> float:
    text = (folder / "README.md").read_text(encoding="utf-8")
    return float(re.search(r"Final loss over the whole corpus \(eval mode\): ([0-9.]+) nats", text).group(1))


def test_training_script_rebuilds_the_committed_files(tmp_path, tokenizer):
    out = tmp_path / "default-model"
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], check=True, capture_output=True)
    fresh, committed = sha256_of(out), sha256_of(MODEL)
    assert fresh.keys() == committed.keys()
    weights = ("model.safetensors", "README.md")  # README.md reports the measured loss and continuations
    assert {k: v for k, v in fresh.items() if k not in weights} == {k: v for k, v in committed.items() if k not in weights}
    assert abs(final_loss(out) - final_loss(MODEL)) < 0.01
    rebuilt = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager", dtype=torch.float32).eval()
    le = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("了"))[0]
    assert int(next_token_probs(rebuilt, tokenizer, "春天来").argmax()) == le
