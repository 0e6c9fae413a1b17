"""float16 and bfloat16 checkpoints are widened exactly: they run identically to float32 files holding the same values."""

import json
import shutil
import struct

import ml_dtypes
import numpy as np
import pytest

from conftest import model_dir
from tracer import load_model
from tracer.checkpoint.safetensors_file import SafetensorsFile

CODES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(ml_dtypes.bfloat16): "BF16"}


def _write(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        header[name] = {"dtype": CODES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


@pytest.mark.parametrize("low", [np.float16, ml_dtypes.bfloat16])
def test_low_precision_weights_equal_their_float32_widening(tmp_path, low):
    src = SafetensorsFile(model_dir("llama") / "model.safetensors")
    rounded = {k: src.array(k).astype(low) for k in src.keys()}
    for name, tensors in (("low", rounded), ("wide", {k: v.astype(np.float32) for k, v in rounded.items()})):
        shutil.copytree(model_dir("llama"), tmp_path / name)
        _write(tmp_path / name / "model.safetensors", tensors)
    a = load_model(tmp_path / "low").run(ids=[[5, 17, 42, 8]])
    b = load_model(tmp_path / "wide").run(ids=[[5, 17, 42, 8]])
    np.testing.assert_array_equal(a["logits"], b["logits"])
    assert a.meta["model"]["storage_dtypes"] == {CODES[np.dtype(low)]: len(rounded)}


def test_float32_weights_stay_memory_mapped():
    model = load_model(model_dir("llama"))
    w = model.weights["blocks.0.attn.W_q"]
    chain = [w]
    while isinstance(chain[-1], np.ndarray) and chain[-1].base is not None:
        chain.append(chain[-1].base)
    assert any(isinstance(a, np.memmap) for a in chain) or type(chain[-1]).__name__ == "mmap"
    assert not w.flags.owndata


def test_saved_runs_are_byte_identical_and_hold_no_absolute_paths(tmp_path):
    model = load_model(model_dir("llama"))
    model.run("早上好").save(tmp_path / "a.safetensors")
    load_model(model_dir("llama")).run("早上好").save(tmp_path / "b.safetensors")
    a = (tmp_path / "a.safetensors").read_bytes()
    assert a == (tmp_path / "b.safetensors").read_bytes()
    assert str(model_dir("llama").parent).encode() not in a and str(tmp_path).encode() not in a
