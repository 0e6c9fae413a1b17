"""Property suite: hostile safetensors headers and trace metadata never escape as anything but one error line."""

import json
import struct

import numpy as np
import pytest
from hypothesis import given, strategies as st

from fuzz_strategies import assert_cli_contract, bounded, json_scalars, json_values, only_tracer_errors
from hostile import cli
from tracer.checkpoint.safetensors_file import SafetensorsFile
from tracer.trace import Trace
from tracer.trace.trace import write_safetensors

pytestmark = pytest.mark.fuzz

dtypes = st.one_of(st.sampled_from(["F32", "F16", "BF16", "I64", "BOOL", "U8", "F64", "C64", "f32", ""]), json_values)
dims = st.one_of(st.integers(-3, 6), st.sampled_from([2**31, 2**48, 2**63, 2**64]), json_scalars)
entries = st.one_of(
    st.fixed_dictionaries({"dtype": dtypes, "shape": st.one_of(st.lists(dims, max_size=4), json_values),
                           "data_offsets": st.one_of(st.lists(dims, min_size=2, max_size=2), json_values)}),
    json_values,
)
headers = st.dictionaries(st.text(max_size=10), entries, max_size=4)


def _write(path, blob: bytes, data: bytes):
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def _read_all(path):
    f = SafetensorsFile(path)
    for name in f.keys():
        f.array(name)


@given(header=headers, data=st.binary(max_size=64))
def test_generated_headers(tmp_path_factory, header, data):
    path = tmp_path_factory.mktemp("h") / "t.safetensors"
    _write(path, json.dumps(header).encode(), data)
    with bounded():
        only_tracer_errors(_read_all, path)


def _valid_file() -> bytes:
    import io

    from tracer.trace.trace import safetensors_writer

    out = io.BytesIO()
    safetensors_writer({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, np.int64)}, {"k": "v"})(out)
    return out.getvalue()


@given(cuts=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), min_size=1, max_size=6),
       truncate=st.one_of(st.none(), st.integers(0, 400)))
def test_mutated_bytes_of_a_valid_file(tmp_path_factory, cuts, truncate):
    blob = bytearray(_valid_file())
    for pos, value in cuts:
        if pos < len(blob):
            blob[pos] = value
    if truncate is not None:
        blob = blob[:truncate]
    path = tmp_path_factory.mktemp("m") / "t.safetensors"
    path.write_bytes(bytes(blob))
    with bounded():
        only_tracer_errors(_read_all, path)


step_dicts = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["x", "logits", ""]), json_values),
     "axes": st.one_of(st.just(["a"]), json_values), "op": st.one_of(st.just(""), json_values),
     "shape": st.one_of(st.just([2]), st.lists(dims, max_size=3), json_values),
     "dtype": st.one_of(st.just("float32"), json_values), "stats": st.one_of(st.just({}), json_values)},
    optional={"hf_module": json_values, "kept": json_values},
)
metas = st.one_of(json_values, st.fixed_dictionaries({"steps": st.one_of(st.lists(step_dicts, max_size=3), json_values)},
                                                     optional={"model": json_values, "tokens": json_values,
                                                               "format_version": json_scalars}))


@given(meta=metas)
def test_generated_trace_metadata(tmp_path_factory, meta):
    path = tmp_path_factory.mktemp("t") / "t.safetensors"
    write_safetensors(path, {"x": np.ones(2, np.float32)}, {"tracer": json.dumps(meta)})
    with bounded():
        only_tracer_errors(Trace.load, path)


@given(meta=metas)
def test_generated_trace_metadata_through_diff(tmp_path_factory, meta):
    path = tmp_path_factory.mktemp("d") / "t.safetensors"
    write_safetensors(path, {"x": np.ones(2, np.float32)}, {"tracer": json.dumps(meta)})
    assert_cli_contract(cli("diff", path, path))
