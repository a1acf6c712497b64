"""`vitzoo convert`: any layout to vitzoo's or timm's."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file, save_file

import vitzoo

from .helpers import run


def test_convert_bare_file_to_vitzoo_and_timm(tmp_path, capsys):
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist").eval()
    save_file(model.state_dict(), tmp_path / "bare.safetensors")

    code, out, err = run(
        capsys, "convert", str(tmp_path / "bare.safetensors"), str(tmp_path / "ours"), "--model", "vit_mnist"
    )
    assert code == 0, err
    assert out.strip() == f"converted {tmp_path / 'bare.safetensors'} -> {tmp_path / 'ours'} (vitzoo layout)"
    restored = vitzoo.from_pretrained(tmp_path / "ours").eval()
    x = torch.randn(2, 1, 28, 28)
    assert torch.equal(restored(x), model(x))

    # vit_mnist's conv stem has no timm name: a clear error, no file; a plain ViT converts.
    code, _, err = run(capsys, "convert", str(tmp_path / "ours"), str(tmp_path / "t.safetensors"), "--to", "timm")
    assert code == 1 and "convolutional stem" in err and not (tmp_path / "t.safetensors").exists()
    plain = vitzoo.create("vit_mnist", conv_stem=(), patch_size=7).eval()
    plain.save_pretrained(tmp_path / "plain")
    code, out, err = run(
        capsys, "convert", str(tmp_path / "plain"), str(tmp_path / "t.safetensors"), "--to", "timm", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["dst"] == str(tmp_path / "t.safetensors")
    timm_state = load_file(tmp_path / "t.safetensors")
    assert all(torch.equal(timm_state[k], v) for k, v in plain.state_dict().items())

    code, _, err = run(capsys, "convert", str(tmp_path / "absent.safetensors"), str(tmp_path / "x"))
    assert code == 1 and "absent.safetensors' is neither an existing file" in err
    assert not (tmp_path / "x").exists()


def test_convert_refuses_to_overwrite_its_input(tmp_path, capsys):
    torch.manual_seed(0)
    vitzoo.create("vit_mnist_tiny").save_pretrained(tmp_path / "ours")
    before = {p.name: p.read_bytes() for p in (tmp_path / "ours").iterdir()}
    single = tmp_path / "single" / "model.safetensors"
    single.parent.mkdir()
    save_file(vitzoo.create("vit_mnist_tiny").state_dict(), single)
    cases = [
        (tmp_path / "ours", tmp_path / "ours", []),  # the same directory
        (tmp_path / "ours", tmp_path / "ours" / ".." / "ours", []),  # the same, another spelling
        (tmp_path / "ours", tmp_path / "ours" / "model.safetensors", []),  # one of its files
        (single, single.parent, ["--model", "vit_mnist_tiny"]),  # a file source inside the output directory
        (single, single, ["--model", "vit_mnist_tiny", "--to", "timm"]),
    ]
    for src, dst, extra in cases:
        code, out, err = run(capsys, "convert", str(src), str(dst), *extra)
        assert code == 1 and out == "" and err.count("\n") == 1, (src, dst, err)
        assert f"the output {str(dst)!r} would overwrite the input {str(src)!r}" in err
    assert {p.name: p.read_bytes() for p in (tmp_path / "ours").iterdir()} == before
    assert sorted(p.name for p in single.parent.iterdir()) == ["model.safetensors"]
