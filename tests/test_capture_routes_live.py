"""The transformers capture on the encoder and encoder-decoder routes, checked against transformers itself.

Rebuilds the route fixtures (bert, bert-mlm, roberta, t5, t5-gated, bart) into a
temporary folder and checks that the two views of one forward pass (module
hooks, transformers' outputs) agree, that every hf_names entry is a real module,
that padding behaves as transformers says per family, that `pooled` is what
sentence-transformers computes, and that bad input is refused.
(tests/test_parity_live.py checks that the committed fixtures are what the builder writes.)
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import ENCODERS, ROOT, SEQ2SEQ
from tracer.names import hf as hf_names
from tracer.errors import TracerError

pytestmark = pytest.mark.live
ROUTES = ENCODERS + SEQ2SEQ


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """{name: folder} of freshly built route fixtures (weights, tokenizer, references)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("build_fixtures", ROOT / "fixtures" / "build_fixtures.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    torch.set_num_threads(1)
    builder.quiet_transformers()
    out = tmp_path_factory.mktemp("route_fixtures")
    folders = {}
    for name in ROUTES:
        folders[name] = builder.build_model(name, out)
        builder.write_references(folders[name])
    return folders


def _prompts(folder: Path) -> dict:
    return json.loads((folder / "prompts.json").read_text())


def _inputs(folder: Path, key: str = "reference") -> dict:
    """capture() keyword arguments for the reference prompt or a batch of prompts.json."""
    prompts = _prompts(folder)
    entry = prompts[key]
    if key == "reference":
        kwargs = dict(ids=[entry["ids"]])
        if "token_type_ids" in entry:
            kwargs["token_type_ids"] = [entry["token_type_ids"]]
    else:
        kwargs = dict(ids=entry["ids"], attention_mask=entry["attention_mask"])
        if "token_type_ids" in entry:
            kwargs["token_type_ids"] = entry["token_type_ids"]
    if "decoder" in prompts:
        kwargs["decoder_ids"] = [prompts["decoder"]["ids"]] * len(kwargs["ids"])
    return kwargs


def _forward(folder: Path, key: str = "reference"):
    """(model, family, step arrays from hooks, step arrays from transformers' outputs) of one float32 forward."""
    import torch

    from tracer.capture import hf_routes
    from tracer.capture.hf import load_model, run_forward

    model, family = load_model(folder, "float32")
    kwargs = _inputs(folder, key)
    ids = np.asarray(kwargs["ids"], dtype=np.int64)
    mask = np.asarray(kwargs.get("attention_mask", np.ones_like(ids)), dtype=np.int64)
    inputs, _ = hf_routes.route_inputs(
        family, model.config, ids, mask, None, kwargs.get("token_type_ids"), kwargs.get("decoder_ids"), None
    )
    with torch.inference_mode():
        hooks, outputs = run_forward(model, family, ids, mask, None, inputs=inputs)
    return model, family, {k: v[0] for k, v in hooks.items()}, {k: v[0] for k, v in outputs.items()}


# ---------- the two views of one forward pass agree ----------


@pytest.mark.parametrize("key", ["reference", "batch"])
@pytest.mark.parametrize("name", ROUTES)
def test_hidden_states_and_attentions_equal_hooks(built, name, key):
    model, family, hooks, outputs = _forward(built[name], key)
    both = set(hooks) & set(outputs)
    stacks = ("",) if family in hf_names.ENCODER_ONLY else ("encoder.", "decoder.")
    expected = {"logits"} if name != "bert" else set()
    for stack in stacks:
        expected |= {f"{stack}embed.out"} | {f"{stack}blocks.{i}.attn.weights" for i in range(_layers(model, stack))}
        expected |= {f"{stack}final_norm.out"} if family == "t5" else set()
    expected |= {f"decoder.blocks.{i}.cross_attn.weights" for i in range(_layers(model, "decoder."))} if family in SEQ2SEQ_FAMILIES else set()
    assert expected <= both, sorted(expected - both)
    for step in sorted(both):
        np.testing.assert_array_equal(hooks[step], outputs[step], err_msg=step)


SEQ2SEQ_FAMILIES = ("t5", "bart")


def _layers(model, stack: str) -> int:
    from tracer.capture import hf_routes

    return hf_routes.n_layers(model.config, stack)


@pytest.mark.parametrize("name", ROUTES)
def test_hf_names_point_at_real_modules_and_traces_name_them(built, name):
    from tracer.capture import capture, hf_routes
    from tracer.capture.hf import load_model, step_order

    model, family = load_model(built[name], "float32")
    headless = hf_routes.is_headless(model, family)
    assert headless == (name == "bert")
    modules = dict(model.named_modules())
    order = step_order(family, model.config, headless)
    for step in order:
        if step not in ("probs", "pooled"):
            path, take = hf_names.hf_source(family, step, headless)
            assert path in modules, (step, path)
            assert hf_names.step_for_module(family, path, take) is not None, (step, path, take)
    trace = capture(built[name], **_inputs(built[name]))
    for step in trace.steps:
        assert step.hf_module == hf_names.hf_module(family, step.name, headless), step.name
        assert step.axes == hf_routes.step_axes(step.name)
    assert [s.name for s in trace.steps if not s.name.startswith("input.")] == [n for n in order if n in trace]
    assert trace.names()[-1] == ("pooled" if headless else "probs")


def test_mlp_up_only_in_gated_t5(built):
    from tracer.capture import capture

    for name, gated in (("t5", False), ("t5-gated", True)):
        names = capture(built[name], **_inputs(built[name])).names()
        assert ("encoder.blocks.0.mlp.up" in names) == gated and ("decoder.blocks.0.mlp.up" in names) == gated


# ---------- padding and positions, family by family ----------


@pytest.mark.parametrize("key", ["batch", "batch_left"])
@pytest.mark.parametrize("name", ENCODERS)
def test_encoder_batches_against_single_prompts(built, name, key):
    """Right padding never changes real rows; left padding does for bert (positions stay 0..n-1), not roberta."""
    from tracer.capture import capture

    folder = built[name]
    batch_inputs = _inputs(folder, key)
    batch = capture(folder, **batch_inputs)
    out = "pooled" if name == "bert" else "logits"
    mask = np.asarray(batch_inputs["attention_mask"])
    for row, ids in enumerate(batch_inputs["ids"]):
        real = mask[row].astype(bool)
        types = [list(np.asarray(batch_inputs["token_type_ids"][row])[real])] if "token_type_ids" in batch_inputs else None
        single = capture(folder, [list(np.asarray(ids)[real])], token_type_ids=types)
        got, want = (batch[out][row], single[out][0]) if out == "pooled" else (batch[out][row][real], single[out][0])
        shifted = key == "batch_left" and name.startswith("bert") and not real.all()
        if shifted:
            assert np.abs(got - want).max() > 1e-3  # transformers' BERT: left padding shifts learned positions
        else:
            np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("name", SEQ2SEQ)
def test_seq2seq_padded_encoder_rows_match_single_prompts(built, name):
    from tracer.capture import capture

    folder = built[name]
    kwargs = _inputs(folder, "batch")
    batch = capture(folder, **kwargs)
    mask = np.asarray(kwargs["attention_mask"])
    assert mask.min() == 0
    for row, ids in enumerate(kwargs["ids"]):
        n = int(mask[row].sum())
        single = capture(folder, [ids[:n]], decoder_ids=[kwargs["decoder_ids"][row]])
        np.testing.assert_allclose(batch["logits"][row], single["logits"][0], atol=1e-5)
        np.testing.assert_allclose(batch["encoder.blocks.1.resid_post"][row, :n], single["encoder.blocks.1.resid_post"][0], atol=1e-5)


def test_default_decoder_input_is_the_start_token(built):
    from tracer.capture import capture

    for name in SEQ2SEQ:
        config = json.loads((built[name] / "config.json").read_text())
        trace = capture(built[name], [[5, 6, 7], [8, 9, 10]])
        assert trace["input.decoder_ids"].tolist() == [[config["decoder_start_token_id"]]] * 2
        assert trace["logits"].shape[:2] == (2, 1)


# ---------- pooled against sentence-transformers ----------


def test_pooled_equals_sentence_transformers(built):
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    from tracer.capture import capture

    folder = built["bert"]
    texts = [_prompts(folder)["reference"]["text"], "你好, world!", "the cat sleeps."]
    st = SentenceTransformer(str(folder), device="cpu")
    expected = st.encode(texts, convert_to_numpy=True)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    for text, want in zip(texts, expected):
        encoded = tokenizer(text)
        got = capture(folder, [encoded["input_ids"]], token_type_ids=[encoded["token_type_ids"]])["pooled"][0]
        cosine = float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
        assert cosine >= 0.999999 and np.abs(got - want).max() < 1e-5, text
        assert abs(np.linalg.norm(got) - 1) < 1e-6


# ---------- float64 ----------


@pytest.mark.parametrize("name", ["t5", "bart", "roberta"])
def test_float64_capture_is_close_to_float32(built, name):
    from tracer.capture import capture

    folder = built[name]
    t32, t64 = capture(folder, **_inputs(folder)), capture(folder, dtype="float64", **_inputs(folder))
    assert t64["logits"].dtype == np.float64
    np.testing.assert_allclose(t32["logits"], t64["logits"], atol=1e-4)
    assert not np.array_equal(t32["logits"].astype(np.float64), t64["logits"])
    if name == "t5":  # the buckets are integers: the widened bucket formula picks the same table rows
        np.testing.assert_array_equal(
            t64["encoder.blocks.0.attn.position_bias"], t32["encoder.blocks.0.attn.position_bias"].astype(np.float64)
        )


def test_t5_rms_norm_is_widened_only_when_asked(built):
    from tracer.capture import capture

    folder = built["t5"]
    for widen in (True, False):
        trace = capture(folder, dtype="float64", widen_float32=widen, **_inputs(folder))
        x, out = trace["encoder.embed.out"], trace["encoder.blocks.0.ln1.out"]
        weight = (out / (x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)))[0, 0]
        expected = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * weight
        error = np.abs(out - expected).max()
        assert (error < 1e-13) if widen else (error > 1e-10), (widen, error)


# ---------- errors ----------


def test_route_capture_rejects_inputs_of_another_route(built):
    from tracer.capture import capture

    with pytest.raises(TracerError, match="token types"):
        capture(built["t5"], [[5, 6]], token_type_ids=[[0, 0]])
    with pytest.raises(TracerError, match="positions"):
        capture(built["bart"], [[5, 6]], position_ids=[[0, 1]])
    with pytest.raises(TracerError, match="token types must lie"):
        capture(built["bert"], [[2, 5, 3]], token_type_ids=[[0, 2, 0]])
    with pytest.raises(TracerError, match="decoder_ids has 1 rows"):
        capture(built["bart"], [[5, 6], [7, 8]], decoder_ids=[[2]])
    with pytest.raises(TracerError, match="decoder ids must lie"):
        capture(built["t5"], [[5, 6]], decoder_ids=[[0, 10_000]])
    with pytest.raises(TracerError, match="shape"):
        capture(built["roberta"], [[0, 5, 2]], token_type_ids=[[0, 0]])


# ---------- the command line ----------


def test_capture_cli_takes_decoder_ids_and_token_types(built, tmp_path):
    from typer.testing import CliRunner

    from tracer.cli.main import app
    from tracer.trace import Trace

    out = tmp_path / "t5.safetensors"
    result = CliRunner().invoke(app, ["capture", str(built["t5"]), "the cat", "--decoder-ids", "0,5,7", "-o", str(out)])
    assert result.exit_code == 0, result.output
    trace = Trace.load(out)
    assert trace["input.decoder_ids"].tolist() == [[0, 5, 7]] and "input.positions" not in trace
    out = tmp_path / "bert.safetensors"
    args = ["capture", str(built["bert"]), "the cat", "the", "--pad-side", "left", "-o", str(out)]  # [CLS] the cat [SEP]
    result = CliRunner().invoke(app, args + ["--token-types", "0,0,1,1", "--token-types", "0,1,1"])
    assert result.exit_code == 0, result.output
    trace = Trace.load(out)
    mask = trace["input.mask"]
    assert mask.tolist() == [[1, 1, 1, 1], [0, 1, 1, 1]]
    assert trace["input.token_types"].tolist() == [[0, 0, 1, 1], [0, 0, 1, 1]]  # the pad gets type 0
    assert (trace["input.positions"] == np.arange(4)).all()  # bert: 0..n-1 even left-padded
    result = CliRunner().invoke(app, args + ["--token-types", "0,0,1"])
    assert result.exit_code == 2 and "error: --token-types" in result.output
