from django.http import HttpRequest
from ninja import Router

from apps.accounts.roles import VIEW_PANEL
from apps.api.auth import require
from apps.api.errors import ERRORS, ApiError
from apps.api.routes.common import form_errors, get_or_422
from apps.api.schemas import PlanIn, PlanOut, StartupPlanIn, StartupPlanOut
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


@router.post(
    "/planner/startup",
    response={200: StartupPlanOut, **ERRORS},
    summary="What vLLM will do with a command (spark plan)",
)
def startup_plan(request: HttpRequest, payload: StartupPlanIn):
    """`manage.py spark plan --json` over the API: vLLM's own start-up accounting for the
    exact `vllm serve` vector — "Model loading took", "Available KV cache memory", "GPU KV
    cache size", "Maximum concurrency" as that vLLM version prints them, whether it starts or
    the error it raises in its words — and the panel's verdict beside it. The model's
    config.json is the one given, else the one the panel stored (a download or `spark plan`
    keeps it); this call never downloads. Any utilization is predicted, above 0.90 too: the
    panel's rule is `panel_allows`."""
    import json

    from apps.api.plan_cli import MAX_CONFIG_BYTES, panel_verdict
    from apps.recipes.models import ModelFacts
    from vllm_adapter import contract as vllm_contract
    from vllm_adapter.startup import ModelConfigError, predict

    require(request, VIEW_PANEL)
    command = list(payload.command)
    if command[:2] != ["vllm", "serve"]:
        hint = 'Start with "vllm", "serve", then the model.'
        raise ApiError(422, 'The command must start with "vllm serve MODEL".',
                       fields={"command": [hint]})  # fmt: skip
    env = dict(payload.env or {})
    bad = [k for k in env if not (k.startswith("VLLM_") and k.replace("_", "").isalnum()
                                  and len(k) <= 64)]  # fmt: skip
    if bad or len(env) > 32:
        raise ApiError(422, "Only vLLM's own variables (VLLM_*), at most 32.",
                       fields={"env": [f"Not a vLLM variable: {', '.join(bad[:5])}"]})  # fmt: skip
    host = (get_or_422(Host.objects.all(), "host", "host", name=payload.host) if payload.host
            else Host.objects.default())  # fmt: skip
    config, checkpoint = payload.config, payload.checkpoint_gib
    notes = []
    if config is None:
        facts = ModelFacts.objects.filter(repo_id=command[2]).first()
        if facts is None:
            message = (
                f"The panel has not read {command[2]}'s config.json yet: give it "
                "as `config`, download the model once, or run `manage.py spark plan`."
            )
            raise ApiError(422, message, fields={"config": [message]})
        config = facts.config
        if checkpoint is None and facts.checkpoint_bytes:
            checkpoint = facts.checkpoint_bytes / (1 << 30)
        notes.append(
            f"config.json of {facts.repo_id} at {facts.commit[:12]} as the panel stored it"
        )
    elif len(json.dumps(config)) > MAX_CONFIG_BYTES:
        raise ApiError(422, "config is over 4 MiB.", fields={"config": ["Over 4 MiB."]})
    version = payload.vllm_version or (host.contract_version if host else
                                       vllm_contract.latest_version())  # fmt: skip
    total = payload.total_gib or (float(host.cuda_visible_gib) if host else 121.69)
    free = payload.free_gib
    if free is None and host is not None:
        free = host.free_gib() or None
    try:
        prediction = predict(config, command, vllm_version=version, total_gib=total,
                             free_gib=free, checkpoint_gib=checkpoint, env=env,
                             device=payload.device)  # fmt: skip
    except (ModelConfigError, ValueError) as exc:
        raise ApiError(422, str(exc)) from None
    prediction.notes[:0] = notes
    return {**prediction.as_dict(), **panel_verdict(prediction)}
