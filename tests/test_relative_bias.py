"""T5's relative position buckets, checked against the rule itself (the live parity test checks transformers)."""

import math

import numpy as np
import pytest

from tracer.arch.spec import RelativeBiasSpec
from tracer.engine.relative_bias import position_bias, relative_buckets, relative_positions


def reference_bucket(rel: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """The Mesh TensorFlow rule written out for one distance, in float32 like transformers."""
    base = 0
    if bidirectional:
        num_buckets //= 2
        base = num_buckets if rel > 0 else 0
        n = abs(rel)
    else:
        n = max(-rel, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return base + n
    scaled = np.float32(math.log(np.float32(n) / max_exact)) / np.float32(math.log(max_distance / max_exact)) * (num_buckets - max_exact)
    return base + min(max_exact + int(scaled), num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 16), (6, 10)])
def test_buckets_follow_the_rule(bidirectional, num_buckets, max_distance):
    rel = relative_positions(40, 60, past=5)
    got = relative_buckets(rel, bidirectional, num_buckets, max_distance)
    want = np.vectorize(lambda r: reference_bucket(int(r), bidirectional, num_buckets, max_distance))(rel)
    assert np.array_equal(got, want)
    assert got.min() >= 0 and got.max() < num_buckets


def test_near_distances_are_exact_and_far_ones_share_a_bucket():
    rel = np.arange(-200, 201)
    b = relative_buckets(rel, True, 32, 128)
    assert [int(b[200 - k]) for k in range(8)] == list(range(8)), "earlier keys at distances 0..7 each have a bucket"
    assert [int(b[200 + k]) for k in range(1, 8)] == list(range(17, 24)), "later keys: the upper half, also exact"
    assert b[200 + 127] == b[200 + 200] == 31 and b[200 - 200] == 15, "past max_distance distances share the last bucket"
    assert b[200 - 5] == 5 and b[200 + 5] == 16 + 5, "the encoder tells earlier from later keys"
    causal = relative_buckets(rel, False, 32, 128)
    assert np.all(causal[rel > 0] == 0), "the decoder folds later keys (masked anyway) onto distance 0"
    assert np.all(np.diff(causal[rel <= 0][::-1]) >= 0), "buckets never shrink with distance"


def test_position_bias_reads_the_table_per_head():
    table = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)  # [num_buckets, heads]
    bias = position_bias(table, RelativeBiasSpec(8, 16), True, 4, 4)
    assert bias.shape == (1, 3, 4, 4)
    b = relative_buckets(relative_positions(4, 4), True, 8, 16)
    assert np.array_equal(bias[0, 2], table[b, 2])
    assert np.array_equal(bias[0, :, 0, 0], table[0]), "distance 0 is bucket 0 for every head"
