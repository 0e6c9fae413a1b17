"""The LITERAL grammar, dtype inference and file loading of the mask lab."""

from __future__ import annotations

import numpy as np
import pytest

from tracer.errors import TracerError
from tracer.masks.literal import load_mask, parse_literal


def test_nested_lists_with_every_scalar_form():
    src = parse_literal("[[0, 1, true, false], [T, F, 1, 0]]")
    assert src.values.tolist() == [[0, 1, 1, 0], [1, 0, 1, 0]]
    assert src.resolve(("bool",)).dtype == bool
    ints = parse_literal("[[2, -3], [+4, 0]]")
    assert ints.kind == "int" and ints.values.tolist() == [[2, -3], [4, 0]]


def test_float_words_and_min_follow_the_score_dtype():
    src = parse_literal("[0, -inf, inf, nan, min, 1.5e-3]", score_dtype="float16")
    v = src.values
    assert src.kind == "float"
    assert v[0] == 0 and np.isneginf(v[1]) and np.isposinf(v[2]) and np.isnan(v[3])
    assert v[4] == -65504.0  # finfo(float16).min
    assert v[5] == pytest.approx(1.5e-3)


def test_min_in_float32_is_finfo_min():
    assert parse_literal("[min]").values[0] == float(np.finfo(np.float32).min)


def test_suffix_fixes_the_dtype():
    src = parse_literal("[[1,0],[1,1]]@bool")
    assert src.array.dtype == bool
    assert src.array.tolist() == [[True, False], [True, True]]
    assert parse_literal("[1, 2]@int64").array.dtype == np.int64
    assert str(parse_literal("[0.5]@bfloat16").array.dtype) == "bfloat16"


def test_unsuffixed_literal_takes_the_conventions_natural_dtype():
    src = parse_literal("[[0,1],[1,1]]")
    assert src.resolve(("bool",)).dtype == bool
    src = parse_literal("[[0,1],[1,1]]")
    assert src.resolve(("int64",)).dtype == np.int64
    # values that do not fit bool fall through to the next preference
    src = parse_literal("[[0,2]]")
    assert src.resolve(("bool", "int64")).dtype == np.int64


def test_float_literal_never_reads_as_bool():
    src = parse_literal("[0.0, 1.0]")
    assert src.resolve(("bool", "float32")).dtype == np.float32


def test_overflow_on_cast_is_recorded():
    src = parse_literal("[0, -1e9]@float16")
    assert np.isneginf(src.array.astype(np.float64)[1])
    assert src.overflowed == [-1e9]


@pytest.mark.parametrize("text, fragment", [
    ("[[1,0],[1", "ends too early"),
    ("[[1,0],[1]]", "ragged"),
    ("[1,,2]", "unexpected"),
    ("[1 2]", "expected ','"),
    ("[yes]", "not a mask value"),
    ("[2]@bool", "bool literal"),
    ("[0.5]@int64", "fraction"),
    ("[1]@float8", "unknown dtype"),
    ("[inf]@int64", "cannot hold inf"),
    ("[true, 3]", "mixes true/false"),
])
def test_bad_literals_raise_tracer_error(text, fragment):
    with pytest.raises(TracerError) as exc:
        parse_literal(text)
    assert fragment in exc.value.message


def test_npy_and_npz_files(tmp_path):
    a = np.tril(np.ones((3, 3), dtype=bool))
    np.save(tmp_path / "m.npy", a)
    np.savez(tmp_path / "z.npz", causal=a, other=~a)
    assert np.array_equal(load_mask(str(tmp_path / "m.npy")).array, a)
    assert np.array_equal(load_mask(f"{tmp_path / 'z.npz'}:other").array, ~a)
    with pytest.raises(TracerError, match="holds 2 arrays"):
        load_mask(str(tmp_path / "z.npz"))
    with pytest.raises(TracerError, match="no array"):
        load_mask(f"{tmp_path / 'z.npz'}:nope")


def test_object_arrays_are_never_unpickled(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(TracerError, match="never unpickled"):
        load_mask(str(tmp_path / "obj.npy"))


def test_none_and_keywords():
    assert load_mask(None).is_none
    assert load_mask("none").is_none
    assert load_mask("causal", keywords=("causal",)).keyword == "causal"
    assert load_mask("sliding(3)", keywords=("sliding",)).keyword == "sliding(3)"


def test_mask_dtype_option_applies_to_literals_only(tmp_path):
    assert load_mask("[1, 0]", mask_dtype="uint8").array.dtype == np.uint8
    np.save(tmp_path / "m.npy", np.ones(2))
    with pytest.raises(TracerError, match="only applies to a LITERAL"):
        load_mask(str(tmp_path / "m.npy"), mask_dtype="bool")
    with pytest.raises(TracerError, match="says @bool"):
        load_mask("[1, 0]@bool", mask_dtype="uint8")
