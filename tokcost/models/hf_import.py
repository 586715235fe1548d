"""HuggingFace `config.json` -> ModelSpec through transformers' own configuration classes (the `hf` extra).

transformers' AutoConfig classes know every architecture's keys, defaults and `layer_types`; tokcost reads
their normalized attributes on one path for every family, counts the parameters itself (models/counts.py),
and adds only what a config does not say (models/hf_arch.py). A multimodal config's decoder is its
`text_config`; its vision tower is counted apart (`encoder_params`) and never read by decode. Nothing is
downloaded: the config is the file the user gave, and no model code runs (no trust_remote_code).
Keys of the wrong type are refused before transformers sees them (models/hf_keys.py).
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from pydantic import ValidationError

from tokcost.errors import SpecError
from tokcost.models.hf_arch import FACTS, READERS, TOWERS, Facts, encoder_params
from tokcost.models.hf_keys import FROM_SPEC, REQUIRED, check_types
from tokcost.models.hf_quant import shipped
from tokcost.models.layers import shortest_pattern
from tokcost.models.spec import DEFAULTED_NOTE, ModelSpec
from tokcost.spec_errors import validation_error

EXTRA = "reading a HuggingFace config.json needs transformers: pip install 'tokcost[hf]'"
TESTED = (*FACTS, *TOWERS)  # model types whose counts tests hold equal to transformers' own
# DeepSeek-V3.2's indexed_attention: its sparse attention (index_topk, index_n_heads, index_head_dim)
_LAYER_TYPES = {"full_attention": "global", "attention": "global", "sliding_attention": "sliding",
                "chunked_attention": "chunked", "linear_attention": "linear", "mamba": "mamba",
                "indexed_attention": "sparse"}  # fmt: skip
_SECTIONS = {
    "MoeSpec": "moe",
    "MlaSpec": "mla",
    "GatedDeltaNetSpec": "linear_attention",
    "MambaSpec": "mamba",
    "SparseAttentionSpec": "sparse_attention",
}


def _transformers(where: str) -> Any:
    try:
        import transformers
        from transformers.models.auto import configuration_auto, modeling_auto
    except ImportError:
        raise SpecError(where, EXTRA) from None
    return transformers, configuration_auto.CONFIG_MAPPING, modeling_auto


def _resolve_type(data: dict[str, Any], where: str, mapping: Any, auto: Any, version: str) -> tuple[str, str]:
    """(the model_type transformers reads, a note) for a decoder; a remote-code type by its `architectures`."""
    decoders = {**auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, **auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES}
    model_type = data.get("model_type")
    note = ""
    if isinstance(model_type, str) and model_type not in mapping:  # remote code (Kimi-K2's kimi_k2)
        names = [a for a in data.get("architectures") or [] if isinstance(a, str)]
        # the model types whose causal LM is the named class, the one whose name the class starts with first
        known = sorted((t for a in names for t, cls in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items() if cls == a),
                       key=lambda t: not names[0].lower().startswith(t.replace("_", "")))  # fmt: skip
        if known:
            note = f"model_type {model_type!r} is remote code; read as {known[0]}, the architecture it names"
            model_type = known[0]
    if not isinstance(model_type, str) or model_type not in decoders:  # a list or a number is no model type
        what = "missing" if model_type is None else f"unsupported ({model_type!r:.40})"
        shown = ", ".join(t for t in ("llama", "mistral", "qwen3", "gemma3", "deepseek_v3") if t in decoders)
        raise SpecError(where, f"{what}; supported: the {len(decoders)} decoder model types transformers "
                               f"{version} knows ({shown}, ...)", field="model_type")  # fmt: skip
    # an encoder's checkpoint (BERT's BertForMaskedLM, RoBERTa's): its type has a causal-LM class too, but what it
    # names generates no tokens
    listed = data.get("architectures")
    if listed is not None and not (isinstance(listed, list) and all(isinstance(a, str) for a in listed)):
        raise SpecError(where, f"a list of class names, as transformers writes it (got {listed!r:.60})",
                        field="architectures")  # fmt: skip
    named = [_one_line(a) or repr(a) for a in listed or []]  # each on one line: the error is one line
    heads = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")
    if named and not any(a.endswith(heads) for a in named):
        raise SpecError(where, f"{', '.join(named)} is not a decoder that generates tokens (tokcost prices "
                               "*ForCausalLM and *ForConditionalGeneration checkpoints)",
                        field="architectures")  # fmt: skip
    return model_type, note


def _said(exc: Exception) -> str:
    """What transformers said, on one line: its first sentence (Gemma-4's goes on for four), at most 300 characters."""
    return " ".join(str(exc).split()).split(". ")[0][:300] or type(exc).__name__


def _read_config(data: dict[str, Any], model_type: str, where: str, mapping: Any, version: str) -> Any:
    """transformers' configuration object for `data`, its warnings silenced; errors as one line."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    # dtypes and quantization are read by hf_quant.py, never by transformers (which would need torch for them)
    ours = ("torch_dtype", "dtype", "quantization_config")
    keys = {k: v for k, v in data.items() if k not in ours}
    if isinstance(keys.get("text_config"), dict):
        keys["text_config"] = {k: v for k, v in keys["text_config"].items() if k not in ours}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return mapping[model_type].from_dict({**keys, "model_type": model_type})
    except Exception as exc:  # a config class's own check (any exception type): one line, its words
        raise SpecError(where, f"transformers {version} cannot read it: {_said(exc)}") from None
    finally:
        hf_logging.set_verbosity(level)


def _layer_kinds(text: Any, where: str, prefix: str) -> tuple[list[str], list[str] | None]:
    """(mixer per layer, MLP per layer or None when every layer has one) from transformers' `layer_types`."""
    n, types = text.num_hidden_layers, getattr(text, "layer_types", None)
    window = getattr(text, "sliding_window", None)
    if types is None:  # Mistral, Phi-3: a window, when set, applies to every layer
        sliding = bool(window) and getattr(text, "use_sliding_window", True) is not False
        return ["sliding" if sliding else "global"] * n, None
    _refuse_bad_layer_types(types, n, where, prefix)
    ssm = "mamba" if getattr(text, "mamba_num_heads", None) else "linear"  # Nemotron-H calls Mamba-2 linear
    mixers = [{"linear": ssm, "sliding": "sliding" if window else "global"}.get(k, k) for k in
              (_LAYER_TYPES.get(t, "none") for t in types)]  # fmt: skip
    if "mlp" not in types and "moe" not in types:
        return mixers, None
    # block types (Nemotron-H): each layer is one mixer or one MLP
    return mixers, ["dense" if t == "mlp" else "moe" if t == "moe" else "none" for t in types]


# decoder families whose layers tokcost has no kernels for, refused by name before a field they fill their own way
# is read as if it were Llama's (Falcon-H1's layer_types, Gemma-3n's per-layer widths)
UNMODELLED = {
    "falcon_h1": "every layer runs attention and a Mamba-2 mixer side by side",
    "gemma3n_text": "per-layer embeddings, AltUp and LAuReL blocks, and MLP widths that change per layer",
    "minimax": "lightning attention (a linear attention) in most layers, beside softmax attention",
}


def _refuse_unmodelled(types: tuple[Any, ...], where: str) -> None:
    for model_type in types:
        reason = UNMODELLED.get(model_type) if isinstance(model_type, str) else None
        if reason is not None:
            raise SpecError(where, f"{model_type}: {reason}; not modelled yet", field="model_type")


def _refuse_unknown_state_layers(text: Any, where: str, prefix: str) -> None:
    """transformers calls every state-space mixer `linear_attention`; tokcost reads two: Gated DeltaNet (its
    linear_num_key_heads, Qwen3-Next) and Nemotron-H's Mamba-2 (mamba_num_heads). Any other is refused here,
    before a key it does not have is reported missing (Falcon-Mamba has no attention heads)."""
    types = getattr(text, "layer_types", None)
    if not isinstance(types, list) or "linear_attention" not in types:
        return
    if getattr(text, "linear_num_key_heads", None) or getattr(text, "mamba_num_heads", None):
        return
    raise SpecError(where, f"{text.model_type}'s state-space layers (Mamba-1, as in Jamba and Falcon-Mamba, or a "
                           "Mamba-2 variant other than Nemotron-H's) are not modelled yet; tokcost reads Gated "
                           "DeltaNet (Qwen3-Next) and Nemotron-H's Mamba-2", field=prefix + "layer_types")  # fmt: skip


def _refuse_narrow_values(text: Any, where: str, prefix: str) -> None:
    """Values of another width than the keys (v_head_dim beside head_dim, outside MLA) or a sliding layer's own KV
    heads (MiMo-V2-Flash: 128-wide values, twice the KV heads in its sliding layers) are not shapes tokcost prices;
    read as the keys' they would misstate the KV cache (MiMo-V2-Flash: 147,456 B a token against 222,720)."""
    if getattr(text, "kv_lora_rank", None):
        return
    v, k = getattr(text, "v_head_dim", None), getattr(text, "head_dim", None)
    if isinstance(v, int) and isinstance(k, int) and v != k:
        raise SpecError(where, f"values narrower or wider than the keys (v_head_dim {v}, head_dim {k}) outside MLA "
                               "are not modelled yet", field=prefix + "v_head_dim")  # fmt: skip
    swa = getattr(text, "swa_num_key_value_heads", None)
    if isinstance(swa, int) and swa != getattr(text, "num_key_value_heads", swa):
        raise SpecError(where, f"sliding layers with KV heads of their own (swa_num_key_value_heads {swa}) are not "
                               "modelled yet", field=prefix + "swa_num_key_value_heads")  # fmt: skip


def _check_layer_types(raw: dict[str, Any], where: str, prefix: str) -> None:
    """A stated `layer_types` names one known kind per layer (transformers' own check says less)."""
    types, n = raw.get("layer_types"), raw.get("num_hidden_layers")
    if types is None or not isinstance(n, int) or isinstance(n, bool):
        return
    _refuse_bad_layer_types(types, n, where, prefix)


def _refuse_bad_layer_types(types: Any, n: int, where: str, prefix: str) -> None:
    """One known kind per layer, or the one line naming the first entry that is not (or the length)."""
    names = (*_LAYER_TYPES, "mlp", "moe")
    if isinstance(types, list) and len(types) == n and all(t in names for t in types):
        return
    bad = next((i for i, x in enumerate(types) if x not in names), None) if isinstance(types, list) else None
    got = (f"{types[bad]!r:.40} at layer {bad}" if bad is not None and len(types) == n else
           f"a list of {len(types)}" if isinstance(types, list) else f"{types!r:.40}")  # fmt: skip
    raise SpecError(where, f"must be a list of {n} entries (one per layer), each one of {', '.join(names)} "
                           f"(got {got})", field=prefix + "layer_types")  # fmt: skip


def _mlp_kinds(text: Any, n: int) -> list[str]:
    """Dense or MoE per layer: Llama-4's moe_layers, ERNIE's start/end/interval, DeepSeek's first_k_dense_replace,
    Qwen's sparse step."""
    if not _experts(text):
        return ["dense"] * n
    kinds = getattr(text, "mlp_layer_types", None)  # transformers' own per-layer list where a class states one
    if isinstance(kinds, list) and len(kinds) == n and set(kinds) <= {"dense", "sparse", "moe"}:
        return ["dense" if k == "dense" else "moe" for k in kinds]  # (MiMo-V2-Flash's first layer dense)
    listed = getattr(text, "moe_layers", None)
    if isinstance(listed, list):
        return ["moe" if i in set(listed) else "dense" for i in range(n)]
    start = getattr(text, "moe_layer_start_index", None)
    if isinstance(start, int):  # ERNIE-4.5: every interval-th layer from start to end (transformers' decoder layer)
        end = getattr(text, "moe_layer_end_index", -1)
        end = n - 1 if end is None or end == -1 else end
        every = getattr(text, "moe_layer_interval", 1) or 1
        return ["moe" if start <= i <= end and (i + 1) % every == 0 else "dense" for i in range(n)]
    first = getattr(text, "first_k_dense_replace", 0) or 0
    step = getattr(text, "decoder_sparse_step", 1) or 1
    only = set(getattr(text, "mlp_only_layers", None) or [])
    return ["moe" if i >= first and (i + 1) % step == 0 and i not in only else "dense" for i in range(n)]


def _refuse_layers_outside(text: Any, n: int, where: str, prefix: str) -> None:
    """A layer list (Qwen's mlp_only_layers, Llama-4's moe_layers) names layers 0..n-1 only."""
    for key in ("mlp_only_layers", "moe_layers"):
        listed = getattr(text, key, None)
        outside = [i for i in listed if not isinstance(i, int) or not 0 <= i < n] if isinstance(listed, list) else []
        if outside:
            raise SpecError(where, f"layer {outside[0]!r:.20} is outside 0..{n - 1} (the model has {n} layers)",
                            field=prefix + key)  # fmt: skip


def _experts(text: Any) -> int | None:
    return next((getattr(text, k) for k in ("num_local_experts", "num_experts", "n_routed_experts")
                 if getattr(text, k, None)), None)  # fmt: skip


def _as_pattern(kinds: list[str], default: str) -> str | list[str] | None:
    """None when every layer is `default`; a repeating pattern when one repeats; else the per-layer list."""
    if all(k == default for k in kinds):
        return None
    pattern = shortest_pattern(kinds)
    period = sum(int(term.split()[0]) for term in pattern.split(":"))
    return pattern if 2 * period <= len(kinds) else kinds


def _moe(text: Any, facts: Facts) -> dict[str, Any]:
    # 0 (Qwen3-Coder): none; Nemotron-H names it moe_shared_expert_intermediate_size
    shared_width = (getattr(text, "shared_expert_intermediate_size", None)
                    or getattr(text, "moe_shared_expert_intermediate_size", None) or None)  # fmt: skip
    named = getattr(text, "n_shared_experts", None) or getattr(text, "moe_num_shared_experts", None)  # ERNIE's name
    shared = facts.shared_experts or named or (1 if shared_width else 0)
    moe = {
        "experts": _experts(text), "experts_per_token": getattr(text, "num_experts_per_tok", None),
        "expert_intermediate_size": getattr(text, "moe_intermediate_size", None) or text.intermediate_size,
        "shared_experts": shared, "shared_expert_intermediate_size": shared_width if shared else None,
        "router_bias": facts.router_bias, "expert_bias": facts.expert_bias,
        "shared_expert_gate": facts.shared_expert_gate and bool(shared),
    }  # fmt: skip
    return moe


def _mixer_fields(text: Any, mixers: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "sliding" in mixers:
        out["window_tokens"] = text.sliding_window
    if "chunked" in mixers:
        out["chunk_tokens"] = text.attention_chunk_size
    if "sparse" in mixers:
        out["sparse_attention"] = {"top_k_tokens": text.index_topk, "index_heads": text.index_n_heads,
                                   "index_head_dim": text.index_head_dim}  # fmt: skip
    for section in ("linear_attention", "mamba"):
        if section in mixers or section == "linear_attention" and "linear" in mixers:
            keys = [k for k, (cls, _) in FROM_SPEC.items() if _SECTIONS.get(cls.__name__) == section]
            values = {FROM_SPEC[k][1]: getattr(text, k, None) for k in keys}
            fields = FROM_SPEC[keys[0]][0].model_fields  # a key the config leaves unset takes the field's default
            out[section] = {f: v for f, v in values.items() if v is not None or fields[f].is_required()}
    return out


def from_hf_config(data: dict[str, Any], where: str, name: str | None = None) -> ModelSpec:
    """A ModelSpec from a parsed config.json; unsupported types and bad values raise SpecError naming the key."""
    transformers, mapping, auto = _transformers(where)
    model_type, note = _resolve_type(data, where, mapping, auto, transformers.__version__)
    raw_text = data.get("text_config") if isinstance(data.get("text_config"), dict) else None
    prefix = "text_config." if raw_text is not None else ""
    _refuse_unmodelled((data.get("model_type"), (raw_text or {}).get("model_type")), where)
    _check_layer_types(raw_text or data, where, prefix)
    check_types(data, where)
    if raw_text is not None:
        check_types(raw_text, where, prefix)
    config = _read_config(data, model_type, where, mapping, transformers.__version__)
    try:
        return _from_config(data, config, model_type, note, raw_text, prefix, where, name)
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - transformers' class for an architecture tokcost reads no other way
        # an attribute tokcost reads that this architecture's class names otherwise or not at all (Bloom's and MPT's
        # context, Gemma-4's per-layer head_dim): one line, not a traceback
        raise SpecError(
            where,
            f"{model_type}: tokcost cannot read this architecture's config ({_said(exc)}); it reads "
            f"decoders with Llama's keys or their known variants: write a spec YAML by hand "
            f"(tokcost specs show llama-3.1-8b is one)",
            field="model_type",
        ) from None


def _from_config(data: dict[str, Any], config: Any, model_type: str, note: str | None, raw_text: dict[str, Any] | None,
                 prefix: str, where: str, name: str | None) -> ModelSpec:  # fmt: skip
    """from_hf_config's reading of transformers' configuration object."""
    text = config.get_text_config(decoder=True)
    if not hasattr(text, "model_type"):  # a text model's type over a vision model's sections: its class leaves them raw
        arch = ", ".join(map(str, data.get("architectures") or [])) or "the model"
        raise SpecError(where, f"{model_type!r} is a text model's type, but the file has a text_config (a vision "
                               f"model's sections); give the type {arch} names at the top level, or the text_config "
                               f"alone", field="model_type")  # fmt: skip
    _refuse_unknown_state_layers(text, where, prefix)
    _refuse_narrow_values(text, where, prefix)
    if getattr(text, "cross_attention_layers", None):  # Llama-3.2-Vision: not self-attention, not a KV per token
        raise SpecError(where, "cross-attention layers (to the image's tokens, cached once per sequence) are not "
                               "modelled yet", field=prefix + "cross_attention_layers")  # fmt: skip
    aliases = getattr(type(text), "attribute_map", {})
    # a top-level shape key left out is refused (a cut file is no model); a text_config may leave its shape to its
    # class, as llava-hf's do (Vicuna-7B is LlamaConfig's defaults): those defaults are used, and noted below
    missing = [key for key in REQUIRED if not {key, aliases.get(key)} & (raw_text or data).keys()]
    if missing and raw_text is None:
        raise SpecError(where, "required key is missing", field=missing[0])
    label = _one_line(name) if name is not None else _clean_name(data.get("_name_or_path"))  # a name given stays whole
    spec = _spec(text, where, prefix, label, model_type)
    spec["tied_embeddings"] = _tied(data, raw_text, text)
    spec["encoder_params"], tower_note = encoder_params(config)
    notes = [n for n in (note, tower_note, spec.pop("facts_note"), spec.pop("width_note")) if n]
    shared = [t for t in (getattr(text, "indexer_types", None) or []) if t == "shared"]
    if shared:  # GLM-5.2's index sharing: a shared layer reuses an earlier layer's top k and runs no indexer
        notes.append(f"{len(shared)} of {text.num_hidden_layers} sparse layers reuse another layer's top-k selection "
                     "(indexer_types shared), and tokcost runs an indexer in every sparse layer: its weights, cost "
                     "and index keys are an upper bound")  # fmt: skip
    # a shape key the file leaves out (or sets to null) takes its class's default: say which
    given = {k for k, v in (raw_text or data).items() if v is not None}
    used = (*missing, *(DEFAULTED if spec.get("moe") else DEFAULTED[:-1]))  # an expert's width only in an MoE
    defaulted = [f"{key} {getattr(text, key)}" for key in used
                 if not {key, aliases.get(key)} & given and getattr(text, key, None) is not None]  # fmt: skip
    if defaulted:
        notes.append(f"{DEFAULTED_NOTE} {model_type}: {', '.join(defaulted)}")
    keys = _error_keys(prefix, raw_text or data)
    if spec["intermediate_size"] is None:  # GPT-2's family (n_inner, ungated): a width under no name tokcost reads
        raise SpecError(where, f"{model_type} states no intermediate_size, the MLP width tokcost reads (its MLP is not "
                               "a layout tokcost counts from this config); write a spec YAML by hand (tokcost specs "
                               "show llama-3.1-8b is one)", field=prefix + "intermediate_size")  # fmt: skip
    model = _validated({**spec, "notes": "; ".join(notes)}, where, keys)  # shapes first: formats need counts
    # a composite (vision-language) save may state the text model's dtype or quantization in its text_config only
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else {}
    keys_of_text = {k: text[k] for k in ("torch_dtype", "dtype", "quantization_config") if k in text}
    precision = {**keys_of_text, **data} if keys_of_text else data  # the top level's own keys win
    formats = shipped(precision, where, model.hidden_size, moe=model.moe is not None, layers=model.layers)
    if "expert_dtype" in formats:
        spec["moe"] = {**spec["moe"], "expert_dtype": formats.pop("expert_dtype")}
    notes += [formats.pop("notes")] if "notes" in formats else []
    if formats.get("dtype") == "fp32":  # stored at fp32, served at 16 bits (vLLM's --dtype auto: FP16)
        formats["dtype"] = "bf16"  # weights, KV, embedding and LM head as a server holds them
        notes.append("stored at fp32, priced at 16 bits (bf16: fp16 has the same bytes and peaks) as serving engines "
                     "load it (vLLM's --dtype auto takes an fp32 checkpoint at 16 bits), and dtype: fp32 in an "
                     "imported spec prices fp32")  # fmt: skip
    return _validated({**spec, **formats, "notes": "; ".join(notes)}, where, keys)


# shape keys a config may leave out, whose class default then sets a count (a hand-written or cut file)
DEFAULTED = ("intermediate_size", "vocab_size", "max_position_embeddings", "num_key_value_heads",
             "moe_intermediate_size")  # fmt: skip


def _tied(data: dict[str, Any], raw_text: dict[str, Any] | None, text: Any) -> bool:
    """Whether the LM head is the embedding: the top level's word first (transformers ties by the model's own
    config), then the decoder section's, then its config class's default; a class without one does not tie."""
    for stated in (data.get("tie_word_embeddings"), (raw_text or {}).get("tie_word_embeddings")):
        if isinstance(stated, bool):
            return stated
    return getattr(text, "tie_word_embeddings", None) is True


def _spec(text: Any, where: str, prefix: str, name: str | None, model_type: str) -> dict[str, Any]:
    """ModelSpec fields from the decoder's normalized config attributes and its architecture's facts."""
    facts = FACTS.get(text.model_type, Facts())
    n = text.num_hidden_layers
    mixers, blocks = _layer_kinds(text, where, prefix)
    if not blocks:
        _refuse_layers_outside(text, n, where, prefix)
    mlps = blocks or _mlp_kinds(text, n)
    bias = bool(getattr(text, facts.bias_key, False))
    mla = getattr(text, "kv_lora_rank", None)
    spec: dict[str, Any] = {
        "name": name or model_type,
        "source": where.encode("utf-8", "backslashreplace").decode()[:2000],  # a path's undecodable bytes as \udcxx
        "layers": n, "hidden_size": text.hidden_size, "attention_heads": text.num_attention_heads,
        "kv_heads": getattr(text, "num_key_value_heads", None) or text.num_attention_heads,
        "head_dim": None if mla else getattr(text, "head_dim", None),
        "intermediate_size": getattr(text, "intermediate_size_mlp", None) or getattr(text, "intermediate_size", None),
        "vocab_size": text.vocab_size, "max_context": text.max_position_embeddings,
        "attention_bias": bias if facts.qkv_bias is None else facts.qkv_bias,
        "output_bias": bias if facts.output_bias is None else facts.output_bias,
        "qk_norm": facts.qk_norm or getattr(text, "qk_layernorm", False) is True,  # Phi's optional q/k LayerNorms
        "post_norms": facts.post_norms, "attention_sinks": facts.attention_sinks,
        "attention_gate": facts.attention_gate, "mlp_gated": facts.mlp_gated,
        "mlp_bias": facts.mlp_bias if isinstance(facts.mlp_bias, bool) else getattr(text, facts.mlp_bias, None) is True,
        "norm_bias": facts.norm_bias,
        "shared_norm": facts.shared_norm, "lm_head_bias": facts.lm_head_bias,
        "facts_note": "" if text.model_type in FACTS else
        f"{text.model_type}: counted with Llama's layout (tokcost knows no extra weights of this architecture)",
    }  # fmt: skip
    reader = READERS.get(text.model_type)
    spec |= reader(text) if reader else {}
    if mla:
        spec["kv_heads"] = text.num_attention_heads  # MLA caches one latent per token; kv heads play no part
        spec["mla"] = {"kv_lora_rank": mla, "rope_head_dim": text.qk_rope_head_dim, "q_lora_rank": text.q_lora_rank,
                       "nope_head_dim": text.qk_nope_head_dim, "v_head_dim": text.v_head_dim}  # fmt: skip
    first = getattr(text, "first_k_dense_replace", None)
    if _experts(text) and isinstance(first, int) and first > n:
        raise SpecError(where, f"{prefix}first_k_dense_replace ({first}) exceeds {prefix}num_hidden_layers ({n})")
    # experts declared, and the layer rules route none of the layers to them (a block pattern, as Nemotron-H's, says
    # per layer what it is; its class default of 8 experts is not a claim of the checkpoint)
    if _experts(text) and not blocks and "moe" not in mlps:
        keys = [k for k in ("moe_layers", "first_k_dense_replace", "decoder_sparse_step", "mlp_only_layers")
                if getattr(text, k, None) not in (None, [], 0, 1)]  # fmt: skip
        named = " and ".join(keys) or "its layer rules"
        verb = "leaves" if len(keys) == 1 else "leave"
        raise SpecError(where, f"the config has {_experts(text)} experts, but {named} {verb} none of its {n} layers "
                               "an MoE layer", field=prefix + (keys[0] if keys else ""))  # fmt: skip
    if "moe" in mlps and getattr(text, "moe_latent_size", None):
        # Nemotron-3 Super: the router's input is projected to a latent width where every expert works, then back
        raise SpecError(where, f"latent MoE (experts working in a {text.moe_latent_size}-wide latent space between "
                               "two projections) is not modelled yet; write a spec YAML by hand (tokcost specs "
                               "show qwen3-30b-a3b is an MoE one)", field=prefix + "moe_latent_size")  # fmt: skip
    if "moe" in mlps:
        spec["moe"] = _moe(text, facts)
        if "dense" in mlps:
            spec["moe"]["dense_intermediate_size"] = spec["intermediate_size"]
        dense = mlps.index("moe")
        if all(m == "moe" for m in mlps[dense:]) and "none" not in mlps:
            spec["moe"]["dense_layers"] = dense  # dense layers first (DeepSeek-V3): the engine prices these
        else:
            spec["mlp_pattern"] = _as_pattern(mlps, "dense")
    elif blocks:
        spec["mlp_pattern"] = _as_pattern(mlps, "dense")
    spec["width_note"] = ""
    if spec["intermediate_size"] is None and "moe" in spec and "dense" not in mlps:
        # every MLP routed (Qwen3.5's MoE states no dense width): no layer reads a dense width, the experts' stands in
        spec["intermediate_size"] = spec["moe"]["expert_intermediate_size"]
        spec["width_note"] = (f"no dense MLP layer and no intermediate_size: intermediate_size shows the experts' "
                              f"width ({spec['intermediate_size']}), which no dense layer uses")  # fmt: skip
    spec["layer_pattern"] = _as_pattern(mixers, "global")
    return spec | _mixer_fields(text, set(mixers))


def _error_keys(prefix: str, raw: dict[str, Any]) -> dict[str, str]:
    """ModelSpec key (dotted for a section) -> the config.json key its value came from (one `raw` has first)."""
    keys = {"dtype": "torch_dtype", "layer_pattern": prefix + "layer_types", "mlp_pattern": prefix + "layer_types",
            "window_tokens": prefix + "sliding_window"}  # fmt: skip
    for key, (cls, field) in FROM_SPEC.items():
        section = _SECTIONS.get(cls.__name__)
        ours = f"{section}.{field}" if section else {"head_dim_stated": "head_dim"}.get(field, field)
        if ours not in keys or key in raw:
            keys[ours] = prefix + key
    keys |= dict.fromkeys(("weights_dtype", "compute_dtype", "moe.expert_dtype"), "quantization_config")
    return keys


def _clean_name(value: Any) -> str | None:
    """A config's own `_name_or_path` as a name: the last part of its path or repo id, on one line."""
    return _one_line(value.rstrip("/").rpartition("/")[2]) if isinstance(value, str) else None


def _one_line(value: str) -> str | None:
    """A name on one line: whitespace runs as one space, printable characters only, at most 200."""
    flat = " ".join(value.split())
    return "".join(c for c in flat if c.isprintable())[:200] or None


def _validated(spec: dict[str, Any], where: str, keys: dict[str, str]) -> ModelSpec:
    """ModelSpec.model_validate, with the error's key and message in config.json's names."""
    try:
        return ModelSpec.model_validate(spec)
    except ValidationError as exc:
        error = validation_error(where, exc, ModelSpec)
        # a message names keys without their prefix (moe.experts -> experts); top-level keys take precedence
        ordered = sorted(keys.items(), key=lambda k: "." not in k[0])
        names = {ours.rpartition(".")[2]: theirs.rpartition(".")[2] for ours, theirs in ordered}
        # "kv_heads (5) must divide attention_heads (32)" -> "num_key_value_heads (5) ... num_attention_heads (32)"
        message = re.sub(r"\b(?:moe\.|mla\.)?([a-z_]+)(?= \(\d)", lambda m: names.get(m[1], m[0]), error.message)
        raise SpecError(where, message, field=keys.get(error.field or "")) from None  # no such key: none named
