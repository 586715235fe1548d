"""Plots are views of the engine's numbers, rendered to real PNG and SVG files, and --plot on the commands."""

from __future__ import annotations

import html
import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tokcost.engine.estimate import estimate
from tokcost.engine.journey import journey
from tokcost.engine.sweep import sweep
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model

pytestmark = pytest.mark.slow  # not in the quick tier: matplotlib draws PNG and SVG pictures
pytest.importorskip("matplotlib")  # the plot extra; every other test runs without it

from tokcost import plots  # noqa: E402
from tokcost.plots.canvas import DPI  # noqa: E402
from tokcost.plots.journey import segments  # noqa: E402
from tokcost.plots.plan import FrontierPoint, frontier  # noqa: E402
from tokcost.plots.roofline import roofs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def e8b():
    return estimate(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload())


def svg_text(path: Path) -> str:
    """The SVG's text with XML escapes undone (text stays text: svg.fonttype none)."""
    return html.unescape(path.read_text())


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk, after checking the PNG signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_roofs_are_the_spec_peaks_with_equal_peaks_sharing_a_line():
    # h100-sxm.yaml: dense TFLOP/s fp64 67, fp32 67, tf32 494.7, bf16 989.4, fp16 989.4, fp8 1978.9, int8 1978.9
    assert roofs(load_gpu("h100-sxm")) == [
        ("fp64/fp32", pytest.approx(67.0e12)),
        ("tf32", pytest.approx(494.7e12)),
        ("bf16/fp16", pytest.approx(989.4e12)),
        ("fp8/int8", pytest.approx(1978.9e12)),
    ]


def test_kernel_points_are_the_engines_priced_stages(e8b):
    points, left_off = plots.kernel_points(e8b)
    priced = {("prefill", p.stage.name): p for p in e8b.ceiling.prefill.stages}
    priced |= {("decode step", p.stage.name): p for p in e8b.ceiling.decode_step.stages}
    bandwidth = e8b.gpu.bandwidth_bytes_per_s
    for point in points:
        p = priced[(point.phase, point.name)]
        assert point.intensity_flop_per_byte == pytest.approx(p.stage.flops / p.stage.bytes)
        assert point.ceiling_flops_per_s == pytest.approx(p.stage.count * p.stage.flops / p.seconds)
        assert point.expected_flops_per_s < point.ceiling_flops_per_s  # achievable fractions are below 1
        # nothing beats the roofline: min(peak, intensity x bandwidth)
        assert point.ceiling_flops_per_s <= min(989.4e12, point.intensity_flop_per_byte * bandwidth) * (1 + 1e-9)
    # a 16-bit weight is 2 B and takes one multiply-add (2 FLOP) per token: 1 FLOP/B at batch 1, memory-bound,
    # so the stage runs at exactly intensity x bandwidth
    qkv = next(p for p in points if p.phase == "decode step" and p.name == "QKV projection")
    assert qkv.intensity_flop_per_byte == pytest.approx(1.0, rel=0.01)
    assert qkv.ceiling_flops_per_s == pytest.approx(qkv.intensity_flop_per_byte * bandwidth)
    assert {"embedding lookup", "KV cache write"} <= set(left_off)  # no FLOPs: no place on the chart


def test_journey_segments_add_up_to_the_pass_times_on_four_families():
    cases = [
        ("llama-3.1-8b", Workload()),  # dense
        ("mixtral-8x7b", Workload(batch=16, tp=2)),  # MoE, with all-reduces
        ("deepseek-v3", Workload(batch=8, tp=8, weights_dtype="fp8", compute_dtype="fp8")),  # MLA + MoE
        ("gemma-2-9b", Workload(prompt_tokens=8192)),  # sliding-window layers
    ]
    for name, wl in cases:
        e = estimate(load_model(name), load_gpu("h100-sxm"), wl)
        j = journey(e)
        passes = [
            (j.prefill, e.ceiling.ttft_s, e.expected.ttft_s),
            (j.decode, e.ceiling.decode_step.seconds, e.expected.decode_step.seconds),
        ]
        for rows, ceiling_s, expected_s in passes:
            parts = segments(rows)
            assert sum(c for _, c, _ in parts) == pytest.approx(ceiling_s, rel=1e-9), name
            assert sum(x for _, _, x in parts) == pytest.approx(expected_s, rel=1e-9), name


def test_estimate_figure_png_has_the_size_asked_for(e8b, tmp_path):
    path = plots.save(plots.estimate_figure(e8b, journey=True), tmp_path / "roofline.png")
    assert png_size(path) == (18 * DPI, 7 * DPI)
    assert path.stat().st_size > 50_000  # a real picture, not an empty canvas


def test_roofline_and_journey_svg_carry_labelled_series_and_units(e8b, tmp_path):
    text = svg_text(plots.save(plots.estimate_figure(e8b, journey=True), tmp_path / "r.svg"))
    for label in [
        "arithmetic intensity (FLOP/B)",
        "achieved rate (TFLOP/s)",
        "HBM 3.35 TB/s",
        "bf16/fp16 989.4 TFLOP/s, ridge 295 FLOP/B",  # 989.4e12 / 3.35e12 = 295.3 FLOP/B
        "fp8/int8 1,978.9 TFLOP/s, ridge 591 FLOP/B",
        "MLP (gate, up, down)",
        "LM head",
        "filled: ceiling (datasheet)",
        "hollow: expected",
        "time (ms)",
        "one decode step at 1,151 cached tokens",  # mean context of 1,024 + (0..254)
        f"{e8b.ceiling.ttft_s * 1e3:,.3g} ms",  # the prefill bar adds up to TTFT
        f"{e8b.expected.ttft_s * 1e3:,.3g} ms",
        f"{e8b.ceiling.decode_step.seconds * 1e3:,.3g} ms",
    ]:
        assert label in text, label


def test_svg_is_the_same_file_each_time(e8b):
    assert plots.render(plots.roofline_figure(e8b), "svg") == plots.render(plots.roofline_figure(e8b), "svg")


def test_sweep_figure_marks_critical_batches_and_capacity(tmp_path):
    gpu = load_gpu("h100-sxm")
    points = sweep(load_model("llama-3.1-8b"), gpu, Workload(), batches=[1, 8, 64, 512], prompts=[1024, 8192])
    figure = plots.sweep_figure(points, capacity_bytes_per_gpu=gpu.memory_bytes)
    text = svg_text(plots.save(figure, tmp_path / "s.svg"))
    # the engine's critical batches for llama-3.1-8b on h100-sxm (the README's table: 317 and 100)
    assert points[0].critical_batch_compute == 317
    labels = [
        "TPOT (ms)",
        "decode tokens/s per GPU",
        "memory per GPU (GB)",
        "$/1M output tokens (expected)",
        "critical batch 317: matmuls compute-bound",
        "critical batch 100: KV reads > weight reads",
        f"capacity {gpu.memory_bytes / 1e9:,.1f} GB",
        "prompt 8,192 (ceiling)",
        "batch (concurrent sequences)",
        "prompt tokens (context)",
    ]
    for label in labels:
        assert label in text, label
    assert png_size(plots.save(plots.sweep_figure(points), tmp_path / "s.png")) == (12 * DPI, 8 * DPI)


def test_sweep_cost_panel_keeps_the_batches_that_fit():
    # batch 512 at 8,192 tokens does not fit on one H100 (no cost for it): its series still shows the batches that
    # do (the panel was blank: a series with one blank cost was dropped whole, README's docs/img/sweep.png too)
    points = sweep(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload(), batches=[1, 8, 64, 512],
                   prompts=[1024, 8192])  # fmt: skip
    cost_axes = next(a for a in plots.sweep_figure(points).axes if "1M output tokens" in a.get_ylabel())
    lines = {line.get_label(): list(line.get_xdata()) for line in cost_axes.get_lines()}
    fits = {prompt: [p.batch for p in points if p.prompt_tokens == prompt and p.fits] for prompt in (1024, 8192)}
    assert fits[8192] != [1, 8, 64, 512]  # the case: one batch at least does not fit
    for prompt in (1024, 8192):
        assert lines[f"prompt {prompt:,} (expected)"] == fits[prompt]


def test_compare_figure_bars_with_units_and_no_cost_where_it_does_not_fit(tmp_path):
    results = [estimate(load_model(m), load_gpu(g), Workload(batch=8)) for m in ("llama-3.1-8b", "llama-3.1-70b")
               for g in ("h100-sxm", "l40s")]  # fmt: skip
    assert not results[-1].memory.fits  # 70B in 16 bits does not fit one 48 GB L40S
    text = svg_text(plots.save(plots.compare_figure(results), tmp_path / "c.svg"))
    labels = ["time to first token (ms)", "time per output token (ms)", "decode tokens/s (replica)",
              "$/1M output tokens", "(does not fit)", "n/a", "ceiling (datasheet)", "expected", "1x l40s"]  # fmt: skip
    for label in labels:
        assert label in text, label


def test_pareto_frontier_keeps_only_configurations_nothing_beats():
    # (latency, cost): (1, 5) and (2, 3) and (4, 1) trade off; (3, 4) is beaten by (2, 3) on both
    assert frontier([(3, 4), (1, 5), (4, 1), (2, 3)]) == [(1, 5), (2, 3), (4, 1)]


def test_plan_figure_marks_the_chosen_configuration(tmp_path):
    points = [FrontierPoint("a", 2.0, 0.020, 0.5), FrontierPoint("b", 1.0, 0.040, 0.9, chosen=True),
              FrontierPoint("c", 3.0, 0.050, 1.0), FrontierPoint("d", 0.5, 0.090, 2.0, meets_slo=False),
              FrontierPoint("e", None, None, None, meets_slo=False)]  # fmt: skip
    text = svg_text(plots.save(plots.plan_figure(points), tmp_path / "p.svg"))
    for label in ["Pareto frontier", "chosen: b", "p90 TPOT (ms)", "p90 TTFT (ms)", "misses an SLO"]:
        assert label in text, label
    # every point meets the SLOs: no legend entry for a miss; costs within one decade ($4-$30): the minor ticks
    # read in dollars as the major ones do (matplotlib wrote 3x10^1 beside $10)
    meeting = [FrontierPoint(n, c, t, t * 10) for n, c, t in (("a", 4.0, 0.02), ("b", 9.0, 0.015), ("c", 30.0, 0.01))]
    text = svg_text(plots.save(plots.plan_figure(meeting), tmp_path / "q.svg"))
    assert "misses an SLO" not in text and "$30" in text and "10^" not in text and "\\times" not in text


def test_plan_figure_ticks_and_slo_lines_keep_the_decimals_their_spacing_needs(tmp_path):
    """Latency ticks 2.5 ms apart read 192.5 (not 192, then 195); a sub-millisecond SLO reads 0.500 ms, not 0."""
    points = [FrontierPoint(n, c, t, f) for n, c, t, f in
              (("a", 4.0, 0.0004, 0.190), ("b", 9.0, 0.0006, 0.2), ("c", 30.0, 0.0009, 0.21))]  # fmt: skip
    figure = plots.plan_figure(points, slos={"tpot": 0.0005, "ttft": 0.2})
    tpot, ttft = figure.axes[:2]
    figure.canvas.draw()
    ttft_ticks = [t.get_text() for t in ttft.get_xticklabels() if t.get_text()]
    tpot_ticks = [t.get_text() for t in tpot.get_xticklabels() if t.get_text()]
    assert len(set(ttft_ticks)) == len(ttft_ticks) and "192.5" in ttft_ticks, ttft_ticks
    assert len(set(tpot_ticks)) == len(tpot_ticks) and all(t != "0" for t in tpot_ticks[1:]), tpot_ticks
    text = svg_text(plots.save(figure, tmp_path / "s.svg"))
    assert "p90 TPOT SLO 0.500 ms" in text and "p90 TTFT SLO 200.0 ms" in text
    wide = plots.plan_figure([FrontierPoint("a", 4.0, 0.03, 1.0), FrontierPoint("b", 9.0, 0.3, 14.0)])
    wide.canvas.draw()
    labels = [t.get_text() for t in wide.axes[1].get_xticklabels() if t.get_text()]
    assert "10,000" in labels and not any(t.isdigit() and len(t) > 3 for t in labels), labels  # grouped as printed


def test_cli_plot_writes_each_picture_and_leaves_the_json_alone(cli, tmp_path):
    base = ["estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-f", "json"]
    plain = cli(*base)
    with_plot = cli(*base, "--journey", "--plot", str(tmp_path / "e.png"))
    assert with_plot.exit_code == 0, with_plot.stderr
    assert with_plot.json() | {"journey": None} == plain.json() | {"journey": None}
    assert png_size(tmp_path / "e.png") == (18 * DPI, 7 * DPI)
    runs = [
        ("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,16,256", "--plot", str(tmp_path / "s.png")),
        ("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm,h200", "--plot", str(tmp_path / "c.svg")),
    ]
    for args in runs:
        result = cli(*args)
        assert result.exit_code == 0, result.stderr
    assert png_size(tmp_path / "s.png")[0] == 12 * DPI
    assert "time per output token (ms)" in svg_text(tmp_path / "c.svg")


@pytest.mark.parametrize(
    ("name", "message"),
    [("r.jpg", "--plot: 'r.jpg' must end in .png or .svg"), ("missing/r.png", "does not exist")],
)
def test_cli_plot_refuses_a_bad_destination_before_any_work(cli, tmp_path, name, message):
    result = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--plot", str(tmp_path / name))
    assert result.exit_code == 2
    assert result.stdout == ""  # refused before the estimate ran
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "command",
    [
        ("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm"),
        ("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm"),
        ("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,2"),
        ("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--rate", "1", "--tp", "1"),
    ],  # fmt: skip
)
def test_cli_plot_never_overwrites_a_users_file_without_force(cli, tmp_path, command):
    mine = tmp_path / "mine.svg"
    mine.write_text("my notes")
    refused = cli(*command, "--plot", str(mine))
    assert refused.exit_code == 2 and refused.stdout == ""  # refused before any work
    assert "already exists; pass --force to replace it" in refused.stderr
    assert mine.read_text() == "my notes"
    replaced = cli(*command, "--plot", str(mine), "--force")  # --force after --plot: read first all the same
    assert replaced.exit_code == 0, replaced.stderr
    assert mine.read_text().startswith("<?xml")


def test_cli_plot_without_matplotlib_is_one_line_naming_the_install(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra were not installed
    result = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--plot", str(tmp_path / "s.png"))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --plot: matplotlib is not installed; pip install")
    assert ".[plot]" in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "s.png").exists()


def test_commands_without_plot_never_import_matplotlib():
    code = (
        "import sys, io, contextlib\n"
        "from tokcost.cli.app import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['estimate', '-m', 'llama-3.1-8b', '-g', 'h100-sxm', '-f', 'json']) == 0\n"
        "import tokcost.plots\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, env=env,
                         check=True, cwd=ROOT)  # fmt: skip
    assert json.loads(out.stdout) == []


def test_plan_figure_labels_a_dense_cluster_without_one_label_on_another():
    # the headline plan's TTFT panel (the audit of 2026-12-05): labels placed by an estimate of the panel, with the
    # SLO line's room left out of the x axis, were drawn on each other and beside the wrong dots
    ttft_cost = [(190, 72.0), (250, 72.0), (197, 62.0), (258, 62.0), (200, 47.0), (280, 38.0), (420, 64.0),
                 (430, 130.0), (470, 37.0), (850, 62.0), (670, 3000.0), (680, 1500.0)]  # fmt: skip
    points = [FrontierPoint(f"gpu{i} TP{2 ** (i % 4)} bf16", cost, 0.04, ms / 1e3, chosen=i == 5)
              for i, (ms, cost) in enumerate(ttft_cost)]  # fmt: skip
    figure = plots.plan_figure(points, slos={"ttft": 1.0})
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    ttft = figure.axes[1]
    boxes = [t.get_window_extent(renderer) for t in ttft.texts]
    assert len(boxes) == len(points)
    overlaps = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if a.overlaps(b)]
    assert overlaps == []


def test_plan_figure_labels_every_point_and_ticks_a_wide_cost_axis_in_dollars():
    # 22 configurations from $28 to $800 an hour: 12 were labelled (a frontier point among the rest), and the log
    # axis had one tick ($100)
    from tokcost.plots.plan import label_spots

    points = [FrontierPoint(f"gpu{i} TP{i % 4 + 1} fp8", 28.0 * 1.17**i, 0.015 + 0.001 * i, 0.15 + 0.01 * (i % 7),
                            chosen=i == 0) for i in range(22)]  # fmt: skip
    figure = plots.plan_figure(points)
    figure.canvas.draw()
    for ax in figure.axes[:2]:
        labels = [t.get_text() for t in ax.texts]
        assert sorted(labels) == sorted(p.label for p in points)  # each point once
        ticks = [t.get_text().replace("\\$", "$") for t in ax.get_yticklabels() if t.get_text()]
        assert {"$50", "$100", "$200", "$500"} <= set(ticks), ticks
    # spread-out points: the chosen spot of each label overlaps no other label
    apart = [(FrontierPoint(f"p{i}", 1.0 + i, 0.01, 0.1), 10.0 * i, 1.0 + i) for i in range(6)]
    spots = label_spots(apart, set(), log_y=True)
    assert [s[3] for s in spots] == [(4, 3, "left")] * 6
    # a search of every GPU: 80 points keep LABELLED labels, the frontier and the chosen point among them, and a
    # label near the panel's left edge sits to the right of its point
    from tokcost.plots.plan import LABELLED

    many = [(FrontierPoint(f"cfg{i}", 1.0, 0.01, 0.1, chosen=i == 3), float(i % 9), 1.0 + i) for i in range(80)]
    edge = {(0.0, 1.0), (1.0, 2.0)}
    spots = label_spots(many, edge, log_y=True)
    assert len(spots) <= LABELLED and {"cfg0", "cfg1", "cfg3"} <= {p.label for p, *_ in spots}
    assert all(spot[2] == "left" for p, x, _, spot in spots if x == 0.0)  # a right-aligned label would leave the panel
    # a neighbour's dot just above-right of a point: its label goes below-right, clear of the dot (labels had been
    # placed against other labels only, and sat on neighbours' dots)
    near = [(FrontierPoint("aaaaaa", 1.0, 0.01, 0.1), 0.0, 1.0), (FrontierPoint("b", 1.0, 0.01, 0.1), 0.333, 1.108),
            (FrontierPoint("c", 1.0, 0.01, 0.1), 10.0, 100.0)]  # fmt: skip
    assert label_spots(near, set(), log_y=True)[0][3] == (4, -9, "left")
    # two points on one spot: the second label goes to the other side
    same = [(FrontierPoint("aaaa", 1.0, 0.01, 0.1), 5.0, 2.0), (FrontierPoint("bbbb", 1.0, 0.01, 0.1), 5.0, 2.0),
            (FrontierPoint("cccc", 1.0, 0.01, 0.1), 9.0, 4.0)]  # fmt: skip
    assert [s[3] for s in label_spots(same, set(), log_y=True)][:2] == [(4, 3, "left"), (-4, -9, "right")]


def test_a_label_goes_where_it_is_nearer_its_own_dot_than_its_neighbours():
    # an audit: two rows at one $/hour, dots 3.4 ms apart, had their labels swapped (each label spanned the other's
    # dot). Where a free spot inside the panel keeps a label nearer its own dot than any other, it is taken: the left
    # dot's label to its left, the right dot's to its right
    from tokcost.plots.plan import LABEL_SPOTS, Geometry, _box, _gap, label_spots

    pair = [(FrontierPoint("h100-sxm TP2 bf16", 7.56, 0.020, 0.1), 20.0, 7.56),
            (FrontierPoint("h100-sxm TP1 bf16", 7.56, 0.0234, 0.1), 23.4, 7.56),
            (FrontierPoint("l40s TP8 bf16", 47.0, 0.0207, 0.1), 20.7, 47.0)]  # fmt: skip

    def where(x: float, y: float) -> tuple[float, float]:  # a panel of 0-42 ms and $7-$51, y logarithmic
        return x / 42, math.log(y / 7) / math.log(51 / 7)

    g = Geometry(where=where)
    dots = {p.label: where(x, y) for p, x, y in pair}
    placed = {p.label: spot for p, _, _, spot in label_spots(pair, set(), log_y=True, geometry=g)}
    assert placed["h100-sxm TP2 bf16"][2] == "right" and placed["h100-sxm TP1 bf16"][2] == "left"
    for label, spot in placed.items():
        assert spot in LABEL_SPOTS
        box = _box(*dots[label], g.width(label), spot, g)
        assert all(_gap(box, dots[label]) <= _gap(box, d) for other, d in dots.items() if other != label), label


def test_compare_figure_names_the_formats_where_two_bar_groups_differ_only_by_them():
    # an audit: compare --weights bf16,fp8 drew two groups both labelled "llama-3.1-8b 1x h100-sxm"
    from tokcost.engine.estimate import estimate
    from tokcost.engine.workload import Workload
    from tokcost.hardware.library import load_gpu
    from tokcost.models.library import load_model

    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    pair = [estimate(model, gpu, Workload(weights_dtype=w)) for w in ("bf16", "fp8")]
    figure = plots.compare_figure(pair)
    labels = [t.get_text() for t in figure.axes[-1].get_xticklabels()]
    assert len(set(labels)) == 2 and "bf16/bf16/bf16" in labels[0] and "fp8/bf16/fp8" in labels[1]
    alone = plots.compare_figure(pair[:1])
    assert "bf16/" not in alone.axes[-1].get_xticklabels()[0].get_text()  # one format: nothing to tell apart
