"""`tokcost specs`: list, show, validate and import model and GPU specs."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
import yaml

from tokcost.catalog import builtin_names, expect_kind, kind_of, kind_of_name, looks_like_path, shown, suggest
from tokcost.cli.common import check_yaml_destination
from tokcost.cli.options import ForceOpt, dash_is_stdout
from tokcost.cli.render import Table, print_json, print_tables
from tokcost.eras import builtin_files, load_file, split_spelling
from tokcost.errors import SpecError, TokcostError, UsageError
from tokcost.files import check_destination, load_mapping, write_new
from tokcost.hardware.library import gpu_from, load_gpu, load_network
from tokcost.hardware.spec import GpuSpec
from tokcost.models.hf_import import from_hf_config
from tokcost.models.library import load_model, model_from, name_from_path
from tokcost.models.spec import DEFAULTED_NOTE, ModelSpec
from tokcost.profiles import load_engine

app = typer.Typer(help="List, show, validate and import model and GPU specs.", no_args_is_help=True)


class Kind(str, Enum):
    """Which specs to list."""

    models = "models"
    gpus = "gpus"
    networks = "networks"
    engines = "engines"


KINDS = ("models", "gpus", "networks", "engines")


class ShowFormat(str, Enum):
    """Renderings of specs."""

    table = "table"
    json = "json"
    yaml = "yaml"


TEMPLATE_HEADER = """\
# tokcost {kind} spec {name!r}, as `tokcost specs show {name} -f yaml` prints it.
# A template for your own {kind}: save it as my-{kind}.yaml, edit the values, then run
#   tokcost specs validate my-{kind}.yaml && tokcost estimate {flag} my-{kind}.yaml
"""


def spec_yaml(kind: str, spec: Any) -> str:
    """The spec as YAML that loads back to the same spec: the file's keys, no derived counts, header comments."""
    if isinstance(spec, ModelSpec):
        body = spec.model_dump(by_alias=True, exclude_none=True)
        flag = "-g h100-sxm -m"
    else:
        # an engine's template is one era as a file of its own: the era's name is the file's (--engine FILE)
        # (and without the era a split runs as: a file of one era has no other to name)
        body = spec.model_dump(exclude_none=True, exclude={"era", "tensor_split_era"} if kind == "engine" else None)
        if isinstance(spec, GpuSpec) and "achievable" not in spec.model_fields_set:  # absent: expected = ceiling
            body.pop("achievable")
        flag = {"gpu": "-m llama-3.1-8b -g", "network": "-m llama-3.1-70b -g h100-sxm --tp 16 --network",
                "engine": "-m llama-3.1-8b -g h100-sxm --engine"}[kind]  # fmt: skip
    body = {"name": spec.name, **{k: v for k, v in body.items() if k != "name"}}
    era = getattr(spec, "era", None) if kind == "engine" else None
    shown = f"{spec.name}@{era}" if era and era != "main" else spec.name  # the era this file is, as spelled to show it
    header = TEMPLATE_HEADER.format(kind=kind, name=shown, flag=flag)
    if era and getattr(spec, "tensor_split_era", None):  # a file of one era has no other to run its split stages as
        header += (f"# In its engine's own file this era runs tensor-split stages as era {spec.tensor_split_era!r};\n"
                   "# a file of one era prices them as its own.\n")  # fmt: skip
    return header + yaml.safe_dump(body, sort_keys=False, allow_unicode=True, width=110)


def model_dict(m: ModelSpec) -> dict[str, Any]:
    """The YAML keys of a model spec plus its derived counts."""
    data = m.model_dump(by_alias=True, exclude_none=True)
    data["params_total_stated"] = data.pop("params_total", None)
    if m.mla is None:  # MLA's heads are the mla block's (q/k nope + rope, v): hidden / heads is no dimension of it
        data["head_dim"] = m.head_dim
    data.update(
        params_total=m.params_total,
        params_active=m.params_active,
        params_embedding=m.params_embedding,
        params_attention=m.params_attention,
        params_mlp=m.params_mlp,
        params_norms=m.params_norms,
        params_lm_head=m.params_lm_head,
        kv_bytes_per_token=_count(m.kv_bytes_per_token()),
    )
    return data


def _count(value: float) -> int | float:
    """A count of bytes or elements as an integer (131,072, not 131072.0) when it is one: a model's own dtypes
    are whole bytes; a sub-byte format's fractional bytes stay a number."""
    return int(value) if float(value).is_integer() else value


def _load_any(name_or_path: str) -> tuple[str, Any]:
    """A built-in spec of any kind by name (a model, GPU, network or engine), or a file whose keys say which kind
    of spec it is."""
    kind = kind_of_name(name_or_path)
    if kind is not None:
        loader = {"models": load_model, "gpus": load_gpu, "networks": load_network, "engines": load_engine}[kind]
        return kind.removesuffix("s"), loader(name_or_path)
    engine, era = split_spelling(name_or_path)
    if era is not None and kind_of_name(engine) == "engines":  # a built-in engine's era, as --engine spells it
        return "engine", load_engine(name_or_path)
    if era is not None and Path(engine).is_file():  # an engine file's era, as --engine spells it (mine.yaml@slow)
        return "engine", load_engine(name_or_path)
    if not looks_like_path(name_or_path):
        every = [name for kind in KINDS for name in builtin_names(kind)]
        hint, _ = suggest(every, name_or_path)
        raise SpecError(shown(name_or_path), f"not a built-in spec nor a file; {hint}see 'tokcost specs list'")
    data = load_mapping(Path(name_or_path))
    kind = kind_of(data)
    if kind == "gpus":
        return "gpu", gpu_from(name_or_path, data)
    if kind in ("networks", "engines"):  # their loaders take the path (a file of this kind is read once more)
        return kind.removesuffix("s"), {"networks": load_network, "engines": load_engine}[kind](name_or_path)
    return "model", model_from(name_or_path, data, name=name_from_path(name_or_path))


class ListFormat(str, Enum):
    """Renderings of the list (a YAML template is one spec's: specs show NAME -f yaml)."""

    table = "table"
    json = "json"


def shipped_format(m: ModelSpec) -> str:
    """A checkpoint's block-linear weight format as shipped, marked * where attention's or the experts' differ."""
    weights = m.weights_dtype or m.dtype
    experts = m.moe.expert_dtype if m.moe else None
    apart = {m.attention_dtype, experts} - {None, weights}
    return weights + ("*" if apart else "")


@app.command("list", epilog="Examples:\n  tokcost specs list --kind gpus\n  tokcost specs list -f json")
def list_specs(
    kind: Annotated[
        Optional[Kind], typer.Option("--kind", help="models, gpus, networks or engines (default: every kind).")
    ] = None,
    format: Annotated[ListFormat, typer.Option("--format", "-f", help="table or json.")] = ListFormat.table,
) -> None:
    """List built-in specs. Example: tokcost specs list --kind gpus"""
    kinds = [kind.value] if kind else list(KINDS)
    if format == ListFormat.json:
        out: dict[str, Any] = {k: builtin_names(k) for k in kinds if k != "engines"}  # type: ignore[arg-type]
        if "engines" in kinds:  # each engine's eras, the newest first named
            out["engines"] = {n: {"newest": f.newest, "eras": list(f.eras)} for n, f in builtin_files().items()}
        print_json(out)
        return
    tables = []
    if "models" in kinds:
        rows = []
        for name in builtin_names("models"):
            m = load_model(name)
            arch = "MoE" if m.moe else "dense"
            arch += " + MLA" if m.mla else ""
            arch += " + sparse attention" if m.sparse_attention else ""
            rows.append(
                [
                    name,
                    f"{m.params_total / 1e9:.2f}B",
                    f"{m.params_active / 1e9:.2f}B",
                    arch,
                    f"{m.max_context:,}",
                    shipped_format(m),
                ]
            )
        split = "* attention's or the experts' weights ship in another format (specs show NAME)"
        tables.append(Table("Models", ["name", "params", "active", "arch", "max context", "dtype"], rows,
                            notes=[split] if any(r[-1].endswith("*") for r in rows) else []))  # fmt: skip
    if "gpus" in kinds:
        rows = []
        for name in builtin_names("gpus"):
            g = load_gpu(name)
            peak = g.peak_tflops.get("bf16") or g.peak_tflops.get("fp16") or max(g.peak_tflops.values())
            rows.append(
                [
                    name,
                    f"{g.memory_gb:g} GB",
                    f"{g.memory_bandwidth_gb_s:,g} GB/s",
                    f"{peak:,g}",
                    f"{g.tdp_w:g} W" if g.tdp_w else "n/a",
                    "n/a" if g.price_per_hour_usd is None else f"${g.price_per_hour_usd:,.2f}/h",
                ]
            )
        tables.append(Table("GPUs", ["name", "memory", "bandwidth", "bf16 TFLOP/s (dense)", "TDP", "price"], rows))
    if "networks" in kinds:
        links = [load_network(name) for name in builtin_names("networks")]
        rows = [[n.name, n.kind, f"{n.gb_s:,g} GB/s", f"{n.latency_us:,g} us", f"{n.efficiency:g}"] for n in links]
        tables.append(Table("Networks (per GPU, per direction)", ["name", "kind", "bandwidth", "latency",
                                                                  "efficiency"], rows, wrap=("kind",)))  # fmt: skip
    if "engines" in kinds:
        tables.append(engines_table())
    print_tables(tables, "table")


def engines_table() -> Table:
    """Every built-in engine's eras: how to spell each (--engine name@era), the versions it covers, what it is."""
    rows = []
    for name, engine in builtin_files().items():
        for era, spec in engine.eras.items():
            spelled = (
                name if len(engine.eras) == 1 else f"{name}@{era}" + (" (default)" if era == engine.newest else "")
            )
            rows.append([spelled, engine.covers(era), spec.summary or "-"])
    return Table("Engines (--engine NAME or NAME@ERA; an era also by a version it covers, e.g. vllm@0.6.3)",
                 ["engine", "versions", "what it is"], rows, prose=True)  # fmt: skip


@app.command(
    "show",
    epilog="Examples:\n  tokcost specs show mixtral-8x7b\n  tokcost specs show h100-sxm -f yaml > my-gpu.yaml",
)
def show(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="Built-in model, GPU, network or engine; a spec YAML; a config.json.")
    ],
    format: Annotated[
        ShowFormat,
        typer.Option("--format", "-f", help="table, json (with derived counts) or yaml (a template that loads back)."),
    ] = ShowFormat.table,
) -> None:
    """Show every field of a spec, with derived counts. Example: tokcost specs show llama-3.1-8b"""
    kind, spec = _load_any(name)
    if format == ShowFormat.yaml:
        sys.stdout.write(spec_yaml(kind, spec))
        return
    data = model_dict(spec) if isinstance(spec, ModelSpec) else spec.model_dump()
    if format == ShowFormat.json:
        print_json(data)
        return
    rows = [[key, _cell(value)] for key, value in data.items()]
    notes = []
    if isinstance(spec, ModelSpec) and spec.params_mismatch is not None and abs(spec.params_mismatch) > 0.02:
        notes.append(f"warning: stated params_total differs from the shapes by {spec.params_mismatch:+.1%}")
    title = f"{kind} spec: {spec.name}"
    if kind == "engine" and spec.era:  # one era of a file of several: say which, and how to see the others
        title = f"engine spec: {spec.name}@{spec.era}"
        notes.append(_other_eras(name, spec.era))
    print_tables([Table(title, ["field", "value"], rows, notes, prose=True)], "table")


def _other_eras(name: str, shown_era: str) -> str:
    """'other eras: vllm@eager, vllm@v0 (tokcost specs show vllm@eager)' for the engine file `name` spells."""
    file = split_spelling(name)[0]
    engine = load_file(file)[1]
    others = [f"{engine.name}@{era}" for era in engine.eras if era != shown_era]
    return f"other eras: {', '.join(others)} (tokcost specs show {file}@ERA)"


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "-"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_cell(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value) or "-"
    text = " ".join(str(value).split())  # one line; other control characters shown escaped
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _engine_eras(path: Path) -> str | None:
    """'engine vllm: eras eager, v0, v1' for an engine's file of eras (a flat profile is judged by _load_any)."""
    if not looks_like_path(str(path)) or not path.is_file():
        return None
    data = load_mapping(path)
    if "eras" not in data and "newest" not in data:
        return None
    engine = load_file(str(path))[1]
    return f"engine {engine.name}: eras {', '.join(engine.eras)}"


@app.command("validate", epilog="Examples:\n  tokcost specs validate my-gpu.yaml my-model.yaml")
def validate(files: Annotated[list[Path], typer.Argument(metavar="FILE", help="Spec files to check.")]) -> None:
    """Check spec files: one line per file, OK or the error. Example: tokcost specs validate my-gpu.yaml"""
    failed = 0
    for path in files:
        try:
            other = _engine_eras(path)
            if other is not None:
                sys.stdout.write(f"{path}: OK ({other})\n")
                continue
            kind, spec = _load_any(str(path))
            extra = ""
            if isinstance(spec, ModelSpec) and spec.params_mismatch is not None and abs(spec.params_mismatch) > 0.02:
                extra = f" (warning: params_total differs from the shapes by {spec.params_mismatch:+.1%})"
            if isinstance(spec, ModelSpec):  # an HF config that leaves shape keys out: which defaults it took
                extra += "".join(f" (warning: {n})" for n in spec.notes.split("; ") if n.startswith(DEFAULTED_NOTE))
            sys.stdout.write(f"{path}: OK ({kind} {shown(spec.name, 200)}){extra}\n")
        except TokcostError as exc:
            failed += 1
            sys.stdout.write(f"{exc}\n")
    if failed:
        raise typer.Exit(2)


@app.command("import", epilog="Examples:\n  tokcost specs import path/to/config.json -o my-model.yaml")
def import_config(
    config: Annotated[Path, typer.Argument(metavar="CONFIG", help="A HuggingFace config.json.")],
    out: Annotated[
        Optional[Path],
        typer.Option("--out", "-o", help="Write the YAML here (default, or -: stdout).", callback=dash_is_stdout),
    ] = None,
    name: Annotated[
        Optional[str],
        typer.Option("--name", help="Name of the model (default: a config.json's folder, else the file's name)."),
    ] = None,
    force: ForceOpt = False,
) -> None:
    """Convert a HuggingFace config.json to a tokcost model YAML. Example: tokcost specs import config.json -o m.yaml"""
    data = load_mapping(config)
    if expect_kind(str(config), data, "hf", hint=False) is None:
        raise SpecError(str(config), "no model_type: not a HuggingFace config.json")
    if name is not None and not name.strip():
        raise UsageError("--name: give a name with at least one visible character")
    if force and out is None:
        raise UsageError("--force: replaces an existing --out file; give it with --out, or drop it")
    if out is not None:
        check_yaml_destination(out, "--out")
        check_destination(out, force=force)  # before the import's seconds (transformers), as at the write
    spec = from_hf_config(data, str(config), name=name or name_from_path(str(config)))
    body = spec.model_dump(by_alias=True, exclude_none=True)
    body = {"name": spec.name, **{k: v for k, v in body.items() if k != "name"}}
    # the path as a JSON string: a newline or odd character in a folder name cannot add a line to the YAML
    text = f"# imported by tokcost from {json.dumps(str(config))}\n" + yaml.safe_dump(body, sort_keys=False)
    for note in filter(None, spec.notes.split("; ")):  # what the count assumes, where the user reads it
        sys.stderr.write(f"note: {note}\n")
    if out is None:
        sys.stdout.write(text)
        return
    write_new(out, text, force=force)
    sys.stdout.write(f"wrote {out} ({spec.name}: {spec.params_total / 1e9:.2f}B params)\n")
