"""Model specs by built-in name, tokcost YAML path, or HuggingFace config.json path."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tokcost.catalog import builtin_names, expect_kind, locate, spelling
from tokcost.models.spec import ModelSpec
from tokcost.spec_errors import validated


def load_model(name_or_path: str) -> ModelSpec:
    """A validated ModelSpec from `llama-3.1-8b`, `my-model.yaml` or `path/to/config.json`."""
    name_or_path = spelling(name_or_path)
    return model_from(*locate("models", name_or_path), name=name_from_path(name_or_path))


def model_from(where: str, data: dict[str, Any], name: str | None = None) -> ModelSpec:
    """A ModelSpec from a loaded file: a HF config is imported, a tokcost spec validated, a GPU spec refused."""
    if expect_kind(where, data, "models", "hf") == "hf":
        from tokcost.models.hf_import import from_hf_config  # lazy: the import path loads only for HF configs

        return from_hf_config(data, where, name=name)
    return validated(ModelSpec, where, data)


def name_from_path(path: str) -> str:
    """A model's default name: the folder of a `config.json` (any case), else the file's stem."""
    p = Path(path)
    if p.name.lower() != "config.json":
        return p.stem
    try:  # `config.json` in the working folder, or `../config.json`: the folder's own name (a link not followed)
        parent = Path(os.path.abspath(p)).parent
    except OSError:  # the working folder is gone: the path as given
        parent = p.parent
    # the HuggingFace cache keeps a model's files as models--ORG--NAME/snapshots/COMMIT/config.json: NAME, not COMMIT
    repo = parent.parent.parent.name if parent.parent.name == "snapshots" else ""
    if repo.startswith("models--") and repo.count("--") >= 2:
        return repo.split("--", 2)[2]
    return parent.name or p.stem


def builtin_models() -> list[str]:
    """Names of the built-in models."""
    return builtin_names("models")
