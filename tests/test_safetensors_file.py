"""The strict safetensors reader: exact bf16 widening, memory mapping, and clear errors for lying files."""

import json
import struct

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from tracer.checkpoint.safetensors_file import SafetensorsFile
from tracer.errors import TracerError


def _write_raw(path, header: dict, data: bytes) -> None:
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def test_reads_what_the_official_writer_wrote(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {"a": rng.standard_normal((3, 4)).astype(np.float32), "b": np.arange(6, dtype=np.int64).reshape(2, 3),
               "c": rng.standard_normal(5).astype(np.float16)}
    save_file(tensors, tmp_path / "x.safetensors", metadata={"k": "v"})
    f = SafetensorsFile(tmp_path / "x.safetensors")
    assert f.metadata == {"k": "v"}
    np.testing.assert_array_equal(f.array("a"), tensors["a"])
    np.testing.assert_array_equal(f.array("b"), tensors["b"])
    assert f.array("c").dtype == np.float32
    np.testing.assert_array_equal(f.array("c"), tensors["c"].astype(np.float32))
    assert isinstance(f.raw("a").base, np.memmap) or isinstance(f.raw("a"), np.memmap)


def test_bf16_is_widened_bit_exactly(tmp_path):
    rng = np.random.default_rng(1)
    values = rng.standard_normal(1000).astype(np.float32) * 10.0 ** rng.integers(-20, 20, 1000)
    bf = values.astype(ml_dtypes.bfloat16)
    _write_raw(tmp_path / "b.safetensors", {"w": {"dtype": "BF16", "shape": [1000], "data_offsets": [0, 2000]}}, bf.tobytes())
    got = SafetensorsFile(tmp_path / "b.safetensors").array("w")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), bf.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize(
    "header,data,message",
    [
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "truncated"),
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}, b"\0" * 16, "needs 16 bytes"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "v": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
         b"\0" * 12, "overlap"),
        ({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, b"\0" * 2, "does not read"),
        ({"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8, "bad entry"),
    ],
)
def test_lying_headers_are_clear_errors(tmp_path, header, data, message):
    _write_raw(tmp_path / "x.safetensors", header, data)
    with pytest.raises(TracerError, match=message):
        SafetensorsFile(tmp_path / "x.safetensors")


def test_header_length_larger_than_file(tmp_path):
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", 10_000) + b"{}")
    with pytest.raises(TracerError, match="claims 10000 header bytes"):
        SafetensorsFile(tmp_path / "x.safetensors")


def test_garbage_and_tiny_files(tmp_path):
    (tmp_path / "short").write_bytes(b"abc")
    with pytest.raises(TracerError, match="not a safetensors file"):
        SafetensorsFile(tmp_path / "short")
    (tmp_path / "junk").write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{[")
    with pytest.raises(TracerError, match="not valid JSON"):
        SafetensorsFile(tmp_path / "junk")
