"""Model specs by built-in name, tokcost YAML path, or HuggingFace config.json path."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from tokcost.catalog import builtin_names, locate
from tokcost.models.hf_import import from_hf_config, is_hf_config
from tokcost.models.spec import ModelSpec
from tokcost.spec_errors import validation_error


def load_model(name_or_path: str) -> ModelSpec:
    """A validated ModelSpec from `llama-3.1-8b`, `my-model.yaml` or `path/to/config.json`."""
    where, data = locate("models", name_or_path)
    if is_hf_config(data):
        return from_hf_config(data, where, name=_name_from_path(name_or_path))
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise validation_error(where, exc) from None


def _name_from_path(path: str) -> str:
    p = Path(path)
    return p.parent.name if p.name == "config.json" and p.parent.name else p.stem


def builtin_models() -> list[str]:
    """Names of the built-in models."""
    return builtin_names("models")
