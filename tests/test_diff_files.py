"""Issue 16: `tracer diff` reads .npy/.npz dumps (never unpickling), and names a file that is neither."""

from __future__ import annotations

import pickle
import zipfile

import numpy as np
import pytest
from hypothesis import given, strategies as st

from conftest import model_dir
from hostile import assert_contract, cli
from tracer.errors import TracerError
from tracer.trace import Trace

LLAMA = model_dir("llama")


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    path = tmp_path_factory.mktemp("ref") / "r.safetensors"
    assert cli("run", "--model", LLAMA, "--ids", "5,6,7", "--save", path, "--only", "top_k").exit_code == 0
    return path


def test_an_npz_dump_is_compared_step_by_step(ref, tmp_path):
    t = Trace.load(ref)
    np.savez(tmp_path / "d.npz", logits=t["logits"], **{"blocks.0.attn.q": t["blocks.0.attn.q"]})
    r = cli("diff", ref, tmp_path / "d.npz", "--json")
    assert r.exit_code == 0, r.output
    assert "corrupt safetensors header" not in r.output
    assert '"logits"' in r.stdout and '"blocks.0.attn.q"' in r.stdout


def test_an_npy_dump_is_one_step_named_after_the_file_and_a_change_is_found(ref, tmp_path):
    logits = Trace.load(ref)["logits"].copy()
    np.save(tmp_path / "logits.npy", logits)
    assert cli("diff", ref, tmp_path / "logits.npy").exit_code == 0
    logits[0, -1, 3] += 1.0
    np.save(tmp_path / "logits.npy", logits)
    r = cli("diff", ref, tmp_path / "logits.npy")
    assert r.exit_code == 1 and "logits" in r.output, r.output


def test_a_big_endian_npy_reads_as_its_values(ref, tmp_path):
    logits = Trace.load(ref)["logits"]
    np.save(tmp_path / "logits.npy", logits.astype(">f4"))
    assert cli("diff", ref, tmp_path / "logits.npy").exit_code == 0


class _Touch:
    """Unpickling this creates a file: the test that nothing is ever unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.parametrize("kind", ["npy", "npz", "pickle", "torch"])
def test_pickles_are_named_and_never_unpickled(ref, tmp_path, kind):
    canary = tmp_path / "unpickled"
    payload = np.array([_Touch(str(canary))], dtype=object)
    path = tmp_path / f"dump.{kind}"
    if kind == "npy":
        np.save(path, payload, allow_pickle=True)
    elif kind == "npz":
        np.savez(path, x=payload)
        path = path.with_suffix(".npz") if not path.exists() else path
    elif kind == "pickle":
        path.write_bytes(pickle.dumps(_Touch(str(canary))))
    else:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", pickle.dumps(_Touch(str(canary))))
    assert not canary.exists()
    r = cli("diff", ref, path)
    assert_contract(r, "pickle")
    assert "never unpickles" in r.output
    assert not canary.exists()


@pytest.mark.parametrize("content,fragment", [
    (b"GGUF\x03\x00\x00\x00" + b"\x00" * 32, "GGUF metadata"),  # a GGUF file is a model (run on the trace's ids): its bad metadata is named
    (b'{"a": 1}', "a JSON file, not a trace"),
    (b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }" + b" " * 60 + b"\n", "truncated"),
    (b"PK\x03\x04garbage", "corrupt zip"),
])
def test_other_files_are_named_for_what_they_are(ref, tmp_path, content, fragment):
    path = tmp_path / "x.bin"
    path.write_bytes(content)
    assert_contract(cli("diff", ref, path), fragment)


def test_a_zip_that_is_not_npz_is_named(ref, tmp_path):
    with zipfile.ZipFile(tmp_path / "z.npz", "w") as z:
        z.writestr("readme.txt", "hello")
    assert_contract(cli("diff", ref, tmp_path / "z.npz"), "not a NumPy .npz")


@given(st.sampled_from([b"\x93NUMPY", b"PK\x03\x04", b"PK\x05\x06", b"\x80\x04", b"GGUF", b""]), st.binary(max_size=300))
def test_fuzz_any_bytes_are_a_trace_or_one_tracer_error(prefix, rest):
    import tempfile
    from pathlib import Path

    from tracer.diff.files import load_side

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "f.bin"
        path.write_bytes(prefix + rest)
        try:
            load_side(path)
        except TracerError:
            pass


# ---------- two different models ----------


def _saved(tmp_path, name, *inputs):
    out = tmp_path / f"{name}.safetensors"
    assert cli("run", "--model", model_dir(name), *inputs, "--save", out, "--only", "top_k").exit_code == 0
    return out


def test_a_diff_of_two_models_says_the_models_differ(tmp_path):
    import json

    a, b = _saved(tmp_path, "llama", "--ids", "5,6,7"), _saved(tmp_path, "gpt2", "--ids", "5,6,7")
    r = cli("diff", a, b)
    assert r.exit_code == 1 and "the models differ" in r.output and "llama" in r.output and "gpt2" in r.output, r.output
    data = json.loads(cli("diff", a, b, "--json").stdout)
    models = data["models"] if "models" in data else data["extras"]["models"]
    assert models["ref"]["family"] == "llama" and models["mine"]["family"] == "gpt2"
    assert "family" in models["differs"]
    assert models["ref"]["config_sha256"] != models["mine"]["config_sha256"]


def test_different_inputs_of_different_models_name_both(tmp_path):
    a, b = _saved(tmp_path, "llama", "--ids", "5,6,7"), _saved(tmp_path, "gpt2", "--ids", "9,6,7")
    assert_contract(cli("diff", a, b), "the inputs differ")
    assert "the models differ" in cli("diff", a, b).output


def test_two_runs_of_one_model_say_nothing_of_models(ref, tmp_path):
    r = cli("diff", ref, ref)
    assert r.exit_code == 0 and "models differ" not in r.output


@pytest.mark.parametrize("header_len", [123, 91, 640, 1152])  # '{', '[', and b'\x80\x02' / b'\x80\x04' as a length
def test_a_safetensors_file_whose_length_bytes_look_like_json_or_pickle_is_still_read(tmp_path, header_len):
    """The first 8 bytes of safetensors are the header length: they may read as '{' or a pickle's opcode."""
    import json
    import struct

    data = np.arange(4, dtype=np.float32).tobytes()
    header = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    header += b" " * (header_len - len(header))
    path = tmp_path / "t.safetensors"
    path.write_bytes(struct.pack("<Q", header_len) + header + data)
    from tracer.diff.files import load_side

    assert load_side(path)["x"].tolist() == [0.0, 1.0, 2.0, 3.0]
