"""Nothing is ever unpickled: one test per pickle vector tried in issue 11.

Each payload, if it were unpickled, would create a sentinel file (`open(SENTINEL, "w")`). Every test
checks the contract (exit 2, one line) and that the sentinel does not exist.
"""

import os
import pickle
import shutil

import numpy as np
import pytest

from conftest import model_dir
from hostile import assert_contract, cli, copy_model


class _Payload:
    def __init__(self, sentinel):
        self.sentinel = str(sentinel)

    def __reduce__(self):
        return (open, (self.sentinel, "w"))


@pytest.fixture
def sentinel(tmp_path):
    path = tmp_path / "UNPICKLED"
    yield path
    assert not path.exists(), "a pickle was loaded"


def payload(sentinel) -> bytes:
    return pickle.dumps(_Payload(sentinel), protocol=4)


def _folder_with_only(tmp_path, sentinel, name):
    folder = copy_model(tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / name).write_bytes(payload(sentinel))
    return folder


@pytest.mark.parametrize("suffix", [".bin", ".pt", ".pth", ".ckpt", ".pkl"])
def test_pickle_file_given_as_the_model(tmp_path, sentinel, suffix):
    path = tmp_path / f"model{suffix}"
    path.write_bytes(payload(sentinel))
    assert_contract(cli("run", "--model", path, "--ids", "1"), "never unpickles")


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt"])
def test_folder_with_only_a_pickle_checkpoint(tmp_path, sentinel, name):
    assert_contract(cli("run", "--model", _folder_with_only(tmp_path, sentinel, name), "--ids", "1"), "never unpickles")


def test_sharded_pickle_index(tmp_path, sentinel):
    folder = _folder_with_only(tmp_path, sentinel, "pytorch_model-00001-of-00001.bin")
    (folder / "pytorch_model.bin.index.json").write_text('{"weight_map": {"x": "pytorch_model-00001-of-00001.bin"}}')
    assert_contract(cli("run", "--model", folder, "--ids", "1"), "never unpickles")


def test_pickle_bytes_named_model_safetensors(tmp_path, sentinel):
    folder = _folder_with_only(tmp_path, sentinel, "model.safetensors")
    assert_contract(cli("run", "--model", folder, "--ids", "1"), "safetensors")


def test_safetensors_index_naming_a_pickle_shard(tmp_path, sentinel):
    folder = _folder_with_only(tmp_path, sentinel, "pytorch_model.bin")
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {"x": "pytorch_model.bin"}}')
    assert_contract(cli("run", "--model", folder, "--ids", "1"), "not a .safetensors file name")


def test_pickle_config(tmp_path, sentinel):
    folder = copy_model(tmp_path)
    (folder / "config.json").write_bytes(payload(sentinel))
    assert_contract(cli("run", "--model", folder, "--ids", "1"), "config.json")


def test_pickle_tokenizer(tmp_path, sentinel):
    folder = copy_model(tmp_path)
    (folder / "tokenizer.json").write_bytes(payload(sentinel))
    assert_contract(cli("run", "--model", folder, "--ids", "1"), "cannot read tokenizer")


def _object_array(sentinel):
    return np.array([_Payload(sentinel), 1], dtype=object)


def test_object_npy_mask(tmp_path, sentinel):
    np.save(tmp_path / "m.npy", _object_array(sentinel), allow_pickle=True)
    assert_contract(cli("mask", "-c", "torch-sdpa-bool", "--mask", tmp_path / "m.npy", "--scores", "1,1,2,2"), "never unpickled")


def test_object_npz_mask(tmp_path, sentinel):
    np.savez(tmp_path / "m.npz", m=_object_array(sentinel))
    assert_contract(cli("mask", "-c", "torch-sdpa-bool", "--mask", f"{tmp_path / 'm.npz'}:m", "--scores", "1,1,2,2"),
                    "not a plain NumPy archive")


def test_object_npy_for_check_weights(tmp_path, sentinel):
    np.save(tmp_path / "w.npy", _object_array(sentinel), allow_pickle=True)
    assert_contract(cli("mask", "-c", "hf-2d", "--mask", "[[1,1]]", "--check-weights", tmp_path / "w.npy"), "never unpickled")


def test_object_npy_for_run_mask(tmp_path, sentinel):
    np.save(tmp_path / "m.npy", _object_array(sentinel), allow_pickle=True)
    r = cli("run", "--model", model_dir("llama"), "--ids", "1,2", "--mask", tmp_path / "m.npy", "--mask-convention", "hf-2d")
    assert_contract(r, "never unpickled")


def test_pickle_as_a_trace_file(tmp_path, sentinel):
    (tmp_path / "a.safetensors").write_bytes(payload(sentinel))
    assert_contract(cli("diff", tmp_path / "a.safetensors", tmp_path / "a.safetensors"), "safetensors")


def test_pickle_as_a_name_map(tmp_path, sentinel):
    from tracer.trace import Trace

    t = Trace([], {}).save(tmp_path / "t.safetensors")
    (tmp_path / "map.json").write_bytes(payload(sentinel))
    assert_contract(cli("diff", t, t, "--names", tmp_path / "map.json"), "map.json")


def test_pickle_positions_for_the_ggml_mask(tmp_path, sentinel):
    np.save(tmp_path / "q.npy", _object_array(sentinel), allow_pickle=True)
    r = cli("mask", "-c", "ggml-kq-mask", "--positions", f"{tmp_path / 'q.npy'},[0,1]", "--scores", "1,1,2,2")
    assert_contract(r, "never unpickled")


@pytest.mark.live
def test_capture_of_a_pickle_only_folder(tmp_path, sentinel):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    folder = _folder_with_only(tmp_path, sentinel, "pytorch_model.bin")
    r = cli("capture", folder, "--ids", "1,2", "-o", tmp_path / "out.safetensors")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert not (tmp_path / "out.safetensors").exists()
    shutil.rmtree(folder)
