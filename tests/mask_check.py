"""What every mask-lab live test checks of attention weights against the lab's predicted outcome."""

from __future__ import annotations

import numpy as np


def check_pattern(result, w: np.ndarray) -> None:
    live = result.keep.any(-1)
    assert np.all(w[result.hard & live[..., None]] == 0.0)
    assert np.all(w[result.keep] > 0.0)
    for b, h, q in result.fully_masked():
        outcome = result.row_outcome(b, h, q)
        row = w[b, h, q]
        if outcome == "zeros":
            assert np.all(row == 0.0)
        elif outcome == "nan":
            assert np.isnan(row).all()
        elif outcome == "uniform":
            assert np.allclose(row, 1.0 / row.size, atol=1e-6)
