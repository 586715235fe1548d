"""Shapes no checkpoint can have are refused with the file and key (the sweep of 2026-12-03 found them priced, exit 0):
Mamba-2 groups that do not divide the heads, DeltaNet value heads not a whole multiple of the key heads, and a
sliding_window.layers list that repeats a layer or lists none."""

from __future__ import annotations

import pytest
import yaml


def _spec(cli, tmp_path, name: str, change) -> tuple[int, str]:
    shown = cli("specs", "show", name, "-f", "yaml")
    assert shown.exit_code == 0, shown.stderr
    data = yaml.safe_load(shown.stdout)
    change(data)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = cli("estimate", "-m", str(path), "-g", "h100-sxm")
    return out.exit_code, out.stderr


@pytest.mark.parametrize("groups", [3, 256])
def test_mamba_groups_must_divide_the_heads(cli, tmp_path, groups):
    code, err = _spec(cli, tmp_path, "nemotron-h-8b", lambda d: d["mamba"].update(groups=groups))
    assert code == 2 and f"mamba: groups ({groups}) must divide heads (128)" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("value_heads", [17, 8])
def test_deltanet_value_heads_are_a_multiple_of_the_key_heads(cli, tmp_path, value_heads):
    code, err = _spec(cli, tmp_path, "qwen3-next-80b-a3b",
                      lambda d: d["linear_attention"].update(value_heads=value_heads))  # fmt: skip
    assert code == 2 and f"value_heads ({value_heads}) must be a multiple of key_heads (16)" in err


@pytest.mark.parametrize(("layers", "says"), [([1, 1], "layer 1 is listed twice"), ([], "an empty list")])
def test_a_sliding_window_list_names_each_layer_once(cli, tmp_path, layers, says):
    code, err = _spec(cli, tmp_path, "gpt-oss-20b", lambda d: d["sliding_window"].update(layers=layers))
    assert code == 2 and f"sliding_window.layers: {says}" in err


def test_the_shipped_shapes_still_load(cli):
    for name in ("nemotron-h-8b", "qwen3-next-80b-a3b", "gpt-oss-20b"):
        assert cli("estimate", "-m", name, "-g", "h100-sxm", "-f", "json").exit_code == 0
