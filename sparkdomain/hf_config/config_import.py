"""parse_hf_config(): config.json (plus hf_quant_config.json) into recipe fields and
notes, every message and note cut to a readable length."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparkdomain.bounded import clip
from sparkdomain.hf_config.architecture import (
    head_fields,
    layer_plan,
    mla_fields,
    moe_note,
    recurrent_state_mib,
)
from sparkdomain.hf_config.document import (
    ConfigImportError,
    as_mapping,
    language_model,
    load_object,
    whole_number,
)
from sparkdomain.hf_config.quantization import quantization_fields, torch_dtype

# What an import says is bounded like what it reads (a config may hold anything).
MESSAGE_CHARS = 500
NOTES_SHOWN = 40

PARAMS_NOTE = (
    "Total parameters are not in config.json: enter them (or the weight size in GB) yourself."
)


@dataclass
class HFConfigImport:
    """What a config.json says about a model, in recipe field names.

    `fields` holds only values the config determines; `notes` says in sentences what was
    inferred and what the user must still supply.
    """

    fields: dict[str, object] = field(default_factory=dict)
    max_position_embeddings: int | None = None
    notes: list[str] = field(default_factory=list)


def parse_hf_config(
    config: str | bytes | Mapping[str, object],
    quant_config: str | bytes | Mapping[str, object] | None = None,
) -> HFConfigImport:
    """Turn config.json (plus an optional hf_quant_config.json) into recipe fields.

    Raises ConfigImportError when the text is not a JSON object or has no layer count,
    because without layers nothing the planner needs can be derived, and when it is larger,
    deeper or has bigger numbers than a config.json can (sparkdomain/bounded.py). Every
    message and note is cut to a readable length.
    """
    try:
        result = _parse(config, quant_config)
    except ConfigImportError as exc:
        raise ConfigImportError(clip(str(exc), MESSAGE_CHARS)) from None
    notes = [clip(note, MESSAGE_CHARS) for note in result.notes[:NOTES_SHOWN]]
    if len(result.notes) > NOTES_SHOWN:
        notes.append(f"… and {len(result.notes) - NOTES_SHOWN} more notes.")
    result.notes = notes
    return result


def _parse(
    config: str | bytes | Mapping[str, object],
    quant_config: str | bytes | Mapping[str, object] | None,
) -> HFConfigImport:
    root = load_object(config, "config.json")
    hf_quant = load_object(quant_config, "hf_quant_config.json") if quant_config else None

    result = HFConfigImport()
    notes = result.notes
    lm, nested_key = language_model(root)
    if nested_key:
        notes.append(
            f"Read the language model from '{nested_key}' (a multimodal config); the vision "
            "or audio encoder is not described by these fields."
        )

    layers = layer_plan(lm, notes)
    fields_ = result.fields
    fields_["num_layers"] = layers.num_layers
    fields_["attention_layers"] = layers.attention
    fields_["sliding_window_layers"] = layers.sliding
    if not layers.sliding:
        fields_["sliding_window"] = 0
    elif layers.window:
        fields_["sliding_window"] = layers.window
    else:
        notes.append(
            f"{layers.sliding} layers use sliding-window attention but config.json gives no "
            "sliding_window: enter the window size yourself."
        )

    mla = whole_number(lm, "kv_lora_rank")
    if mla:
        mla_fields(lm, fields_, notes, mla)
    else:
        fields_["kv_lora_rank"] = 0
        fields_["qk_rope_head_dim"] = 0
        if layers.attention:
            head_fields(lm, fields_, notes)

    state = recurrent_state_mib(lm, layers, notes)
    if state is not None:
        fields_["recurrent_state_mib"] = state

    dtype = torch_dtype(lm, root, notes)
    qc = as_mapping(root.get("quantization_config")) or as_mapping(lm.get("quantization_config"))
    fields_.update(quantization_fields(qc, hf_quant, dtype, notes))

    result.max_position_embeddings = whole_number(lm, "max_position_embeddings") or whole_number(
        lm, "n_positions"
    )
    if result.max_position_embeddings is None:
        result.max_position_embeddings = whole_number(root, "max_position_embeddings")

    notes.append(PARAMS_NOTE)
    moe_note(lm, notes)
    return result
