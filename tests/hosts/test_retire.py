"""Retiring a host (issue 43, Hosts): an admin retires a Spark from its page with its history
kept, refused in words while it has work; a retired host is offered by no form, refused at
every door with the same reason, still has its page (its model cache page offers no scan
or deletion); bringing it back undoes it; both are audited. Also: the forms mark an
offline host, and the hosts pages and the API mark a silent agent's last memory figures as
stale instead of showing them as the memory now."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from apps.api.tokens import token_create
from apps.audit.models import AuditEntry
from apps.benchmarks.forms import ImportForm
from apps.benchmarks.models import J, Job, Suite
from apps.gateway import catalog
from apps.gateway.models import OnDemand
from apps.hosts.models import Host, SparkPair
from apps.hosts.services import HostRefused, host_retire
from apps.runs.models import Run, RunState
from apps.runs.services import RunRefused, run_start
from tests.api.conftest import Api, assert_error
from tests.conftest import ports

pytestmark = pytest.mark.django_db

GB = 10**9


@pytest.fixture
def suite(db):
    return Suite.objects.create(
        name="retire quick", scenarios=[{"name": "short", "prompt_tokens": 200, "output_tokens": 16}],
        repetitions=1, warmup_requests=0, sweep_levels=[1], requests_per_level=1,
    )  # fmt: skip


@pytest.fixture
def spare(db):
    """Another Spark, in service: what the forms still offer."""
    return Host.objects.create(name="spare-spark", engine=Host.Engine.PROCESS, simulated=True,
                               **ports(20000, 20999))  # fmt: skip


def api(user) -> Api:
    _token, clear = token_create(user=user, name="test")
    return Api(clear)


def text(response) -> str:
    return response.content.decode().replace("&#x27;", "'").replace("&quot;", '"')


def options(html: str, form_id: str) -> list[str]:
    """The host <select>'s option texts in the form with this id."""
    form = html.split(f'id="{form_id}"', 1)[1].split("</form>", 1)[0]
    select = re.search(r'<select name="host"[^>]*>(.*?)</select>', form, re.S).group(1)
    return [re.sub(r"\s+", " ", o).strip() for o in re.findall(r"<option[^>]*>(.*?)</option>",
                                                                 select, re.S)]  # fmt: skip


def retire(client, host):
    return client.post(reverse("host-retire", args=[host.name]), follow=True)


def test_retiring_is_refused_while_a_run_is_active_or_a_job_waits_and_says_which(
    client_as, admin_user, operator, sim_host, qwen, suite
):
    client = client_as(admin_user)
    run = Run.objects.create(recipe=qwen, host=sim_host, port=20001, image="x",
                             state=RunState.READY, started_by=operator)  # fmt: skip
    page = text(retire(client, sim_host))
    assert f"Not retired: {sim_host.name} cannot be retired while it has work" in page
    assert f"run {run.pk} (“Qwen test”) is ready there — stop it first" in page
    assert run.get_absolute_url() in page
    Run.objects.filter(pk=run.pk).update(state=RunState.STOPPED)
    job = Job.objects.create(suite=suite, recipe=qwen, host=sim_host, queued_by=operator)
    page = text(retire(client, sim_host))
    assert f"benchmark job {job.pk} is queued there — cancel it or let it finish" in page
    assert Host.objects.get(pk=sim_host.pk).retired_at is None
    assert not AuditEntry.objects.filter(action="host.retire").exists()

    Job.objects.filter(pk=job.pk).update(state=J.CANCELLED)
    response = retire(client, sim_host)
    assert response.redirect_chain[-1][0] == reverse("host-detail", args=[sim_host.name])
    assert f"{sim_host.name} is retired" in text(response)
    host = Host.objects.get(pk=sim_host.pk)
    assert host.retired_at is not None and host.retired_by == admin_user
    row = AuditEntry.objects.get(action="host.retire")
    assert row.actor == admin_user and row.target == sim_host.name and "retired" in row.message
    assert not AuditEntry.objects.filter(action="host.edit").exists()  # one row that says so


def test_a_pair_run_counts_on_its_worker_spark_too(admin_user, operator, sim_host, qwen, spare):
    """The worker side of a pair run holds no run of its own: the run's peer_host does."""
    Run.objects.create(recipe=qwen, host=spare, peer_host=sim_host, port=20001, image="x",
                       state=RunState.LOADING, started_by=operator)  # fmt: skip
    with pytest.raises(HostRefused, match=r"run \d+ \(“Qwen test”\) is loading weights there"):
        host_retire(host=sim_host, user=admin_user)


def test_a_retired_host_is_offered_nowhere_and_refused_at_every_door_with_the_reason(
    client_as, admin_user, operator, member, sim_host, spare, qwen, suite
):
    old = Run.objects.create(recipe=qwen, host=sim_host, port=20001, image="x",
                             state=RunState.STOPPED, started_by=operator)  # fmt: skip
    host_retire(host=sim_host, user=admin_user)
    reason = f"{sim_host.name} is retired (since "
    by = f"by {admin_user.username}): it takes no new runs"

    # Not offered: the start form (the Runs page, a recipe's page), the queue form, import.
    runs_page = client_as(operator).get(reverse("runs")).content.decode()
    assert not any(sim_host.name in o for o in options(runs_page, "start-form"))
    assert any(o.startswith("spare-spark") for o in options(runs_page, "start-form"))
    assert f'<option value="{sim_host.name}"' in runs_page  # the list's filter: its runs stay
    recipe_page = client_as(operator).get(qwen.get_absolute_url()).content.decode()
    assert not any(sim_host.name in o for o in options(recipe_page, "start-form"))
    bench_page = client_as(member).get(reverse("benchmarks")).content.decode()
    assert not any(sim_host.name in o for o in options(bench_page, "queue-form"))
    import_form = ImportForm()
    assert sim_host.name not in [str(h) for h in import_form.fields["host"].queryset]
    imported = ImportForm(data={"recipe": qwen.pk, "host": sim_host.pk})
    assert not imported.is_valid() and reason in " ".join(imported.errors["host"])

    # Refused, with the reason, through the page's form and the API (409 host_retired).
    page = text(client_as(operator).post(
        reverse("run-start"), {"recipe": qwen.pk, "host": sim_host.pk}, follow=True))  # fmt: skip
    assert f"Not started: {reason}" in page and by in page
    by_api = api(operator).post("/runs", {"recipe": qwen.slug, "host": sim_host.name})
    error = assert_error(by_api, 409, "host_retired")
    assert error["message"].startswith(reason) and by in error["message"]
    queued = client_as(member).post(
        reverse("benchmark-queue"), {"suite": suite.pk, "recipe": qwen.pk, "host": sim_host.pk}
    )
    assert queued.status_code == 409 and f"Not queued: {reason}" in text(queued)
    by_api = api(member).post("/jobs", {"recipe": qwen.slug, "host": sim_host.name,
                                        "suite": suite.name})  # fmt: skip
    assert_error(by_api, 409, "host_retired")
    assert Run.objects.filter(host=sim_host).count() == 1 and not Job.objects.exists()

    # The on-demand catalog never places a model there.
    anywhere = OnDemand.objects.create(recipe=qwen)
    assert catalog.place(anywhere).host == spare
    only_there = OnDemand.objects.get(pk=anywhere.pk)
    only_there.hosts.add(sim_host)
    placement = catalog.place(only_there)
    assert placement.host is None and f"is retired ({sim_host.name})" in placement.why

    # Its page still opens, marked, with its history; the list shows it apart.
    detail = client_as(member).get(reverse("host-detail", args=[sim_host.name]))
    assert detail.status_code == 200
    html = detail.content.decode()
    assert 'data-testid="host-retired"' in html and old.get_absolute_url() in html
    assert (
        f"Retired on {timezone.localtime(Host.objects.get(pk=sim_host.pk).retired_at):%Y-%m-%d}"
        in html
    )
    listing = client_as(member).get(reverse("hosts")).content.decode()
    table, retired = listing.split('id="retired-hosts"', 1)
    assert f'data-retired-host="{sim_host.name}"' in retired
    assert reverse("host-detail", args=[sim_host.name]) not in table
    got = api(member).get(f"/hosts/{sim_host.name}")
    assert got.status_code == 200 and got.data["retired_at"]


def test_a_retired_hosts_model_cache_page_says_so_offers_nothing_and_refuses_each_post(
    client_as, admin_user, operator, sim_host, tmp_path, django_capture_on_commit_callbacks
):
    """Scan again and Delete would queue work for a worker a retired Spark may no longer
    have: the page offers neither, and the pages' POSTs and the API refuse them with the
    retired host's reason (409 host_retired), queueing nothing."""
    commits = ["a" * 40, "b" * 40]
    sim_host.hf_cache_path = str(tmp_path / "hf")
    sim_host.weights_cache = {
        "path": sim_host.hf_cache_path, "free_bytes": 500 * GB, "total_bytes": 900 * GB,
        "models": [{"repo": "org/model", "size": 2 * GB, "partial": 0, "last_accessed": None,
                    "revisions": [{"commit": c, "refs": [], "size": GB, "files": 3,
                                   "last_modified": None} for c in commits]}],
    }  # fmt: skip
    sim_host.save(update_fields=["hf_cache_path", "weights_cache"])
    client, page_url = client_as(operator), reverse("host-models", args=[sim_host.name])
    in_service = client.get(page_url).content.decode()
    assert "Scan again" in in_service and "Delete…" in in_service
    assert "delete this revision" in in_service and 'data-testid="cache-retired"' not in in_service

    host_retire(host=sim_host, user=admin_user)
    page = client.get(page_url).content.decode()
    assert 'data-testid="cache-retired"' in page and f"{sim_host.name} is retired" in page
    assert "org/model" in page  # the cache as last scanned stays visible
    assert "Scan again" not in page and "Delete…" not in page
    assert "delete this revision" not in page
    assert reverse("host-models-rescan", args=[sim_host.name]) not in page
    assert reverse("host-models-delete", args=[sim_host.name]) not in page

    reason = f"{sim_host.name} is retired (since "
    delete_url = reverse("host-models-delete", args=[sim_host.name])
    with django_capture_on_commit_callbacks() as queued:
        rescan = client.post(reverse("host-models-rescan", args=[sim_host.name]), follow=True)
        asked = client.get(delete_url, {"repo": "org/model"}, follow=True)
        deleted = client.post(delete_url, {"repo": "org/model", "commit": commits[0],
                                           "confirm": "1"}, follow=True)  # fmt: skip
        by_api = api(operator)
        scan_api = by_api.post(f"/hosts/{sim_host.name}/models/scan")
        delete_api = by_api.call("delete", f"/hosts/{sim_host.name}/models/org/model")
    for response in (rescan, asked, deleted):
        assert response.redirect_chain[-1][0] == page_url
        assert reason in text(response) and "Yes, delete it" not in text(response)
    for response in (scan_api, delete_api):
        assert assert_error(response, 409, "host_retired")["message"].startswith(reason)
    assert queued == []  # nothing was sent to the host's queue


def test_bringing_a_host_back_offers_and_admits_it_again_and_both_are_audited(
    client_as, admin_user, operator, sim_host, qwen
):
    client = client_as(admin_user)
    retire(client, sim_host)
    response = client.post(reverse("host-return", args=[sim_host.name]), follow=True)
    assert f"{sim_host.name} is back in service." in text(response)
    assert Host.objects.get(pk=sim_host.pk).retired_at is None
    actions = list(AuditEntry.objects.filter(action__in=["host.retire", "host.return"])
                   .order_by("pk").values_list("action", "actor__username"))  # fmt: skip
    assert actions == [("host.retire", admin_user.username), ("host.return", admin_user.username)]
    runs_page = client_as(operator).get(reverse("runs")).content.decode()
    assert any(o.startswith(sim_host.name) for o in options(runs_page, "start-form"))
    run = run_start(recipe=qwen, host=Host.objects.get(pk=sim_host.pk), user=operator)
    assert run.state == RunState.QUEUED


def test_a_pair_with_a_retired_side_cannot_start_nor_be_linked(admin_user, operator, qwen):
    head, worker = (Host.objects.create(name=n, engine=Host.Engine.PROCESS, simulated=True,
                                        **ports(21000 + i * 100, 21099 + i * 100))
                    for i, n in enumerate(("pair-h", "pair-w")))  # fmt: skip
    pair = SparkPair.objects.create(name="pair-r", head=head, worker=worker,
                                    head_link_address="127.0.0.2", worker_link_address="127.0.0.3")  # fmt: skip
    qwen.pk, qwen.slug, qwen.name = None, "qwen-tp2", "Qwen on a pair"
    qwen.tensor_parallel_size = 2
    qwen.save()
    host_retire(host=worker, user=admin_user)
    with pytest.raises(RunRefused) as refused:
        run_start(recipe=qwen, host=Host.objects.get(pk=head.pk), user=operator)
    assert refused.value.code == "host_retired"
    assert str(refused.value).startswith("The pair pair-r cannot start: pair-w is retired")
    with pytest.raises(RunRefused, match=r"^pair-w is retired"):  # naming the worker Spark
        run_start(recipe=qwen, host=Host.objects.get(pk=worker.pk), user=operator)
    assert not Run.objects.exists()
    with pytest.raises(ValidationError, match="pair-w is retired"):
        SparkPair.objects.select_related("head", "worker").get(pk=pair.pk).clean()


def test_the_forms_mark_an_offline_host_in_its_option(client_as, operator, member, sim_host,
                                                      spare):  # fmt: skip
    Host.objects.filter(pk=sim_host.pk).update(
        last_heartbeat=timezone.now() - timedelta(minutes=12)
    )
    Host.objects.filter(pk=spare.pk).update(last_heartbeat=timezone.now())
    start = options(client_as(operator).get(reverse("runs")).content.decode(), "start-form")
    assert f"{sim_host.name} (simulated) (offline: no worker seen for 12 min)" in start
    assert "spare-spark (simulated)" in start  # online: no mark
    queue = options(client_as(member).get(reverse("benchmarks")).content.decode(), "queue-form")
    assert f"{sim_host.name} (offline: no worker seen for 12 min)" in queue
    assert "spare-spark" in queue
    Host.objects.filter(pk=sim_host.pk).update(last_heartbeat=None)
    start = options(client_as(operator).get(reverse("runs")).content.decode(), "start-form")
    assert f"{sim_host.name} (simulated) (offline: no worker seen yet)" in start


def test_a_silent_agents_last_figures_say_how_old_they_are_never_now(client_as, member,
                                                                     sim_host):  # fmt: skip
    """An idle simulated Spark reads 122 of 128 GB on the panel; the agent said 20 GB six
    minutes ago and has been silent since: both pages show its 20 GB, aged and marked."""
    Host.objects.filter(pk=sim_host.pk).update(
        agent_seen_at=timezone.now() - timedelta(minutes=6, seconds=5),
        agent_sample={"mem_total": 128 * GB, "mem_available": 20 * GB, "mem_level": "ok"},
    )
    words = "as of 6 min ago — the host agent is silent"
    listing = client_as(member).get(reverse("hosts")).content.decode()
    cell = listing.split(f'data-testid="host-memory-{sim_host.name}"', 1)[1].split("</div>", 1)[0]
    assert "data-stale" in cell and "20.0 GB available of 128" in cell and words in cell
    assert "122.0 of 128 GB" not in listing and 'class="gauge stale"' in listing
    html = client_as(member).get(reverse("host-detail", args=[sim_host.name])).content.decode()
    assert words in html and 'class="stale-figure" data-stale' in html
    assert "20.0 GB available" in html and "Not the memory now" in html
    # The API says the same: the agent's figures, marked stale with their age.
    [listed] = [h for h in api(member).get("/hosts").data["items"] if h["name"] == sim_host.name]
    assert listed["memory"]["stale"] is True and listed["memory"]["source"] == "agent"
    assert listed["memory"]["available_bytes"] == 20 * GB and 365 <= listed["memory"]["age_s"] < 400
    assert listed["memory"]["as_of"] and listed["memory"]["used_percent"] == 84.4
    # Nothing is derived from them as if they were current.
    assert 'data-testid="startable-now"' not in html and "above the warn line" not in html
    # The agent reports again: current figures, no mark.
    Host.objects.filter(pk=sim_host.pk).update(agent_seen_at=timezone.now())
    html = client_as(member).get(reverse("host-detail", args=[sim_host.name])).content.decode()
    assert "data-stale" not in html and "above the warn line" in html
    memory = api(member).get(f"/hosts/{sim_host.name}").data["memory"]
    assert memory["stale"] is False and memory["age_s"] is None
