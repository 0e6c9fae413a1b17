"""GGUF files on the command line: `run`, `cost`, `diff`, `generate` take a .gguf path; broken files get one
`error:` line and exit status 2; the card shows the file's quantization and the trace meta records it."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

import gguf
from gguf import GGMLQuantizationType as Q

from gguf_build import FIXTURES, build_gguf
from tracer.cli.main import app
from tracer.errors import TracerError
from tracer.model.model import load_model

runner = CliRunner()


def invoke(*args, **env):
    return runner.invoke(app, [*map(str, args)], env={"COLUMNS": "100", "NO_COLOR": "1", **env})


def assert_clean_error(result, fragment: str):
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.strip().splitlines() if ln.strip()]
    assert "Traceback" not in result.output
    assert lines[0].startswith("error: ") and all(ln.startswith("hint: ") for ln in lines[1:2]) and len(lines) <= 2, \
        result.output
    assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def llama_q8(tmp_path_factory):
    return build_gguf(FIXTURES / "llama", tmp_path_factory.mktemp("g") / "llama-q8_0.gguf", Q.Q8_0)


def test_run_on_a_gguf_shows_its_quantization_and_records_it(llama_q8, tmp_path):
    result = invoke("run", "--model", llama_q8, "--ids", "0,5,9,17", "--only", "card")
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if "quantization" in ln)
    f = gguf.GGUFReader(llama_q8)
    n_q8 = sum(t.tensor_type == Q.Q8_0 for t in f.tensors)
    n_f32 = sum(t.tensor_type == Q.F32 for t in f.tensors)
    assert f"Q8_0 8.5 bpw ({n_q8})" in line and f"F32 ({n_f32})" in line  # Q8_0: 34 bytes per 32 weights
    out = tmp_path / "t.safetensors"
    assert invoke("run", "--model", llama_q8, "--ids", "0,5,9,17", "--save", out).exit_code == 0
    from tracer.trace import Trace

    q = Trace.load(out).meta["model"]["quantization"]
    bytes_total = sum(t.n_bytes for t in f.tensors)
    params = sum(int(t.n_elements) for t in f.tensors)
    assert q["types"]["Q8_0"]["tensors"] == n_q8 and q["bits_per_weight"] == round(8 * bytes_total / params, 4)
    assert q["file_type"] == "Q8_0"


def test_the_report_page_of_a_gguf_trace_shows_the_quantization(llama_q8, tmp_path):
    trace, page = tmp_path / "t.safetensors", tmp_path / "p.html"
    assert invoke("run", "--model", llama_q8, "--ids", "0,5,9", "--save", trace).exit_code == 0
    result = invoke("report", trace, "-o", page, "--model", llama_q8)
    assert result.exit_code == 0, result.output
    # 2 blocks x 7 matrices + embedding + head in Q8_0 (34 bytes per 32 weights); 5 norms + rope_freqs in F32;
    # 43,168 weights + 4 rope factors in 46,352 bytes: 8.59 bits each
    assert "<dt>quantization</dt><dd>Q8_0: Q8_0 8.5 bpw (16), F32 (6); 8.59 bits per weight" in page.read_text()


def test_cost_reads_the_metadata_only(llama_q8, monkeypatch):
    """cost on a GGUF dequantizes nothing (the Spec comes from the metadata and the tensor headers) and
    counts what cost on the source folder counts."""
    def refuse(*args, **kwargs):
        raise AssertionError("cost dequantized a tensor")

    monkeypatch.setattr(gguf.quants, "dequantize", refuse)
    ours = invoke("cost", "--model", llama_q8, "--json")
    folder = invoke("cost", "--model", FIXTURES / "llama", "--json")
    assert ours.exit_code == 0, ours.output
    a, b = json.loads(ours.stdout), json.loads(folder.stdout)
    a.pop("model_name"), b.pop("model_name")
    assert a == b


def test_diff_of_a_gguf_against_its_folder_finds_no_divergence(tmp_path):
    path = build_gguf(FIXTURES / "qwen3", tmp_path / "qwen3.gguf")
    result = invoke("diff", path, FIXTURES / "qwen3", "--ids", "0,5,9,17,33", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["verdict"] == "match" and report["first_divergence"] is None and report["counts"]["pass"] > 30
    # the weight diff reads the GGUF through its HF names: every tensor the same after undoing the converter
    assert {t["status"] for t in report["weights"]["tensors"]} == {"same"} and len(report["weights"]["tensors"]) == 25


def test_diff_of_a_q8_gguf_names_the_quantized_weights(llama_q8):
    result = invoke("diff", llama_q8, FIXTURES / "llama", "--ids", "0,5,9", "--json")
    assert result.exit_code == 0, result.output  # the steps differ by Q8_0's rounding: the conversion verdict passes
    changed = {t["name"]: t for t in json.loads(result.stdout)["weights"]["tensors"] if t["status"] != "same"}
    assert "model.layers.0.self_attn.q_proj.weight" in changed and "model.norm.weight" not in changed  # norms stay F32
    assert changed["model.layers.0.self_attn.q_proj.weight"]["mine_dtype"] == "F32"  # mine = the folder
    assert changed["model.layers.0.self_attn.q_proj.weight"]["ref_dtype"] == "Q8_0"


def test_generate_from_a_gguf_matches_the_folder(tmp_path):
    path = build_gguf(FIXTURES / "llama", tmp_path / "llama.gguf")
    ours = invoke("generate", "--model", path, "--ids", "0,5,9", "--max-new-tokens", "4", "--json")
    theirs = invoke("generate", "--model", FIXTURES / "llama", "--ids", "0,5,9", "--max-new-tokens", "4", "--json")
    assert ours.exit_code == 0, ours.output
    assert json.loads(ours.stdout)["rows"][0]["new_ids"] == json.loads(theirs.stdout)["rows"][0]["new_ids"]


# ---- broken files


def _type_field_offset(path, name: str) -> int:
    """Byte offset of a tensor's ggml type in the header (after name length, name, n_dims, dims)."""
    t = next(t for t in gguf.GGUFReader(path).tensors if t.name == name)
    return int(t.field.offset) + sum(int(p.nbytes) for p in t.field.parts[:4])


def _patched(src, dst, offset: int, value: bytes):
    data = bytearray(src.read_bytes())
    data[offset:offset + len(value)] = value
    dst.write_bytes(bytes(data))
    return dst


@pytest.fixture(scope="module")
def llama_f16(tmp_path_factory):
    return build_gguf(FIXTURES / "llama", tmp_path_factory.mktemp("h") / "llama-f16.gguf", Q.F16)


def test_a_truncated_file(llama_f16, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(llama_f16.read_bytes()[: llama_f16.stat().st_size * 2 // 3])
    assert_clean_error(invoke("run", "--model", cut, "--ids", "1,2"), "truncated")


def test_a_tensor_whose_bytes_disagree_with_its_type_and_shape(llama_f16, tmp_path):
    """attn_q stored as F16 but labelled F32: it would need twice the bytes it has before the next tensor."""
    bad = _patched(llama_f16, tmp_path / "bad.gguf", _type_field_offset(llama_f16, "blk.0.attn_q.weight"),
                   np.uint32(0).tobytes())
    assert_clean_error(invoke("run", "--model", bad, "--ids", "1,2"), "blk.0.attn_q.weight (F32 [32, 32]) needs 4,096 bytes")


def test_an_unknown_quant_type(llama_f16, tmp_path):
    bad = _patched(llama_f16, tmp_path / "bad.gguf", _type_field_offset(llama_f16, "blk.0.attn_q.weight"),
                   np.uint32(200).tobytes())
    assert_clean_error(invoke("run", "--model", bad, "--ids", "1,2"), "ggml type 200, which is not a known quantization type")


def test_bad_magic_and_bad_version(llama_f16, tmp_path):
    magic = _patched(llama_f16, tmp_path / "magic.gguf", 0, b"GGUX")
    assert_clean_error(invoke("run", "--model", magic, "--ids", "1,2"), "bad magic")
    version = _patched(llama_f16, tmp_path / "version.gguf", 4, np.uint32(9).tobytes())
    assert_clean_error(invoke("run", "--model", version, "--ids", "1,2"), "GGUF version 9")


def test_text_with_a_file_that_holds_no_tokenizer(llama_f16):
    assert_clean_error(invoke("run", "--model", llama_f16, "hello"), "holds no tokenizer")


def test_an_unsupported_architecture(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "mamba")
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    assert_clean_error(invoke("run", "--model", tmp_path / "m.gguf", "--ids", "1,2"), "GGUF architecture 'mamba' is not supported")


def test_a_missing_file_and_a_missing_tensor(llama_f16, tmp_path):
    assert_clean_error(invoke("run", "--model", tmp_path / "nope.gguf", "--ids", "1"), "no such GGUF file")
    import json as _json

    cfg = _json.loads((FIXTURES / "llama" / "config.json").read_text())
    from gguf_build import converted_tensors

    tensors = converted_tensors(FIXTURES / "llama", cfg, "llama")
    del tensors["blk.1.ffn_down.weight"]
    broken = build_gguf(FIXTURES / "llama", tmp_path / "missing.gguf", tensors=tensors)
    assert_clean_error(invoke("run", "--model", broken, "--ids", "1"), "no tensor for 'model.layers.1.mlp.down_proj.weight'")


def test_without_the_gguf_package_the_error_names_the_extra(llama_f16, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # `import gguf` now raises ImportError
    with pytest.raises(TracerError) as err:
        load_model(llama_f16)
    assert "tracer[gguf]" in str(err.value) and "pip install -e '.[gguf]'" in str(err.value)


def test_metadata_that_disagrees_with_the_tensors_or_lacks_a_size(tmp_path):
    import json as _json

    from gguf_build import converted_tensors

    cfg = _json.loads((FIXTURES / "gemma2" / "config.json").read_text())
    tensors = converted_tensors(FIXTURES / "gemma2", cfg, "gemma2")
    w = gguf.GGUFWriter(str(tmp_path / "sizes.gguf"), "gemma2")  # head count 8 where the tensors have 4
    w.add_block_count(2), w.add_embedding_length(32), w.add_feed_forward_length(64), w.add_head_count(8)
    w.add_head_count_kv(2), w.add_key_length(16), w.add_layer_norm_rms_eps(1e-5)
    for name, a in tensors.items():
        w.add_tensor(name, a)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    assert_clean_error(invoke("run", "--model", tmp_path / "sizes.gguf", "--ids", "1,2"),
                       "the GGUF metadata disagrees with its tensors")
    w = gguf.GGUFWriter(str(tmp_path / "bare.gguf"), "gemma2")  # no sizes at all
    w.add_tensor("token_embd.weight", tensors["token_embd.weight"])
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    assert_clean_error(invoke("run", "--model", tmp_path / "bare.gguf", "--ids", "1,2"),
                       "the GGUF metadata has no gemma2.embedding_length")
