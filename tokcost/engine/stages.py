"""The kernels of one forward pass, in the order a token meets them, with the work each does on the busiest GPU.

The embedding lookup, then each layer kind's mixer (mixer_stages.py: attention over a KV cache, or a linear-
attention / state-space layer's state) and MLP (mlp_stages.py: dense or routed experts), counted per kind over a
pipeline stage's layers, then the final norm, LM head and sampling; a stage that is not the last hands its
activations to the next. Each kernel's work per occurrence is a Stage (kernels.py).

Every count is linear in the pass's features (features.py): the builders run on numbers for one point and on
linear forms to compile a configuration's kernels once (compiled.py), so the formulas are written only here and
in the builders this module calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokcost.engine.blocks import BlockKind, stage_kinds
from tokcost.engine.features import Features, FeatureSpace, N, Segment
from tokcost.engine.kernels import Kind, Op, Stage, collective, matmul, norm
from tokcost.engine.layout import Layout, stage_layer_ranges
from tokcost.engine.memory import LOGIT_BYTES  # logits are sampled in fp32
from tokcost.engine.mixer_stages import mixer_stages
from tokcost.engine.mlp_stages import mlp_stages
from tokcost.engine.workload import Precision
from tokcost.models.spec import ModelSpec

__all__ = ["Kind", "Op", "Segment", "Stage", "pass_stages", "pipeline_stages"]


def block_stages(
    model: ModelSpec, p: Precision, layout: Layout, f: Features[N], kind: BlockKind, count: int
) -> list[Stage[N]]:
    """The kernels of `count` layers of one kind, on the busiest GPU of their pipeline stage."""
    label = kind.label(model)
    return mixer_stages(model, p, layout, f, kind, label, count) + mlp_stages(model, p, layout, f, kind, label, count)


def head_stages(model: ModelSpec, p: Precision, layout: Layout, f: Features[N]) -> list[Stage[N]]:
    """Final norm, LM head (vocab split tp-way), the logits gathered whole, and sampling, for one row per sequence."""
    h, v, tp, rows = model.hidden_size, model.vocab_size, layout.vocab_tp, f.logit_rows
    # each TP rank holds the logits of its vocab slice; the sampler needs the whole vocabulary: vLLM's
    # LogitsProcessor._gather_logits gathers them (tensor_model_parallel_gather, or all_gather), TensorRT-LLM's LM
    # head is a ColumnLinear with gather_output; either way the receiving rank takes (n - 1)/n of rows x vocab
    stages: list[Stage[N]] = [
        norm("final norm", "", 1, rows, h, p.vectors, model.norm_vectors("final")),
        matmul(
            "LM head",
            "",
            1,
            v * h / tp,
            rows,
            p.embedding,
            p.activation_bytes,
            h,
            0.0,
            note=f"vocab x hidden, at {p.embedding}; logits only for each sequence's last token",
        ),
    ]
    if tp > 1 and layout.logits_gathered:
        note = "each rank's vocab slice of the logits, gathered whole for sampling"
        stages.append(
            collective("logits all-gather", "", 1, "all-gather", rows * v * p.activation_bytes, tp, note=note)
        )
    sampled = v / layout.sampled_share  # the whole vocabulary once gathered; a rank's share where each samples its own
    stages.append(
        Stage(
            "sampling",
            "",
            "memory",
            1,
            flops=5 * rows * sampled,
            bytes_read=rows * sampled * LOGIT_BYTES,
            bytes_written=rows * sampled * LOGIT_BYTES,
            note="logits written in fp32, then softmax / top-k over the vocabulary",
        )
    )
    return stages


def embedding_stage(model: ModelSpec, p: Precision, layout: Layout, f: Features[N]) -> Stage[N]:
    """Token ids look up rows of the embedding table: T rows read (at most the vocabulary), not the table."""
    h = model.hidden_size
    return Stage(
        "embedding lookup",
        "",
        "memory",
        1,
        bytes_read=f.embedding_rows * h * p.embedding_bytes / layout.vocab_tp,
        bytes_written=f.tokens_dp * h * p.activation_bytes,
        note="one row per token, vocab split tp-way" if layout.vocab_tp > 1 else "one row per token",
    )


def pass_stages(model: ModelSpec, p: Precision, layout: Layout, f: Features[N]) -> list[list[Stage[N]]]:
    """Every pipeline stage's kernels for one pass (microbatch) with features `f`, first stage first."""
    ranges = stage_layer_ranges(model.layers, layout.pp)
    out = []
    for i, layers in enumerate(ranges):
        stages = [embedding_stage(model, p, layout, f)] if i == 0 else []
        for kind, count in stage_kinds(model, layers).items():
            stages += block_stages(model, p, layout, f, kind, count)
        if i == len(ranges) - 1:
            stages += head_stages(model, p, layout, f)
        else:  # activations handed to the next stage, over the network when the two sit on different nodes
            payload = f.tokens_dp * model.hidden_size * p.activation_bytes
            hop = layout.hop_crosses_nodes(i)
            stages.append(collective("send to next stage", "", 1, "send/recv", payload, 2, crosses_nodes=hop))
        out.append(stages)
    return out


def pipeline_stages(
    model: ModelSpec, p: Precision, layout: Layout, segments: Sequence[Segment]
) -> list[list[Stage[float]]]:
    """Every pipeline stage's kernels for one pass (microbatch) over `segments`, at that point's numbers."""
    space = FeatureSpace.of(model, layout)
    return pass_stages(model, p, layout, space.named(space.vector(segments)))
