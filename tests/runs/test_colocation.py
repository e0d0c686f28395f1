"""Several models on one Spark (issue #42, point 3): a host whose admin allows it runs
models side by side when their pools fit together — the ≤ 0.90 rule over the sum of the
utilizations, one start at a time, vLLM's free-memory gate with the freeze margin as
measured, exclusive groups — and each active run holds a slot the database keeps to one
run (apps/runs/colocation.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from apps.gateway.models import OnDemand
from apps.recipes.models import Recipe
from apps.runs.models import Run, RunState
from apps.runs.services import RunRefused, run_start
from sparkdomain.spark import GB

pytestmark = pytest.mark.django_db


def _meminfo(path, available_gb: float, total_gb: float = 128) -> None:
    path.write_text(
        f"MemTotal:       {int(total_gb * GB / 1024)} kB\n"
        f"MemFree:        {int(available_gb * GB / 1024)} kB\n"
        f"MemAvailable:   {int(available_gb * GB / 1024)} kB\n"
    )


def colocating(host, tmp_path, max_runs: int):
    """The host runs `max_runs` models side by side, its memory read from a meminfo file
    the test writes (`host.meminfo`; 120 GB available to begin with)."""
    meminfo = tmp_path / "meminfo"
    _meminfo(meminfo, 120)
    host.max_runs = max_runs
    host.meminfo_path = str(meminfo)
    host.save()
    host.meminfo = meminfo
    return host


@pytest.fixture
def spark(sim_host, tmp_path):
    return colocating(sim_host, tmp_path, 3)


def _recipe(qwen: Recipe, slug: str, utilization: str) -> Recipe:
    data = {f.name: getattr(qwen, f.name) for f in Recipe._meta.concrete_fields
            if f.name not in ("id", "slug", "name", "created_at", "updated_at")}  # fmt: skip
    data["gpu_memory_utilization"] = Decimal(utilization)
    data["served_model_name"] = slug  # a model of its own on /v1
    return Recipe.objects.create(**data, slug=slug, name=slug.replace("-", " ").title())


@pytest.fixture
def three(qwen):
    return [
        _recipe(qwen, f"model-{c}", u) for c, u in (("a", "0.30"), ("b", "0.30"), ("c", "0.25"))
    ]


def _ready(run: Run) -> Run:
    Run.objects.filter(pk=run.pk).update(state=RunState.READY)
    run.refresh_from_db()
    return run


def _refused(recipe, host) -> RunRefused:
    with pytest.raises(RunRefused) as refused:
        run_start(recipe=recipe, host=host, user=None)
    return refused.value


def test_one_model_at_a_time_unless_the_admin_allows_more(spark, three):
    spark.max_runs = 1
    spark.save()
    first = run_start(recipe=three[0], host=spark, user=None)
    assert first.slot == 0
    refused = _refused(three[1], spark)
    assert refused.code == "host_busy"
    assert "one model at a time on this Spark" in str(refused) and "models at once" in str(refused)


def test_a_second_model_starts_beside_a_ready_one_in_its_own_slot(spark, three):
    first = run_start(recipe=three[0], host=spark, user=None)
    # While the first starts, nothing joins it: vLLM measures free memory as it starts.
    refused = _refused(three[1], spark)
    assert refused.code == "host_busy" and "is starting “Model A”" in str(refused)
    _ready(first)
    second = run_start(recipe=three[1], host=spark, user=None)
    assert (first.slot, second.slot) == (0, 1)
    assert second.port != first.port
    # The same recipe twice on one Spark is not a second model.
    _ready(second)
    assert "already runs “Model A” (run" in str(_refused(three[0], spark))


def test_the_sum_of_the_pools_keeps_to_090(spark, three, qwen):
    _ready(run_start(recipe=three[0], host=spark, user=None))
    _ready(run_start(recipe=three[1], host=spark, user=None))
    big = _recipe(qwen, "model-d", "0.35")
    refused = _refused(big, spark)
    assert refused.code == "host_busy"
    words = str(refused)
    assert "0.30 (“Model A”) + 0.30 (“Model B”)" in words
    assert "the total would be 0.95, over the 0.90" in words and "Room left: 0.30" in words
    # 0.25 fits the rule: admitted (the measured memory still has room).
    assert run_start(recipe=three[2], host=spark, user=None).slot == 2


def test_the_measured_memory_is_vllms_gate(spark, three):
    _ready(run_start(recipe=three[0], host=spark, user=None))
    # The first run's pool holds 0.30 × 119.7 GiB; what is left measures 40 GB: a 0.30
    # pool (38.6 GB) and the freeze margin do not pass vLLM's gate even though the sum (0.60) keeps the rule.
    _meminfo(spark.meminfo, 40)
    refused = _refused(three[1], spark)
    assert refused.code == "not_enough_memory" and "has 40.0 GB available" in str(refused)


def test_the_most_models_a_host_takes(spark, three, qwen):
    spark.max_runs = 2
    spark.save()
    _ready(run_start(recipe=three[0], host=spark, user=None))
    _ready(run_start(recipe=three[1], host=spark, user=None))
    refused = _refused(_recipe(qwen, "model-e", "0.10"), spark)
    assert "already runs 2 models (“Model A”, “Model B”), the most it takes" in str(refused)


def test_an_exclusive_group_never_shares_a_spark(spark, three):
    for recipe in three[:2]:
        OnDemand.objects.create(recipe=recipe, exclusive_group="big-coders")
    _ready(run_start(recipe=three[0], host=spark, user=None))
    refused = _refused(three[1], spark)
    assert "exclusive group “big-coders”" in str(refused)
    run_start(recipe=three[2], host=spark, user=None)  # not in the group


def test_the_database_keeps_one_active_run_a_slot(spark, three):
    Run.objects.create(recipe=three[0], host=spark, port=20000, image="x", state=RunState.READY)
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(recipe=three[1], host=spark, port=20001, image="x",
                           state=RunState.QUEUED)  # fmt: skip
    # A finished run frees its slot.
    Run.objects.filter(host=spark).update(state=RunState.STOPPED)
    Run.objects.create(recipe=three[1], host=spark, port=20001, image="x", state=RunState.QUEUED)


def test_the_hosts_pages_list_every_model_on_the_spark(spark, three, client_as, member):
    _ready(run_start(recipe=three[0], host=spark, user=None))
    run_start(recipe=three[2], host=spark, user=None)
    client = client_as(member)
    detail = client.get(reverse("host-detail", args=[spark.name])).content.decode()
    assert "Model A</a> (ready, utilization 0.30)" in detail
    assert "Model C</a> (queued, utilization 0.25)" in detail
    assert "up to 3 side by side" in detail
    dashboard = client.get(reverse("dashboard")).content.decode()
    assert "2 of 3 models side by side" in dashboard
