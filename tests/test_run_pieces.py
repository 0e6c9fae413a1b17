"""How token pieces are made visible, and the logit lens math, checked against independent computations."""

from __future__ import annotations

import numpy as np
import pytest

import tracer
from conftest import model_dir
from tracer.report.lens import lens_logits, logit_lens, rank_of
from tracer.checkpoint.pieces import is_partial, shown_piece, split_utf8, visible_text


def hexof(text: str) -> str:
    return text.encode().hex(" ")


def test_whole_characters_are_shown_as_text_with_visible_spaces():
    assert shown_piece("Ġthe", hexof(" the"), special=False) == "␣the"
    assert shown_piece("æĺ¥", hexof("春"), special=False) == "春"
    assert not is_partial(hexof("春"), special=False)


def test_partial_utf8_is_shown_as_bytes():
    chun = "春".encode()  # e6 98 a5
    assert shown_piece("x", chun[:2].hex(" "), special=False) == "<e6 98>"
    assert shown_piece("x", (chun[2:] + "天".encode()).hex(" "), special=False) == "<a5>天"
    assert is_partial(chun[:2].hex(" "), special=False)
    assert split_utf8(chun[2:] + b"a" + chun) == [b"\xa5", "a", "春"]


def test_control_characters_are_escaped_and_specials_kept():
    assert visible_text("a\nb\tc\x00") == "a\\nb\\tc\\x00"
    assert visible_text("\u200b") == "\\u200b"
    assert shown_piece("<s>", hexof("<s>"), special=True) == "<s>"
    assert shown_piece("<pad>", "", special=True, pad=True) == "<pad>"


@pytest.fixture(scope="module")
def llama64():
    model = tracer.load_model(model_dir("llama"), dtype="float64")
    return model, model.run("春天来了")


def test_lens_of_the_last_block_is_the_model_output(llama64):
    model, trace = llama64
    pos = trace["probs"].shape[1] - 1
    layers = logit_lens(trace, model.weights, model.spec, row=0, position=pos)
    assert [layer.step for layer in layers] == ["embed.out", "blocks.0.resid_post", "blocks.1.resid_post"]
    np.testing.assert_allclose(layers[-1].probs, trace["probs"][0, pos], atol=1e-12)


def test_lens_of_the_embedding_is_rms_norm_then_unembed(llama64):
    model, trace = llama64
    x = trace["embed.out"][0, 2]  # [d_model]
    w, eps = model.weights["final_norm.w"], model.spec.norm_eps
    expected = (x / np.sqrt(np.mean(x * x) + eps) * w) @ model.weights["unembed.W_U"]  # written out by hand
    np.testing.assert_allclose(lens_logits(x, model.weights, model.spec), expected, rtol=1e-12)


def test_rank_counts_strictly_better_tokens():
    p = np.array([0.1, 0.4, 0.4, 0.1])
    assert rank_of(p, 1) == rank_of(p, 2) == 1 and rank_of(p, 0) == 3
