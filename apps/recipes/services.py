from __future__ import annotations

from sparkdomain.capacity import CapacityStory, capacity_story
from sparkdomain.hf_config import ConfigImportError, parse_hf_config
from sparkdomain.planner import Plan, Severity, Verdict
from sparkdomain.planner.roofline import speculative_ceilings
from sparkdomain.spark import GB
from vllm_adapter.speculative import Speculation

VERDICT_CSS = {
    Verdict.FITS: "ok",
    Verdict.TIGHT: "warn",
    Verdict.DOES_NOT_FIT: "bad",
    Verdict.UNKNOWN: "unknown",
}
VERDICT_TEXT = {
    Verdict.FITS: "Fits",
    Verdict.TIGHT: "Tight",
    Verdict.DOES_NOT_FIT: "Does not fit",
    Verdict.UNKNOWN: "Cannot tell yet",
}


def _gb(value: float | None) -> str | None:
    return None if value is None else f"{value / GB:,.1f}"


def plan_context(result: Plan, speculation: Speculation | None = None) -> dict:
    """What the plan templates show: formatted numbers and the stacked memory bar; with the
    recipe's speculative decoding, the single-stream ceiling with it (× the mean acceptance
    length) and its physical bound (× 1 + k)."""
    spec_ceiling = spec_bound = None
    if speculation is not None and result.decode_ceiling_tps:
        spec_ceiling, spec_bound = speculative_ceilings(
            result.decode_ceiling_tps, speculation.mean_acceptance_length, speculation.num_tokens
        )
    physical = result.physical_bytes
    segments = [
        {
            "key": s.key,
            "label": s.label,
            "gb": _gb(s.bytes),
            "percent": round(s.bytes / physical * 100, 2) if physical else 0,
        }
        for s in result.budget()
    ]
    ratio = result.kv_usage_ratio
    return {
        "plan": result,
        "capacity": predicted_capacity(result),
        "verdict_css": VERDICT_CSS[result.verdict],
        "verdict_text": VERDICT_TEXT[result.verdict],
        "segments": segments,
        "numbers": {
            "weights": _gb(result.weights_bytes),
            "pool": _gb(result.pool_bytes),
            "kv_available": _gb(result.kv_available_bytes),
            "kv_needed": _gb(result.kv_needed_bytes),
            "headroom": _gb(result.headroom_bytes),
            "kv_per_token_kib": None
            if result.kv_bytes_per_token is None
            else f"{result.kv_bytes_per_token / 1024:,.1f}",
            "kv_per_seq_gb": _gb(result.kv_bytes_per_sequence),
            "state_mib": f"{result.state_bytes_per_sequence / 2**20:,.0f}"
            if result.state_bytes_per_sequence
            else None,
            "kv_usage_percent": None if ratio is None else f"{ratio * 100:.0f}",
            "tokens_fit": None if result.tokens_that_fit is None else f"{result.tokens_that_fit:,}",
            "ceiling": _tps(result.decode_ceiling_tps),
            "ceiling_full": _tps(result.decode_ceiling_full_context_tps),
            "ceiling_batch": _tps(result.decode_ceiling_batch_tps),
            "ceiling_spec": _tps(spec_ceiling),
            "ceiling_spec_bound": _tps(spec_bound),
        },
        "speculation": speculation,
        "dangers": [w for w in result.warnings if w.severity is Severity.DANGER],
        "cautions": [w for w in result.warnings if w.severity is not Severity.DANGER],
    }


def _tps(value: float | None) -> str | None:
    return None if value is None else f"{value:,.1f}"


def config_json_fields(config_text: str, quant_text: str) -> tuple[dict, list[str], str | None]:
    """Architecture fields from a pasted/uploaded config.json: (fields, notes, error)."""
    try:
        result = parse_hf_config(config_text, quant_text or None)
    except ConfigImportError as exc:
        return {}, [], str(exc)
    fields = dict(result.fields)
    notes = list(result.notes)
    if result.max_position_embeddings:
        fields["max_position_embeddings"] = result.max_position_embeddings
        notes.append(
            f"The model supports up to {result.max_position_embeddings:,} tokens of context "
            "(max_position_embeddings): what vLLM uses when max model len is blank; it may "
            "not exceed it."
        )
    return fields, notes, None


def predicted_capacity(result: Plan, **measured) -> CapacityStory:
    """The capacity story of a plan: planned memory, --max-num-seqs and the estimated
    latency bound — with whatever was measured (`memory_measured`, `memory_source`,
    `latency_measured`: sparkdomain.capacity.capacity_story) in place of its estimate.
    Plan alone: the wizard, the editor, a recipe nothing has measured."""
    return capacity_story(
        max_num_seqs=result.max_num_seqs,
        memory_planned=result.max_concurrency,
        latency_predicted=result.users_at_slo_rate,
        predicted_slo_tps=result.slo_tps,
        **measured,
    )
