"""Bad input: one line `error: ...`, exit status 2, no traceback, no partial output file."""

import json
import shutil
import struct

import pytest
from typer.testing import CliRunner

from conftest import model_dir
from tracer.cli.main import app

runner = CliRunner()


@pytest.fixture
def llama(tmp_path):
    dst = tmp_path / "llama"
    shutil.copytree(model_dir("llama"), dst)
    return dst


def run_cli(*args):
    return runner.invoke(app, ["run", *map(str, args)])


def assert_clean_error(result, fragment: str):
    assert result.exit_code == 2, result.output
    text = result.output
    assert "Traceback" not in text
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert lines[0].startswith("error: "), text
    assert fragment in text, text


def _edit_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def test_missing_folder():
    assert_clean_error(run_cli("--model", "/nonexistent/model", "--ids", "1"), "no such checkpoint folder")


def test_missing_config(llama):
    (llama / "config.json").unlink()
    assert_clean_error(run_cli("--model", llama, "--ids", "1"), "no config.json")


def test_corrupt_config(llama):
    (llama / "config.json").write_text("{not json")
    assert_clean_error(run_cli("--model", llama, "--ids", "1"), "not valid JSON")


def test_unknown_family_names_the_supported_list(llama):
    _edit_config(llama, model_type="mamba")
    r = run_cli("--model", llama, "--ids", "1")
    assert_clean_error(r, "'mamba' is not supported")
    assert "gpt2" in r.output and "gpt_neox" in r.output


def test_config_disagreeing_with_weights(llama):
    _edit_config(llama, intermediate_size=999)
    assert_clean_error(run_cli("--model", llama, "--ids", "1"), "disagrees with the weights")


def test_truncated_weights(llama):
    data = (llama / "model.safetensors").read_bytes()
    (llama / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert_clean_error(run_cli("--model", llama, "--ids", "1"), "truncated")


def test_header_that_lies_about_its_size(llama):
    data = bytearray((llama / "model.safetensors").read_bytes())
    data[:8] = struct.pack("<Q", 10**12)
    (llama / "model.safetensors").write_bytes(bytes(data))
    assert_clean_error(run_cli("--model", llama, "--ids", "1"), "corrupt safetensors header")


def test_missing_weight(llama, tmp_path):
    from safetensors.numpy import save_file

    from tracer.checkpoint.safetensors_file import SafetensorsFile

    f = SafetensorsFile(llama / "model.safetensors")
    tensors = {k: f.array(k).copy() for k in f.keys() if "layers.1.mlp.up_proj" not in k}
    save_file(tensors, llama / "model.safetensors")
    assert_clean_error(run_cli("--model", llama, "--ids", "1"), "layers.1.mlp.up_proj.weight")


def test_pickle_checkpoint_is_refused_without_unpickling(llama):
    (llama / "model.safetensors").unlink()
    (llama / "pytorch_model.bin").write_bytes(b"\x80\x04this would be a pickle")
    r = run_cli("--model", llama, "--ids", "1")
    assert_clean_error(r, "never unpickles")
    assert "save_pretrained" in r.output


def test_missing_tokenizer_with_text(llama):
    (llama / "tokenizer.json").unlink()
    assert_clean_error(run_cli("hello", "--model", llama), "no tokenizer.json")


def test_empty_prompt(llama):
    assert_clean_error(run_cli("", "--model", llama), "empty")
    assert_clean_error(run_cli("   ", "--model", llama), "empty")


@pytest.mark.parametrize("ids,fragment", [("1,x,3", "not an integer"), ("1,999999", "outside the vocabulary"), ("-1", "outside")])
def test_bad_ids(llama, ids, fragment):
    assert_clean_error(run_cli("--model", llama, "--ids", ids), fragment)


def test_prompt_longer_than_the_model_allows(llama, tmp_path):
    limit = json.loads((llama / "config.json").read_text())["max_position_embeddings"]
    out = tmp_path / "out.safetensors"
    r = run_cli("--model", llama, "--ids", ",".join(["5"] * (limit + 1)), "--save", out)
    assert_clean_error(r, f"the input is {limit + 1} tokens; this model allows {limit} (max_position_embeddings)")
    assert "--allow-long" in r.output  # rotary: the flag that lets it go further
    assert not out.exists()


def test_bad_dtype(llama):
    assert_clean_error(run_cli("--model", llama, "--ids", "1", "--dtype", "float8"), "float8")


def test_no_partial_file_when_the_run_fails(llama, tmp_path):
    out = tmp_path / "t.safetensors"
    r = run_cli("--model", llama, "--ids", "1,2", "--ids", "3,notanumber", "--save", out)
    assert r.exit_code == 2 and not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name != "llama"] == []
