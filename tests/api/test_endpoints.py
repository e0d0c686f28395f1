"""Every endpoint, with the permissions of the pages and the one error shape."""

from decimal import Decimal

import pytest

from apps.benchmarks.models import J, Job, Result, Suite
from apps.recipes.models import Recipe
from apps.runs.models import Run, RunState
from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db

RECIPE = {
    "name": "API recipe",
    "model_id": "nvidia/Qwen3.5-35B-A3B-NVFP4",
    "gpu_memory_utilization": "0.80",
    "max_model_len": 8192,
    "max_num_seqs": 2,
    "extra_args": ["--load-format", "fastsafetensors"],
}


@pytest.fixture
def suite(db):
    return Suite.objects.create(
        name="api quick", scenarios=[{"name": "short", "prompt_tokens": 200, "output_tokens": 128}],
        repetitions=1, warmup_requests=1, sweep_levels=[1, 2], requests_per_level=2,
    )  # fmt: skip


def _job(suite, recipe, host, user, **fields) -> Job:
    from apps.benchmarks.selectors import suite_plan

    return Job.objects.create(suite=suite, recipe=recipe, host=host, queued_by=user,
                              plan=suite_plan(suite), **fields)  # fmt: skip


def _result(job, concurrency=1, decode=22.5, kind=Result.Kind.SWEEP) -> Result:
    return Result.objects.create(
        job=job, kind=kind, scenario=f"c{concurrency}", prompt_tokens=200, output_tokens=128,
        concurrency=concurrency, ok=2, ttft_p50_s=0.4, ttft_p95_s=0.5, ttft_p99_s=0.6,
        e2e_p50_s=6.0, decode_tps_p50=decode, prefill_tps_p50=900.0, output_tps=decode,
        request_rps=0.2, metrics={"tpot": {"p50": 0.044}, "itl": {"p50": 0.044}},
    )  # fmt: skip


# --- hosts ----------------------------------------------------------------------------------
def test_hosts_list_and_detail(member, sim_host, api_as):
    api = api_as(member)
    page = api.get("/hosts").data
    assert page["count"] == 1 and page["next_offset"] is None
    host = page["items"][0]
    assert host["name"] == sim_host.name and host["simulated"] is True
    assert host["memory"]["source"] == "panel" and host["memory"]["total_bytes"] > 100e9
    assert host["active_run"] is None and host["jobs_queued"] == 0
    assert host["agent"]["live"] is False
    assert api.get(f"/hosts/{sim_host.name}").data["name"] == sim_host.name
    assert_error(api.get("/hosts/nope"), 404, "not_found")


# --- recipes --------------------------------------------------------------------------------
def test_recipes_list_get_and_paginate(member, api_as):
    api = api_as(member)
    total = Recipe.objects.count()
    assert total >= 3  # the presets
    first = api.get("/recipes", limit=2).data
    assert first["count"] == total and len(first["items"]) == 2 and first["next_offset"] == 2
    rest = api.get("/recipes", limit=200, offset=2).data
    assert len(rest["items"]) == total - 2 and rest["next_offset"] is None
    slug = first["items"][0]["slug"]
    recipe = api.get(f"/recipes/{slug}").data
    assert recipe["gpu_memory_utilization"] <= 0.90
    assert recipe["plan"]["verdict"] in ("fits", "tight", "does-not-fit", "unknown")
    assert_error(api.get("/recipes/no-such-recipe"), 404)
    assert_error(api.get("/recipes", limit=0), 422, "invalid")
    assert_error(api.get("/recipes", limit=10_000), 422, "invalid")


def test_members_cannot_write_recipes(member, api_as):
    api = api_as(member)
    assert_error(api.post("/recipes", RECIPE), 403, "forbidden")
    # The role is checked before the body is read: invalid input is still a 403.
    assert_error(api.post("/recipes", {"wat": 1}), 403)
    assert_error(api.call("post", "/recipes", "{not json"), 403)
    slug = Recipe.objects.first().slug
    assert_error(api.patch(f"/recipes/{slug}", {"max_num_seqs": 3}), 403)
    assert_error(api.post("/recipes/import", {"yaml": "recipes: []"}), 403)
    assert not Recipe.objects.filter(name="API recipe").exists()


def test_operators_create_recipes_through_the_same_validation(operator, api_as):
    api = api_as(operator)
    response = api.post("/recipes", RECIPE)
    assert response.status_code == 201, response.data
    recipe = Recipe.objects.get(slug="api-recipe")
    assert recipe.created_by == operator and recipe.gpu_memory_utilization == Decimal("0.80")
    assert recipe.extra_args == ["--load-format", "fastsafetensors"]
    assert response.data["url"] == "/recipes/api-recipe/"
    # The same name again: the form's unique check, field by field.
    error = assert_error(api.post("/recipes", RECIPE), 422, "invalid")
    assert "name" in error["fields"]


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"gpu_memory_utilization": "0.95"}, "gpu_memory_utilization", "0.90"),
        ({"extra_args": ["--privileged"]}, "extra_args", "privileged"),
        ({"extra_args": ["--gpu-memory-utilization", "0.95"]}, "extra_args", ""),
        ({"model_id": "../../etc/passwd"}, "model_id", ""),
        ({"max_num_seqs": 0}, "max_num_seqs", ""),
        ({"max_model_len": "lots"}, "max_model_len", ""),
        ({"wat": 1}, "wat", ""),
    ],
)
def test_invalid_recipes_get_field_errors_and_nothing_is_saved(operator, api_as, change, field,
                                                               words):  # fmt: skip
    error = assert_error(api_as(operator).post("/recipes", RECIPE | change), 422, "invalid")
    assert field in error["fields"], error
    assert words in " ".join(error["fields"][field])
    assert not Recipe.objects.filter(name="API recipe").exists()


def test_patch_changes_only_what_is_sent_and_keeps_the_rules(operator, api_as):
    api = api_as(operator)
    api.post("/recipes", RECIPE)
    response = api.patch("/recipes/api-recipe", {"max_num_seqs": 4, "description": "team"})
    assert response.status_code == 200, response.data
    recipe = Recipe.objects.get(slug="api-recipe")
    assert (recipe.max_num_seqs, recipe.description, recipe.max_model_len) == (4, "team", 8192)
    assert recipe.extra_args == ["--load-format", "fastsafetensors"]
    error = assert_error(api.patch("/recipes/api-recipe", {"gpu_memory_utilization": 0.91}), 422)
    assert "gpu_memory_utilization" in error["fields"]
    recipe.refresh_from_db()
    assert recipe.gpu_memory_utilization == Decimal("0.80")
    assert_error(api.patch("/recipes/nope", {"max_num_seqs": 4}), 404)


def test_malformed_json_is_400(operator, api_as):
    error = assert_error(api_as(operator).call("post", "/recipes", "{not json"), 400)
    assert "parse" in error["message"]


YAML = """
sparkpanel: 1
recipes:
  - name: From YAML
    model_id: nvidia/Qwen3.5-35B-A3B-NVFP4
    gpu_memory_utilization: 0.7
    max_model_len: 4096
    max_num_seqs: 1
"""


def test_yaml_import_is_all_or_nothing(operator, api_as):
    api = api_as(operator)
    bad = (
        YAML
        + """  - name: Too greedy
    model_id: nvidia/Qwen3.5-35B-A3B-NVFP4
    gpu_memory_utilization: 0.95
    max_model_len: 4096
"""
    )
    error = assert_error(api.post("/recipes/import", {"yaml": bad}), 422)
    assert any("gpu_memory_utilization" in key for key in error["fields"]), error
    assert not Recipe.objects.filter(name="From YAML").exists()
    assert_error(api.post("/recipes/import", {"yaml": "a: [b"}), 422)
    done = api.post("/recipes/import", {"yaml": YAML})
    assert done.status_code == 200 and done.data["created"] == ["from-yaml"]
    again = api.post("/recipes/import", {"yaml": YAML})
    messages = [m for field in again.data["error"]["fields"].values() for m in field]
    assert "already exists" in " ".join(messages)
    replaced = api.post("/recipes/import", {"yaml": YAML, "replace": True})
    assert replaced.data["updated"] == ["from-yaml"]


# --- runs -----------------------------------------------------------------------------------
def test_members_cannot_start_or_stop_runs(member, sim_host, qwen, api_as):
    api = api_as(member)
    error = assert_error(api.post("/runs", {"recipe": qwen.slug, "host": sim_host.name}), 403)
    assert "role" in error["message"]
    assert not Run.objects.exists()
    run = Run.objects.create(recipe=qwen, host=sim_host, port=20001, image=qwen.image,
                             state=RunState.READY)  # fmt: skip
    assert_error(api.post(f"/runs/{run.pk}/stop"), 403)
    run.refresh_from_db()
    assert run.state == RunState.READY


def test_operators_start_and_stop_runs_and_a_busy_host_is_409(
    operator, sim_host, qwen, api_as, django_capture_on_commit_callbacks
):
    api = api_as(operator)
    with django_capture_on_commit_callbacks() as callbacks:
        response = api.post("/runs", {"recipe": qwen.slug, "host": sim_host.name})
    assert response.status_code == 201, response.data
    # The start task, sent to the host's queue on commit (once; the rest are live pushes).
    assert [c.__qualname__ for c in callbacks].count("run_start.<locals>.<lambda>") == 1
    run = response.data
    assert (run["state"], run["recipe"], run["host"], run["active"]) == (
        "queued", qwen.slug, sim_host.name, True)  # fmt: skip
    assert "--gpu-memory-utilization" in run["argv"]
    busy = assert_error(api.post("/runs", {"recipe": qwen.slug, "host": sim_host.name}), 409)
    assert busy["code"] == "host_busy" and "stop it first" in busy["message"]

    detail = api.get(f"/runs/{run['id']}").data
    assert detail["step"] and "log_tail" in detail and detail["percent"] == 0
    listed = api.get("/runs", host=sim_host.name, active="true").data
    assert [r["id"] for r in listed["items"]] == [run["id"]]
    assert api.get("/runs", active="false").data["count"] == 0

    stopped = api.post(f"/runs/{run['id']}/stop")
    assert stopped.status_code == 202 and stopped.data["state"] == "stopping"
    Run.objects.filter(pk=run["id"]).update(state=RunState.STOPPED)
    assert_error(api.post(f"/runs/{run['id']}/stop"), 409, "not_active")
    assert_error(api.post("/runs/999999/stop"), 404)


def test_run_start_validation(operator, sim_host, qwen, api_as):
    api = api_as(operator)
    assert_error(api.post("/runs", {"recipe": "nope", "host": sim_host.name}), 422)
    assert (
        "host"
        in assert_error(api.post("/runs", {"recipe": qwen.slug, "host": "nope"}), 422)["fields"]
    )
    assert_error(api.post("/runs", {"recipe": qwen.slug}), 422)
    sim_host.image_allowlist = ["example.org/other:*"]
    sim_host.save()
    error = assert_error(api.post("/runs", {"recipe": qwen.slug, "host": sim_host.name}), 422)
    assert error["code"] == "image_not_allowed"


def test_a_failed_run_shows_its_reason_and_log(member, sim_host, qwen, api_as):
    run = Run.objects.create(
        recipe=qwen, host=sim_host, port=20001, image=qwen.image, state=RunState.FAILED,
        failure_reason="out of memory while loading", failure_log="torch.OutOfMemoryError",
    )  # fmt: skip
    detail = api_as(member).get(f"/runs/{run.pk}").data
    assert detail["failure"]["reason"] == "out of memory while loading"
    assert "OutOfMemoryError" in detail["failure"]["log"]


# --- benchmark jobs -------------------------------------------------------------------------
def test_queue_a_job_and_follow_it(member, sim_host, qwen, suite, api_as):
    api = api_as(member)
    body = {"recipe": qwen.slug, "host": sim_host.name, "suite": suite.name, "note": "nightly"}
    response = api.post("/jobs", body)
    assert response.status_code == 201, response.data
    job = response.data
    assert (job["state"], job["position"], job["queued_by"], job["suite"]) == (
        "queued", 1, member.username, suite.name)  # fmt: skip
    detail = api.get(f"/jobs/{job['id']}").data
    assert detail["note"] == "nightly" and detail["results_url"].endswith("/results")
    assert api.get("/jobs", mine="true", active="true").data["count"] == 1
    assert api.get("/jobs", state="done").data["count"] == 0
    assert api.get("/hosts").data["items"][0]["jobs_queued"] == 1
    # Suite by id and the default suite.
    assert api.post("/jobs", body | {"suite": str(suite.pk)}).status_code == 201
    assert api.post("/jobs", {"recipe": qwen.slug, "host": sim_host.name}).status_code == 201
    assert "suite" in assert_error(api.post("/jobs", body | {"suite": "nope"}), 422)["fields"]
    assert "host" in assert_error(api.post("/jobs", body | {"host": "nope"}), 422)["fields"]
    assert_error(api.post("/jobs", body | {"note": "x" * 201}), 422)


def test_idempotency_key_queues_once(member, sim_host, qwen, suite, api_as):
    api = api_as(member)
    body = {"recipe": qwen.slug, "host": sim_host.name, "suite": suite.name}
    first = api.post("/jobs", body, **{"Idempotency-Key": "nightly-2026-11-29"})
    retry = api.post("/jobs", body, **{"Idempotency-Key": "nightly-2026-11-29"})
    assert (first.status_code, retry.status_code) == (201, 200)
    assert first.data["id"] == retry.data["id"] and Job.objects.count() == 1
    error = assert_error(
        api.post("/jobs", body | {"note": "other"}, **{"Idempotency-Key": "nightly-2026-11-29"}),
        422,
    )
    assert error["code"] == "idempotency_key_reused"
    assert api.post("/jobs", body, **{"Idempotency-Key": "another"}).status_code == 201
    assert Job.objects.count() == 2


def test_idempotency_keys_are_per_user(member, operator, sim_host, qwen, suite, api_as):
    body = {"recipe": qwen.slug, "host": sim_host.name, "suite": suite.name}
    mine = api_as(member).post("/jobs", body, **{"Idempotency-Key": "k"})
    theirs = api_as(operator).post("/jobs", body, **{"Idempotency-Key": "k"})
    assert mine.data["id"] != theirs.data["id"]


def test_cancel_permissions(member, operator, admin_user, outsider, sim_host, qwen, suite, api_as):
    job = _job(suite, qwen, sim_host, member)
    other = _job(suite, qwen, sim_host, member)
    from apps.accounts.roles import Role
    from tests.conftest import _persona

    colleague = _persona(Role.MEMBER, "colleague")
    assert_error(api_as(colleague).post(f"/jobs/{job.pk}/cancel"), 403)
    assert_error(api_as(outsider).post(f"/jobs/{job.pk}/cancel"), 403)
    cancelled = api_as(member).post(f"/jobs/{job.pk}/cancel")
    assert cancelled.status_code == 200 and cancelled.data["state"] == "cancelled"
    assert_error(api_as(member).post(f"/jobs/{job.pk}/cancel"), 409, "not_active")
    Job.objects.filter(pk=other.pk).update(state=J.RUNNING)
    by_operator = api_as(operator).post(f"/jobs/{other.pk}/cancel")
    assert by_operator.data["state"] == "cancelling"  # stops after the requests in flight


def test_results_json_csv_and_compare(member, sim_host, qwen, suite, api_as):
    api = api_as(member)
    base = _job(suite, qwen, sim_host, member, state=J.DONE)
    new = _job(suite, qwen, sim_host, member, state=J.DONE)
    for c in (1, 2):
        _result(base, c, decode=22.5 / c)
        _result(new, c, decode=21.0 / c)
    results = api.get(f"/jobs/{base.pk}/results").data
    assert results["job"] == base.pk and len(results["results"]) == 2
    assert results["results"][0]["median_decode_tok_s"] == 22.5
    assert results["capacity"]["users"] >= 1
    csv = api.call("get", f"/jobs/{base.pk}/results.csv")
    assert csv["Content-Type"].startswith("text/csv")
    lines = csv.content.decode().splitlines()
    assert lines[0].startswith("job,kind,scenario") and len(lines) == 3

    compared = api.get("/jobs/compare", ids=f"{base.pk},{new.pk}").data
    assert [j["job"] for j in compared["jobs"]] == [base.pk, new.pk]
    compared_csv = api.call("get", f"/jobs/compare?ids={new.pk},{base.pk}&format=csv")
    assert len(compared_csv.content.decode().splitlines()) == 5
    assert_error(api.get("/jobs/compare", ids=str(base.pk)), 422)
    assert_error(api.get("/jobs/compare", ids=f"{base.pk},abc"), 422)
    assert_error(api.get("/jobs/compare", ids=f"{base.pk},999999"), 404)
    assert_error(api.get("/jobs/compare", ids=f"{base.pk},{new.pk}", format="xml"), 422)
    assert_error(api.get("/jobs/999999/results"), 404)


def test_suites_list(member, suite, api_as):
    Suite.objects.filter(pk=suite.pk).update(sweep_mode="rate", sweep_rates=[0.5, 2])
    items = {s["name"]: s for s in api_as(member).get("/suites").data["items"]}
    assert "api quick" in items and "Quick check" in items
    assert (items["api quick"]["sweep_mode"], items["api quick"]["sweep_rates"]) == (
        "rate",
        [0.5, 2.0],
    )
    assert items["Quick check"]["sweep_mode"] == "concurrency"
    Suite.objects.filter(pk=suite.pk).update(sweep_dataset="sharegpt", session_turns=3)
    items = {s["name"]: s for s in api_as(member).get("/suites").data["items"]}
    assert (items["api quick"]["sweep_dataset"], items["api quick"]["session_turns"]) == (
        "sharegpt", 3)  # fmt: skip


def test_outsiders_cannot_queue(outsider, sim_host, qwen, suite, api_as):
    body = {"recipe": qwen.slug, "host": sim_host.name}
    assert_error(api_as(outsider).post("/jobs", body), 403)
    assert not Job.objects.exists()


# --- planner --------------------------------------------------------------------------------
NEMOTRON = {
    "gpu_memory_utilization": 0.85, "max_model_len": 32768, "max_num_seqs": 4,
    "total_params_b": 120.6, "active_params_b": 12.7, "weight_format": "nvfp4",
    "num_layers": 88, "attention_layers": 8, "kv_heads": 2, "head_dim": 128,
    "recurrent_state_mib": 162.0, "checkpoint_kv_dtype": "fp8",
}  # fmt: skip


def test_planner_without_saving_a_recipe(member, sim_host, api_as):
    api = api_as(member)
    count = Recipe.objects.count()
    plan = api.post("/planner", NEMOTRON).data
    assert plan["verdict"] in ("fits", "tight")
    assert 60e9 < plan["weights_bytes"] < 90e9
    assert plan["max_concurrency"] >= 4 and plan["decode_ceiling_tps"] > 20
    assert plan["largest_safe_utilization"] <= 0.90
    assert sum(s["bytes"] for s in plan["budget"]) == pytest.approx(plan["physical_bytes"])
    assert Recipe.objects.count() == count
    on_host = api.post("/planner", NEMOTRON | {"host": sim_host.name})
    assert on_host.status_code == 200
    assert_error(api.post("/planner", NEMOTRON | {"host": "nope"}), 422)


def test_startup_plan_answers_in_vllms_terms_as_spark_plan_does(member, sim_host, api_as):
    """POST /planner/startup is `spark plan --json`: the exact vector, the model's stored or
    given config.json, vLLM's figures and verdict, the panel's beside them; any
    utilization is predicted (0.95 too), the panel's rule says no; it never downloads."""
    from apps.recipes.models import ModelFacts
    from tests.model_configs import QWEN3_SMALL

    api = api_as(member)
    command = ["vllm", "serve", "Qwen/Qwen3-0.6B", "--max-model-len", "40960",
               "--gpu-memory-utilization", "0.6"]  # fmt: skip
    missing = assert_error(api.post("/planner/startup", {"command": command}), 422)
    assert "config" in missing["fields"]
    ModelFacts.objects.create(repo_id="Qwen/Qwen3-0.6B", commit="d" * 40, config=QWEN3_SMALL,
                              checkpoint_bytes=int(1.12 * 2**30), source="hub")  # fmt: skip
    body = {"command": command, "vllm_version": "0.27.1", "total_gib": 121.69,
            "free_gib": 114.54}  # fmt: skip
    out = api.post("/planner/startup", body).data
    assert out["starts"] is True and out["error"] is None and out["panel_allows"] is True
    assert out["kv_cache_tokens"] > 600_000 and out["model_loading_gib"] == pytest.approx(1.12)
    high = api.post("/planner/startup", body | {"command": [*command[:-1], "0.95"]}).data
    assert high["starts"] is False and "Free memory on device" in high["error"]
    assert high["panel_allows"] is False
    given = api.post(
        "/planner/startup", body | {"config": QWEN3_SMALL, "checkpoint_gib": 1.12}
    ).data
    assert given["kv_cache_tokens"] == out["kv_cache_tokens"]
    assert_error(api.post("/planner/startup", body | {"command": ["python", "-c", "x"]}), 422)
    assert_error(api.post("/planner/startup", body | {"env": {"LD_PRELOAD": "x"}}), 422)
    assert_error(api.post("/planner/startup", body | {"host": "nope"}), 422)


def test_planner_refuses_more_than_090(member, api_as):
    error = assert_error(
        api_as(member).post("/planner", NEMOTRON | {"gpu_memory_utilization": 0.95}), 422
    )
    assert "0.90" in " ".join(error["fields"]["gpu_memory_utilization"])
    missing = assert_error(api_as(member).post("/planner", {"max_model_len": 4096}), 422)
    assert "gpu_memory_utilization" in missing["fields"]
