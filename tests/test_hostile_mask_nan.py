"""Issue 11, the mask lab's inputs and NaN weights."""

import os
import zipfile

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from hostile import assert_contract, cli, copy_model


def mask(arg, *extra):
    return cli("mask", "-c", "torch-sdpa-bool", "--mask", arg, "--scores", "1,1,2,2", *extra)


def test_literal_nested_40_deep():
    assert_contract(mask("[" * 40 + "1" + "]" * 40), "nests deeper")


def test_npz_named_npy(tmp_path):
    np.savez(tmp_path / "m.npz", a=np.ones((2, 2), bool))
    os.rename(tmp_path / "m.npz", tmp_path / "m.npy")
    assert_contract(mask(str(tmp_path / "m.npy")), "not a .npy file")


def test_corrupt_zip(tmp_path):
    (tmp_path / "m.npz").write_bytes(b"PK\x03\x04" + b"\0" * 40)
    assert_contract(mask(str(tmp_path / "m.npz")), "not a plain NumPy archive")


def test_fifo_mask_does_not_hang(tmp_path):
    os.mkfifo(tmp_path / "m.npy")
    assert_contract(mask(str(tmp_path / "m.npy")), "not a regular file")


def test_symlink_loop_mask(tmp_path):
    os.symlink("m.npy", tmp_path / "m.npy")
    assert_contract(mask(str(tmp_path / "m.npy")), "m.npy")


@pytest.mark.parametrize("array", [
    np.ones((2, 2), np.complex64),
    np.array([["2020-01-01", "2020-01-02"]] * 2, dtype="datetime64[D]"),
    np.zeros((2, 2), dtype=[("a", "i4"), ("b", "f4")]),
    np.array([["a", "b"], ["c", "d"]]),
], ids=["complex", "datetime", "structured", "strings"])
def test_non_numeric_mask_arrays(tmp_path, array):
    np.save(tmp_path / "m.npy", array)
    assert_contract(mask(str(tmp_path / "m.npy")), "a mask is bool, integer or float")


def test_non_numeric_array_inside_an_npz(tmp_path):
    np.savez(tmp_path / "m.npz", m=np.ones((2, 2), np.complex128))
    assert_contract(mask(str(tmp_path / "m.npz") + ":m"), "a mask is bool, integer or float")


def test_npz_with_a_missing_member(tmp_path):
    with zipfile.ZipFile(tmp_path / "m.npz", "w") as z:
        z.writestr("m.npy", b"\x93NUMPY garbage")
    assert_contract(mask(str(tmp_path / "m.npz") + ":m"), "not a plain NumPy archive")


# ---------- NaN weights ----------


@pytest.fixture(scope="module")
def nan_model(tmp_path_factory):
    folder = copy_model(tmp_path_factory.mktemp("nan"))
    t = load_file(folder / "model.safetensors")
    t["model.layers.1.mlp.down_proj.weight"][0, 0] = np.nan
    save_file(t, folder / "model.safetensors")
    return folder


def test_nan_weights_run_and_name_the_first_step(nan_model):
    r = cli("run", "--model", nan_model, "--ids", "1,2,3", "--only", "top_k")
    assert r.exit_code == 0, r.output
    assert "warning: NaN first appeared at blocks.1.mlp.out" in r.output


def test_next_token_panel_draws_no_bars_or_entropy_for_nan_rows(nan_model):
    r = cli("run", "--model", nan_model, "--ids", "1,2,3", "--only", "top_k")
    assert not any(ch in r.output for ch in "█▏▎▍▌▋▊▉")
    assert "entropy -0.00" not in r.output and "no entropy" in r.output


def test_html_page_draws_no_bars_or_entropy_for_nan_rows(nan_model, tmp_path):
    import re

    page = tmp_path / "nan.html"
    r = cli("run", "--model", nan_model, "--ids", "1,2,3", "--only", "top_k", "--export-html", str(page))
    assert r.exit_code == 0, r.output
    html = page.read_text(encoding="utf-8")
    widths = [float(w) for w in re.findall(r'class="fill" style="width:([0-9.]+)%"', html)]
    assert widths and all(w == 0.0 for w in widths), "a NaN probability draws no bar"
    assert "no entropy" in html and "entropy nan" not in html.lower()


def test_nan_in_json(nan_model):
    import json

    r = cli("run", "--model", nan_model, "--ids", "1,2,3", "--only", "top_k", "--json")
    data = json.loads(r.stdout)
    assert data["distribution"]["entropy_bits"] is None
    assert data["nonfinite"]["first_nan"]["step"] == "blocks.1.mlp.out"


def test_finite_runs_report_no_nonfinite_steps():
    from conftest import model_dir

    r = cli("run", "--model", model_dir("llama"), "--ids", "1,2,3", "--only", "top_k")
    assert r.exit_code == 0 and "warning" not in r.output and "entropy" in r.output


def test_found_by_the_fuzzer_bert_extended_mask_that_broadcasts():
    """A (1,1) BERT mask on K=2 broadcasts in torch; it used to end in an internal TypeError."""
    r = cli("mask", "-c", "bert-extended", "--mask", "[[0]]", "--scores", "1,1,1,2")
    assert r.exit_code == 0 and "Traceback" not in r.output and "internal error" not in r.output, r.output


def test_bert_extended_mask_that_cannot_broadcast_is_the_framework_error():
    assert_contract(cli("mask", "-c", "bert-extended", "--mask", "[[1,1,1]]", "--scores", "1,1,2,2"),
                    "must match the size of tensor b")
