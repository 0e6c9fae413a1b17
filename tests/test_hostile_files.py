"""Issue 11, files: safetensors headers, shard indexes, special files, trace metadata, name maps."""

import json
import os

import numpy as np
import pytest

from hostile import assert_contract, cli, copy_model, run_model, write_safetensors_raw
from tracer.trace import Trace
from tracer.trace.trace import write_safetensors


def _entry(**over):
    e = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    e.update(over)
    return e


@pytest.mark.parametrize("entry,fragment", [
    (_entry(dtype=["F32"]), "bad entry"),
    (_entry(dtype={"F": 32}), "bad entry"),
    (_entry(shape="Infinity"), "bad entry"),
    (_entry(shape=[True, 2]), "bad entry"),
    (_entry(shape=[2**60]), "beyond 2**48"),
    (_entry(data_offsets=[0, 10**30]), "beyond the file"),
    (_entry(data_offsets=[0]), "bad entry"),
    (_entry(dtype="C64"), "which tracer does not read"),
    ([1, 2], "bad entry"),
])
def test_bad_tensor_entries(tmp_path, entry, fragment):
    path = write_safetensors_raw(tmp_path / "t.safetensors", {"x": entry}, b"\0" * 8)
    assert_contract(cli("diff", path, path), fragment)


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN"])
def test_infinity_in_a_header(tmp_path, literal):
    blob = ('{"x": {"dtype": "F32", "shape": [%s], "data_offsets": [0, 8]}}' % literal).encode()
    path = write_safetensors_raw(tmp_path / "t.safetensors", blob, b"\0" * 8)
    assert_contract(cli("diff", path, path), "not valid JSON")


def test_header_nested_1000_deep(tmp_path):
    blob = b'{"x": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    path = write_safetensors_raw(tmp_path / "t.safetensors", blob)
    assert_contract(cli("diff", path, path), "nested deeper")


def test_metadata_that_is_not_strings(tmp_path):
    path = write_safetensors_raw(tmp_path / "t.safetensors", {"__metadata__": {"tracer": 5}})
    assert_contract(cli("diff", path, path), "__metadata__")


@pytest.fixture
def sharded(tmp_path):
    return copy_model(tmp_path, "llama-sharded")


def _rename_shard(folder, new_name):
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    old = sorted(set(data["weight_map"].values()))[0]
    data["weight_map"] = {k: (new_name if v == old else v) for k, v in data["weight_map"].items()}
    index.write_text(json.dumps(data))
    return old


@pytest.mark.parametrize("name", ["../outside.safetensors", "/etc/passwd", "sub/x.safetensors", "..", "x.bin"])
def test_shard_names_must_stay_in_the_folder(sharded, name):
    outside = sharded.parent / "outside.safetensors"
    outside.write_bytes(b"not even parsed")
    _rename_shard(sharded, name)
    assert_contract(run_model(sharded), "inside the checkpoint folder")


def test_shard_named_in_the_index_but_missing(sharded):
    _rename_shard(sharded, "model-00009-of-00009.safetensors")
    assert_contract(run_model(sharded), "is missing")


def test_index_that_is_not_an_object(sharded):
    (sharded / "model.safetensors.index.json").write_text('{"weight_map": [1, 2]}')
    assert_contract(run_model(sharded), "not a valid safetensors index")


def test_fifo_weights_are_refused_without_hanging(tmp_path):
    folder = copy_model(tmp_path)
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")
    assert_contract(run_model(folder), "not a regular file")


def test_symlink_loop(tmp_path):
    folder = copy_model(tmp_path)
    (folder / "model.safetensors").unlink()
    os.symlink("model.safetensors", folder / "model.safetensors")
    assert_contract(run_model(folder), "model.safetensors")


def test_directory_named_like_the_weights(tmp_path):
    folder = copy_model(tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").mkdir()
    assert_contract(run_model(folder), "is a directory")


def test_fifo_tokenizer(tmp_path):
    folder = copy_model(tmp_path)
    (folder / "tokenizer.json").unlink()
    os.mkfifo(folder / "tokenizer.json")
    assert_contract(run_model(folder), "not a regular file")


def test_tokenizer_that_is_a_json_list(tmp_path):
    folder = copy_model(tmp_path)
    (folder / "tokenizer.json").write_text("[1, 2]")
    assert_contract(run_model(folder), "cannot read tokenizer")


# ---------- trace metadata ----------


def _trace_with_meta(tmp_path, meta_text: str, tensors=None):
    path = tmp_path / "t.safetensors"
    write_safetensors(path, tensors or {"x": np.ones(2, np.float32)}, {"tracer": meta_text})
    return path


@pytest.mark.parametrize("meta,fragment", [
    ("null", "the metadata is None, expected a JSON object"),
    ("5", "the metadata is 5"),
    ('{"steps": null}', "steps is None"),
    ('{"steps": [1, 2]}', "steps[0] is 1, expected an object"),
    ('{"steps": [{"name": "x"}]}', "has no 'axes'"),
    ('{"steps": [{"name": "x", "axes": ["a"], "op": "", "shape": [2], "dtype": "float32", "stats": {"mean": "hi"}}]}',
     "stats is"),
    ('{"steps": [{"name": "x", "axes": ["a", "b"], "op": "", "shape": [2], "dtype": "float32", "stats": {}}]}',
     "1 names"),
    ('{"steps": [{"name": "x", "axes": ["a"], "op": "", "shape": [3], "dtype": "float32", "stats": {}}]}',
     "described as [3]"),
    ('{"format_version": 99, "steps": []}', "newer than this tracer reads"),
    ('{"model": "gpt2", "steps": []}', "model is 'gpt2', expected an object"),
    ("[" * 500 + "]" * 500, "nested deeper"),
])
def test_trace_metadata_schema(tmp_path, meta, fragment):
    path = _trace_with_meta(tmp_path, meta)
    assert_contract(cli("diff", path, path), fragment)


def test_zero_element_tensor_with_a_huge_declared_shape(tmp_path):
    path = write_safetensors_raw(tmp_path / "t.safetensors", {"x": {"dtype": "F32", "shape": [0, 2**47],
                                                                     "data_offsets": [0, 0]}})
    r = cli("diff", path, path)
    assert "Traceback" not in r.output and r.exit_code in (0, 2), r.output


def test_name_map_that_is_not_utf8(tmp_path):
    t = Trace([], {}).save(tmp_path / "a.safetensors")
    names = tmp_path / "map.json"
    names.write_bytes(b'{"\xff\xfe": "logits"}')
    assert_contract(cli("diff", t, t, "--names", names), "UTF-8")


def test_name_map_nested_deep(tmp_path):
    t = Trace([], {}).save(tmp_path / "a.safetensors")
    names = tmp_path / "map.json"
    names.write_text('{"a": ' + "[" * 200 + "]" * 200 + "}")
    assert_contract(cli("diff", t, t, "--names", names), "nested deeper")
