from django.http import HttpRequest
from ninja import Router

from apps.accounts.roles import VIEW_PANEL
from apps.api.auth import require
from apps.api.errors import ERRORS, ApiError
from apps.api.routes.common import form_errors, get_or_422
from apps.api.schemas import PlanIn, PlanOut
from apps.hosts.models import Host
from apps.recipes.forms import PlanInputForm
from sparkdomain import planner

router = Router(tags=["planner"])


def _num(value):
    return None if value is None else float(value)


def plan_out(result: planner.Plan) -> dict:
    return {
        "verdict": result.verdict.value,
        "weights_bytes": result.weights_bytes,
        "active_weight_bytes": result.active_weight_bytes,
        "kv_bytes_per_token": result.kv_bytes_per_token,
        "kv_bytes_per_sequence": result.kv_bytes_per_sequence,
        "state_bytes_per_sequence": result.state_bytes_per_sequence,
        "pool_bytes": result.pool_bytes,
        "headroom_bytes": result.headroom_bytes,
        "kv_available_bytes": result.kv_available_bytes,
        "kv_needed_bytes": result.kv_needed_bytes,
        "kv_usage_ratio": result.kv_usage_ratio,
        "tokens_that_fit": result.tokens_that_fit,
        "max_concurrency": result.max_concurrency,
        "largest_safe_utilization": _num(result.largest_safe_utilization),
        "min_utilization_to_fit": _num(result.min_utilization_to_fit),
        "recommended_utilization": _num(result.recommended_utilization),
        "recommendation_reason": result.recommendation_reason,
        "decode_ceiling_tps": result.decode_ceiling_tps,
        "decode_ceiling_full_context_tps": result.decode_ceiling_full_context_tps,
        "decode_ceiling_batch_tps": result.decode_ceiling_batch_tps,
        "physical_bytes": result.physical_bytes,
        "budget": [{"key": s.key, "label": s.label, "bytes": s.bytes} for s in result.budget()],
        "warnings": [
            {"code": w.code, "severity": w.severity.value, "message": w.message}
            for w in result.warnings
        ],
        "unknowns": list(result.unknowns),
    }


@router.post("/planner", response={200: PlanOut, **ERRORS}, summary="Plan memory and speed")
def plan(request: HttpRequest, payload: PlanIn):
    """The config wizard's planner without saving a recipe: weights, KV cache, reserves,
    verdict, users that fit, decode ceiling from bandwidth, warnings. Utilization above 0.90
    is refused (422) like everywhere else."""
    require(request, VIEW_PANEL)
    values = payload.model_dump(exclude_none=True)
    host_name = values.pop("host", None)
    spec = (
        get_or_422(Host.objects.all(), "host", "host", name=host_name).spec() if host_name else None
    )
    form = PlanInputForm(data=values)
    if not form.is_valid():
        raise ApiError(422, "The plan's inputs are invalid.", fields=form_errors(form))
    arch, flags = form.to_planner()
    try:
        result = planner.plan(arch, flags, spec)
    except ValueError as exc:
        raise ApiError(422, str(exc)) from None
    return plan_out(result)
