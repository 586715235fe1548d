"""Per-layer mixer and MLP kinds: patterns, counts over layer ranges, KV and state bytes, and the new built-ins."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tokcost.models.hf_import import from_hf_config
from tokcost.models.layers import MIXERS, expand, parse_pattern, shortest_pattern
from tokcost.models.library import load_model
from tokcost.models.spec import ModelSpec

NEW = Path(__file__).parent / "assets" / "hf" / "new"
BASE = dict(name="m", layers=8, hidden_size=64, attention_heads=4, kv_heads=2, intermediate_size=128,
            vocab_size=100, max_context=1000)  # fmt: skip

# (fixture, the published total it is held to, where that total is published)
PUBLISHED = [
    ("gemma-3-27b", 27_433e6, "Gemma 3 report Table 1: 417M + 1,416M + 25,600M"),
    ("gemma-3-12b", 12_188e6, "Gemma 3 report Table 1: 417M + 1,012M + 10,759M"),
    ("llama-4-scout", 109e9, "model card: 109B total"),
    ("llama-4-maverick", 400e9, "model card: 400B total"),
    ("mistral-small-24b", 24e9, "model card: 24B"),
    ("deepseek-r1", 671e9, "model card: 671B total"),
    ("qwen3-next-80b-a3b", 80e9, "model card: 80B total"),
    ("nemotron-h-8b", 8.1e9, "Nemotron-H-8B: 8.1B"),
]


def imported(name: str) -> ModelSpec:
    return from_hf_config(json.loads((NEW / f"{name}.json").read_text()), f"{name}.json", name=name)


@pytest.mark.parametrize(("name", "total", "where"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_imported_count_is_within_half_a_percent_of_the_published_total(name, total, where):
    assert imported(name).params_with_encoder == pytest.approx(total, rel=0.005), where


def test_gpt_oss_is_within_half_a_percent_of_21b():
    oss = from_hf_config(json.loads((NEW.parent / "gpt_oss.json").read_text()), "gpt_oss.json")
    assert oss.params_total == pytest.approx(21e9, rel=0.005)  # model card: 21B parameters, 3.6B active


@pytest.mark.parametrize("name", [p[0] for p in PUBLISHED] + ["kimi-k2"])
def test_built_in_spec_is_its_published_config_imported(name):
    shipped, fresh = load_model(name), imported(name)
    assert shipped.params_with_encoder == fresh.params_with_encoder
    assert shipped.plan.kinds == fresh.plan.kinds
    assert shipped.kv_bytes_per_token() == fresh.kv_bytes_per_token()
    assert shipped.state_bytes_per_sequence() == fresh.state_bytes_per_sequence()
    assert abs(shipped.params_mismatch) < (0.014 if name == "kimi-k2" else 0.005)  # Kimi: "1.04T" is rounded


def test_layer_kinds_follow_transformers_layer_types():
    gemma = imported("gemma-3-27b")  # (i + 1) % 6 != 0 slides: 62 = 10 x 6 + 2 sliding
    assert gemma.layer_pattern == "5 sliding : 1 global" and gemma.sliding_layers == 52 and gemma.window == 1024
    scout = imported("llama-4-scout")  # no_rope_layers: every 4th layer global, the rest chunked (8,192)
    assert scout.layer_pattern == "3 chunked : 1 global" and scout.chunk_tokens == 8192 and scout.moe_layers == 48
    maverick = imported("llama-4-maverick")  # interleave_moe_layer_step 2: MoE on odd layers
    assert maverick.mlp_pattern == "1 dense : 1 moe" and maverick.moe_layers == 24
    assert maverick.dense_intermediate == 16384 and maverick.moe.expert_intermediate_size == 8192
    nemo = imported("nemotron-h-8b")  # "M-M-M-M*-..." : 24 Mamba-2, 4 attention, 24 MLP-only blocks
    counts = {k: n for k, n in nemo.plan.counts(range(52)).items()}
    assert counts == {("mamba", "none"): 24, ("none", "dense"): 24, ("global", "none"): 4}
    kimi = imported("kimi-k2")
    assert kimi.mla is not None and kimi.moe.experts == 384 and kimi.moe.dense_layers == 1
    assert "read as deepseek_v3" in kimi.notes and kimi.weights_dtype == "fp8"


def test_counts_over_a_range_are_exact():
    scout = load_model("llama-4-scout")  # chunked layers 0-2, global 3, repeating
    assert scout.plan.counts(range(0, 10)) == {("chunked", "moe"): 8, ("global", "moe"): 2}
    assert scout.plan.counts(range(3, 4)) == {("global", "moe"): 1}
    assert scout.plan.counts(range(48, 60)) == {}
    gdn = dict(key_heads=2, value_heads=4, key_head_dim=16, value_head_dim=16, conv_kernel=4)
    spec = ModelSpec(**BASE | {"layers": 10_000}, layer_pattern="3 linear : 1 global", linear_attention=gdn)
    # layers 1..9,998: global at 3, 7, ..., 9,995
    assert spec.plan.counts(range(1, 9_999)) == {("linear", "dense"): 7_499, ("global", "dense"): 2_499}


def test_state_and_kv_bytes_per_kind_by_hand():
    q = load_model("qwen3-next-80b-a3b")
    # Gated DeltaNet: 32 value heads x (128 x 128) memory + conv window 3 x (2 x 16 x 128 + 32 x 128), bf16
    per_layer = (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2
    assert q.state_bytes_per_sequence_per_layer("linear") == per_layer
    assert q.state_bytes_per_sequence() == 36 * per_layer
    assert q.kv_bytes_per_token() == 12 * 2 * 2 * 256 * 2  # 12 full-attention layers, 2 KV heads of 256
    assert q.kv_bytes_per_token_per_layer("linear") == 0 and q.state_bytes_per_sequence_per_layer("global") == 0
    nemo = load_model("nemotron-h-8b")  # Mamba-2: 128 heads x 64 x 128 state + conv 3 x (8,192 + 2 x 8 x 128)
    assert nemo.state_bytes_per_sequence() == 24 * (128 * 64 * 128 + 3 * (8192 + 2 * 8 * 128)) * 2
    assert nemo.state_bytes_per_sequence("fp32") == 2 * nemo.state_bytes_per_sequence()


@pytest.mark.parametrize(("context", "chunked", "sliding"), [(1, 1, 1), (8192, 8192, 1024), (8193, 1, 1024),
                                                              (20_000, 20_000 - 16_384, 1024)])  # fmt: skip
def test_tokens_attended_per_kind(context, chunked, sliding):
    scout, gemma = load_model("llama-4-scout"), load_model("gemma-3-27b")
    assert scout.tokens_attended("chunked", context) == chunked  # its position within its 8,192-token chunk
    assert gemma.tokens_attended("sliding", context) == sliding
    assert gemma.tokens_attended("global", context) == context and scout.tokens_attended("linear", context) == 0
    # the whole-model mean over attention layers: 52 sliding and 10 global Gemma-3 layers
    assert gemma.attended_tokens(context) == pytest.approx((52 * sliding + 10 * context) / 62)


@given(st.lists(st.sampled_from(MIXERS), min_size=1, max_size=40))
def test_shortest_pattern_repeats_back_to_the_list(kinds):
    assert list(expand(shortest_pattern(kinds), len(kinds), "global", MIXERS)) == kinds


def test_pattern_remainder_takes_the_prefix():
    assert expand("2 sliding : 1 global", 7, "global", MIXERS) == ("sliding", "sliding", "global") * 2 + ("sliding",)
    with pytest.raises(ValueError, match="'2 slidng' is not 'COUNT KIND'"):
        parse_pattern("2 slidng : 1 global", MIXERS)


def test_the_older_sliding_window_form_is_the_same_model():
    old = ModelSpec(**BASE, sliding_window={"window_tokens": 16, "layers": "even"})
    new = ModelSpec(**BASE, layer_pattern="1 sliding : 1 global", window_tokens=16)
    assert old.plan.kinds == new.plan.kinds and old.sliding_window == new.sliding_window
    assert old.kv_cache_bytes(100, 3) == new.kv_cache_bytes(100, 3) == 3 * (4 * 16 + 4 * 100) * 2 * 2 * 16 * 2
    listed = ModelSpec(**BASE, sliding_window={"window_tokens": 16, "layers": [1, 3, 5, 7]})
    assert listed.sliding_window.layers == "odd" and listed.truncated(4).sliding_layers == 2


@pytest.mark.parametrize(
    ("keys", "needle"),
    [
        ({"layer_pattern": "3 chunked : 1 global"}, "layer_pattern has chunked layers: state chunk_tokens"),
        ({"window_tokens": 10}, "window_tokens is given but layer_pattern has no sliding layer"),
        ({"layer_pattern": ["global"] * 7}, "layer_pattern: a list needs one entry per layer: 8 entries (got 7)"),
        ({"layer_pattern": "3 chunky"}, "'3 chunky' is not 'COUNT KIND'"),
        ({"mlp_pattern": "1 dense : 1 moe"}, "mlp_pattern has moe layers: state moe"),
        ({"layer_pattern": "1 sliding", "window_tokens": 5, "sliding_window": {"window_tokens": 5}}, "one of them"),
    ],
)  # fmt: skip
def test_a_pattern_without_its_parameters_is_refused(keys, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        ModelSpec(**BASE | keys)


# the configs issue 23 names, as published (tests/assets/hf/new, gpt_oss.json): each imports and estimates
CONFIGS = [NEW / f"{name}.json" for name, _, _ in PUBLISHED] + [NEW / "kimi-k2.json", NEW.parent / "gpt_oss.json"]


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_published_config_imports_and_estimates(cli, path):
    r = cli("estimate", "-m", str(path), "-g", "h200", "--gpus", "8", "--prompt", "32768", "--format", "json")
    assert r.exit_code == 0, r.stderr
    data = r.json()
    assert data["expected"]["tpot_s"] > 0 and data["memory"]["kv_bytes_per_token_total"] > 0
    state = imported(path.stem).state_bytes_per_sequence() if path.parent == NEW else 0
    assert data["memory"]["state_bytes_per_sequence_total"] == state  # Qwen3-Next and Nemotron-H keep a state


def test_measure_refuses_what_its_torch_decoder_cannot_build_in_one_line(cli):
    r = cli("measure", "-m", "nemotron-h-8b", "--layers", "2", "--device", "cpu", "--prompt", "8", "--output", "2")
    assert r.exit_code == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "nemotron-h-8b: tokcost measure cannot build Mamba-2 state-space, MLP-only layers" in r.stderr
    r = cli("measure", "-m", "llama-4-scout", "--layers", "4", "--device", "cpu", "--prompt", "8", "--output", "2")
    assert r.exit_code == 2 and "llama-4-scout: tokcost measure cannot build chunked-attention layers" in r.stderr
    assert load_model("llama-4-scout").sliding_window is None  # the model itself reads as before


def test_measure_refuses_an_odd_rotary_width_before_torch_loads(cli, tmp_path):
    # the audit of 2026-12-05: head_dim 63 passed validation and estimate, then measure's rotary embedding failed
    # mid-run with torch's "size of tensor a (31) must match ... (32)"; a rotation turns pairs of values
    data = yaml.safe_load(cli("specs", "show", "llama-3.2-1b", "-f", "yaml").stdout)
    data.update(name="odd-head", head_dim=63)
    data.pop("params_total", None)
    path = tmp_path / "odd.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli("estimate", "-m", str(path), "-g", "h100-sxm").exit_code == 0  # a shape estimate prices
    r = cli("measure", "-m", str(path), "--device", "cpu", "--prompt", "8", "--output", "2")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "odd-head: tokcost measure cannot build an odd rotary width (head_dim 63)" in r.stderr


@pytest.mark.slow  # a fresh interpreter; the quick tier keeps test_startup's import checks of estimate
def test_estimate_start_up_imports_neither_transformers_nor_torch():
    code = (
        "import sys\nfrom tokcost.cli.app import main\n"
        "main(['estimate', '-m', 'gemma-3-27b', '-g', 'h100-sxm', '--format', 'json'])\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("[]")


def test_without_the_extra_a_config_json_names_it(tmp_path):
    path = tmp_path / "config.json"
    path.write_text((NEW.parent / "llama.json").read_text())
    code = (
        "import sys; sys.modules['transformers'] = None\nfrom tokcost.cli.app import main\n"
        f"raise SystemExit(main(['specs', 'show', {str(path)!r}]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert (
        out.stderr.strip()
        == f"error: {path}: reading a HuggingFace config.json needs transformers: pip install 'tokcost[hf]'"
    )


def test_the_params_warning_says_which_figure_is_larger():
    # a stated params_total 5% above the shapes' count reads "+5.0%": stated against shapes, as every warning says
    m = load_model("llama-3.2-1b")
    larger = m.model_copy(update={"params_total_stated": round(m.params_with_encoder * 1.05)})
    assert larger.params_mismatch == pytest.approx(0.05, abs=1e-6)
    smaller = m.model_copy(update={"params_total_stated": round(m.params_with_encoder * 0.95)})
    assert smaller.params_mismatch == pytest.approx(-0.05, abs=1e-6)
