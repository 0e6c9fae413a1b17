"""Padded batches: each row equals its single-prompt run on real positions, whichever side is padded."""

import numpy as np
import pytest

from conftest import FAMILIES, model_dir
from tracer import load_model

ROWS = [[5, 17, 42, 3, 8, 9, 11], [7, 8, 2]]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_rows_equal_single_runs(name, side):
    model = load_model(model_dir(name))
    batch = model.run(ids=ROWS, pad_side=side)
    mask = batch["input.mask"]
    for b, row in enumerate(ROWS):
        single = model.run(ids=[row])
        real = np.nonzero(mask[b])[0]
        assert len(real) == len(row)
        np.testing.assert_array_equal(batch["input.positions"][b, real], np.arange(len(row)))
        for step in ("embed.out", "blocks.1.resid_post", "logits"):
            np.testing.assert_allclose(batch[step][b, real], single[step][0], atol=1e-5, rtol=0)
        w = batch["blocks.0.attn.weights"][b][:, real][:, :, real]  # [heads, q, k] on real tokens
        np.testing.assert_allclose(w, single["blocks.0.attn.weights"][0], atol=1e-6)
        pads = np.nonzero(mask[b] == 0)[0]
        assert np.all(batch["blocks.0.attn.weights"][b][:, :, pads] == 0), "no weight may reach a pad key"


def test_left_padded_pad_queries_are_fully_masked_and_flagged():
    model = load_model(model_dir("llama"))
    t = model.run(ids=ROWS, pad_side="left")
    w = t["blocks.0.attn.weights"]
    assert not np.isnan(w).any()
    np.testing.assert_array_equal(w[1, :, :4], 0.0)  # the 4 left pads of row 1 see nothing
    flagged = {(b, q) for b, _h, q in t.meta["mask"]["fully_masked"]["None"]}
    assert flagged == {(1, q) for q in range(4)}
