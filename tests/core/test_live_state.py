"""Live state (apps/core/live.py, and each app's live.py): every live element is rendered again from current state
at /live/…, with a version taken before the state is read; pushes carry the same versions;
personal elements are pushed as "changed" stubs, never rendered for one user and sent to all.
Real Redis, real Channels layer, real database."""

from __future__ import annotations

import datetime as dt

import pytest
import redis
from django.conf import settings
from django.utils import timezone
from django.utils.html import escape

from apps.benchmarks.live import push_job
from apps.benchmarks.models import J, Job
from apps.benchmarks.selectors import suite_plan
from apps.benchmarks.services import job_queue
from apps.core import live
from apps.core.models import Notice
from apps.core.services import notice_post
from apps.guard.live import set_banner
from apps.runs.live import push_run
from apps.runs.models import Run, RunState
from tests.livepush import pushes as _collect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]


@pytest.fixture
def quick_suite(db):
    from apps.benchmarks.models import Suite

    return Suite.objects.create(
        name="live quick", scenarios=[{"name": "short", "prompt_tokens": 200, "output_tokens": 128}],
        repetitions=1, warmup_requests=1, sweep_prompt_tokens=200, sweep_output_tokens=128,
        sweep_levels=[1], requests_per_level=2, slo_ttft_s=2.0, slo_tpot_s=0.1,
    )  # fmt: skip


def _busy_run(host, recipe) -> Run:
    """A run that occupies the host (ready), created directly: no worker is involved."""
    return Run.objects.create(recipe=recipe, host=host, port=20500, image=recipe.image, argv=[],
                              state=RunState.READY, step="Ready")  # fmt: skip


def _other_recipe(qwen):
    other = type(qwen).objects.get(pk=qwen.pk)
    other.pk = None
    other.slug, other.name = "qwen-other", "Qwen other"
    other.save()
    return other


def _job(suite, recipe, host, user) -> Job:
    return Job.objects.create(suite=suite, recipe=recipe, host=host, queued_by=user,
                              plan=suite_plan(suite))  # fmt: skip


# --- the endpoints -------------------------------------------------------------------------


def test_anonymous_is_sent_to_login_and_an_account_without_role_is_refused(
    client, outsider, client_as
):
    response = client.get("/live/notices/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert "X-Live-Seq" not in response
    assert client_as(outsider).get("/live/notices/").status_code == 403


def test_a_member_fetches_each_live_element_with_its_version(
    member, client_as, sim_host, qwen, quick_suite
):
    run = _busy_run(sim_host, qwen)
    job = _job(quick_suite, qwen, sim_host, member)
    c = client_as(member)
    urls = {
        f"/live/run-progress/{run.pk}/": f'id="run-{run.pk}-progress"',
        f"/live/run-details/{run.pk}/": f'id="run-{run.pk}-details"',
        f"/live/run-log/{run.pk}/": f'id="run-{run.pk}-log"',
        f"/live/run-actions/{run.pk}/": f'id="run-{run.pk}-actions"',
        f"/live/job-progress/{job.pk}/": f'id="job-{job.pk}-progress"',
        f"/live/job-actions/{job.pk}/": f'id="job-{job.pk}-actions"',
        f"/live/job-results/{job.pk}/": f'id="job-{job.pk}-results"',
        f"/live/host-line/{sim_host.name}/": f'id="host-{sim_host.name}-line"',
        f"/live/queue-host/{sim_host.name}/": f'id="queue-{sim_host.name}"',
        "/live/notices/": 'id="notices-strip"',
        "/live/notice-list/": 'id="notices"',
        "/live/banners/": 'id="banners"',
    }
    seqs = []
    for url, root in urls.items():
        response = c.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert html.lstrip().startswith("<") and root in html, url
        assert f'data-live-src="{url}"' in html, url  # a fetched element can be fetched again
        seqs.append(int(response["X-Live-Seq"]))
        assert "no-cache" in response["Cache-Control"] or "no-store" in response["Cache-Control"]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # every fetch a newer version


def test_unknown_elements_and_objects_are_404(member, client_as, sim_host):
    c = client_as(member)
    for url in ("/live/nothing/", "/live/run-progress/999999/", "/live/run-progress/abc/",
                "/live/job-progress/999999/", "/live/host-line/no-such-host/",
                "/live/queue-host/%3Cscript%3E/"):  # fmt: skip
        assert c.get(url).status_code == 404, url


def test_a_kind_belongs_to_one_app_and_hosts_elements_are_pushed_together():
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured):
        live.register("notices", live.ELEMENTS["notices"])
    # A run's change pushes its host's line, its model cache (what may be deleted) and,
    # from the app above, the host's queue.
    assert live.elements_about("host", "spark-1") == [
        ("host-line", "spark-1"), ("host-weights", "spark-1"), ("queue-host", "spark-1"),
    ]  # fmt: skip


def test_post_is_refused(member, client_as):
    assert client_as(member).post("/live/notices/").status_code in (403, 405)


def test_redis_down_is_a_503_that_says_so_and_pages_still_render(member, client_as, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    c = client_as(member)
    response = c.get("/live/notices/")
    assert response.status_code == 503
    assert "Redis" in response.content.decode() and response["Retry-After"]
    assert "X-Live-Seq" not in response
    assert c.get("/runs/").status_code == 200  # banners unknown: the page itself still works


# --- versions ---------------------------------------------------------------------------------


@pytest.fixture
def fresh_counter():
    """No version counter before the test, and none left after it (one set an hour ahead
    of the clock would outlive a delete below and hold later versions back)."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(f"{live._prefix()}:seq")
    yield client
    client.delete(f"{live._prefix()}:seq")
    client.close()


def test_versions_only_grow_and_are_floored_at_redis_clock(fresh_counter):
    client = fresh_counter
    seconds, micros = client.time()
    first = live.next_version()
    assert first >= seconds * 1_000_000 + micros
    taken = [live.next_version() for _ in range(50)]
    assert taken == sorted(taken) and len(set(taken)) == 50 and taken[0] > first
    # Redis restarted (or flushed): the counter is gone, versions still never go back.
    client.delete(f"{live._prefix()}:seq")
    assert live.next_version() > taken[-1]
    # A counter ahead of the clock (many versions in one µs, or a clock set back) just
    # counts on, exactly: 16 digits survive the trip through Lua.
    ahead = (seconds + 3600) * 1_000_000 + 123_457
    client.set(f"{live._prefix()}:seq", ahead)
    assert live.next_version() == ahead + 1
    assert live.next_version() == ahead + 2


def test_a_version_is_taken_before_the_state_is_read(member, client_as, sim_host, qwen,
                                                     quick_suite, monkeypatch):  # fmt: skip
    """A change made after the version was taken but before the render may show; a change
    after the render never claims the older version: the next push or fetch is newer."""
    job = _job(quick_suite, qwen, sim_host, member)
    order: list[str] = []
    real_next, real_render = live.next_version, live.render_element
    monkeypatch.setattr(live, "next_version", lambda: order.append("version") or real_next())
    monkeypatch.setattr(live, "render_element",
                        lambda *a, **kw: order.append("render") or real_render(*a, **kw))  # fmt: skip
    response = client_as(member).get(f"/live/job-progress/{job.pk}/")
    assert response.status_code == 200
    assert order == ["version", "render"]


# --- pushes over /ws/events/ ------------------------------------------------------------------


def test_a_job_that_fails_at_once_is_pushed_with_its_failure_and_cancel_as_a_stub(
    member, operator, client_as, sim_host, qwen, quick_suite
):
    """The seen bug: a job failed 25 ms after it was queued (another recipe was running) and
    an open page kept "Preparing the model" with an active Cancel. (Another recipe's run is
    swapped out at a job's turn now, unless it is pinned: a pinned one fails the job.)"""
    from apps.benchmarks import runner

    busy = _busy_run(sim_host, _other_recipe(qwen))
    Run.objects.filter(pk=busy.pk).update(pinned=True)
    job = _job(quick_suite, qwen, sim_host, member)
    fetched = int(client_as(member).get(f"/live/job-progress/{job.pk}/")["X-Live-Seq"])

    messages = _collect(
        member,
        lambda: runner.run_job(job.pk),
        until=lambda ms: any(
            "Failed" in m["html"] and f"job-{job.pk}-progress" in m["html"] for m in ms
        ),
    )
    job.refresh_from_db()
    assert job.state == J.FAILED and job.error
    final = next(m for m in messages if "Failed" in m["html"])
    assert final["seq"] > fetched  # newer than what the page fetched before
    assert escape(job.error) in final["html"]  # why it failed, on the open page
    # Cancel is personal: never in pushed HTML, named as changed so each page fetches its own.
    for m in messages:
        assert "csrfmiddlewaretoken" not in m["html"]
        assert f'id="job-{job.pk}-actions"' not in m["html"]
    assert f"job-{job.pk}-actions" in final["changed"]
    seqs = [m["seq"] for m in messages]
    assert seqs == sorted(seqs)
    # The page's own copy: the member who queued it no longer gets a Cancel button.
    actions = client_as(member).get(f"/live/job-actions/{job.pk}/").content.decode()
    assert "Cancel" not in actions and "CSV" in actions


def test_the_cancel_button_is_rendered_per_user(member, operator, admin_user, client_as,
                                                sim_host, qwen, quick_suite):  # fmt: skip
    job = _job(quick_suite, qwen, sim_host, operator)
    assert ">Cancel<" in client_as(operator).get(f"/live/job-actions/{job.pk}/").content.decode()
    assert ">Cancel<" in client_as(admin_user).get(f"/live/job-actions/{job.pk}/").content.decode()
    assert ">Cancel<" not in client_as(member).get(f"/live/job-actions/{job.pk}/").content.decode()
    run = _busy_run(sim_host, qwen)
    assert ">Stop<" in client_as(operator).get(f"/live/run-actions/{run.pk}/").content.decode()
    assert ">Stop<" not in client_as(member).get(f"/live/run-actions/{run.pk}/").content.decode()


def test_queueing_and_cancelling_push_the_host_queue_as_a_stub(member, sim_host, qwen,
                                                               quick_suite, monkeypatch):  # fmt: skip
    from apps.benchmarks import tasks

    monkeypatch.setattr(tasks.run_job, "apply_async", lambda *a, **kw: None)  # no worker here
    created: list[Job] = []

    def act():
        created.append(job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member))

    messages = _collect(member, act, until=lambda ms: any(f"queue-{sim_host.name}"
                                                          in m.get("changed", []) for m in ms))  # fmt: skip
    assert created and any(f'id="job-{created[0].pk}-progress"' in m["html"] for m in messages)


def test_a_run_state_change_pushes_its_elements_and_its_host_line(member, sim_host, qwen):
    run = Run.objects.create(recipe=qwen, host=sim_host, port=20501, image=qwen.image, argv=[],
                             step="Waiting")  # fmt: skip

    def act():
        run.mark_failed("the test says no", advice="try again")

    messages = _collect(member, act, until=lambda ms: any(f"host-{sim_host.name}-line" in m["html"]
                                                          for m in ms))  # fmt: skip
    run_push = next(m for m in messages if f'id="run-{run.pk}-progress"' in m["html"])
    assert (
        "the test says no" in run_push["html"] and f'id="run-{run.pk}-details"' in run_push["html"]
    )
    assert f"run-{run.pk}-actions" in run_push["changed"]
    assert "csrfmiddlewaretoken" not in run_push["html"]
    host_push = next(m for m in messages if f"host-{sim_host.name}-line" in m["html"])
    assert "no model running" in host_push["html"]


def test_log_lines_are_pushed_with_a_version_for_the_log_container(member, sim_host, qwen):
    run = _busy_run(sim_host, qwen)
    messages = _collect(member, lambda: push_run(run.pk, lines=["INFO loading weights"]),
                        until=lambda ms: any("loading weights" in m["html"] for m in ms))  # fmt: skip
    assert f'data-swap="beforeend:run-{run.pk}-log"' in messages[-1]["html"]
    # Progress pushes during a load do not make every page fetch its buttons again.
    messages = _collect(
        member,
        lambda: push_run(run.pk, actions=False),
        until=lambda ms: any(f'id="run-{run.pk}-progress"' in m["html"] for m in ms),
    )
    assert f"run-{run.pk}-actions" not in messages[-1].get("changed", [])


# --- notices and banners on every page ------------------------------------------------------


def test_notices_and_banners_are_on_every_page_from_current_state(operator, member, client_as):
    from apps.hosts.models import Host

    Host.objects.get_or_create(name="spark-1", defaults={"simulated": True})
    notice_post(author=operator, message="Swapping spark-1 at 14:00")
    gone = Notice.objects.create(author=operator, message="an old expired notice")
    if hasattr(Notice, "expires_at"):
        Notice.objects.filter(pk=gone.pk).update(
            expires_at=timezone.now() - dt.timedelta(minutes=1)
        )
    set_banner("spark-1", "warn", "MemAvailable 7.0 GiB is below the warn line")
    c = client_as(member)
    for url in ("/runs/", "/recipes/", "/benchmarks/", "/hosts/"):
        html = c.get(url).content.decode()
        assert 'id="notices-strip"' in html and "Swapping spark-1 at 14:00" in html, url
        assert 'id="banner-spark-1"' in html and "below the warn line" in html, url
        if hasattr(Notice, "expires_at"):
            assert "an old expired notice" not in html, url
    dashboard = c.get("/").content.decode()
    assert "Swapping spark-1 at 14:00" in dashboard and 'id="banner-spark-1"' in dashboard
    # A "back to normal" replaces the host's banner.
    set_banner("spark-1", "ok", "memory back to normal")
    html = c.get("/live/banners/").content.decode()
    assert "back to normal" in html and "below the warn line" not in html
    # A removed host's last banner is not shown any more.
    Host.objects.filter(name="spark-1").delete()
    assert 'id="banner-spark-1"' not in c.get("/live/banners/").content.decode()


def test_a_posted_notice_is_pushed_as_the_strip_and_a_stub_for_the_personal_list(operator, member):
    messages = _collect(member, lambda: notice_post(author=operator, message="Hello team <b>x"),
                        until=lambda ms: any("Hello team" in m["html"] for m in ms))  # fmt: skip
    push = messages[-1]
    assert 'id="notices-strip"' in push["html"] and "Hello team &lt;b&gt;x" in push["html"]
    assert "notices" in push["changed"]  # the dashboard list carries Delete buttons
    assert "csrfmiddlewaretoken" not in push["html"]


def test_a_push_with_redis_down_never_breaks_its_caller(settings, member, sim_host, qwen):
    run = _busy_run(sim_host, qwen)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    assert push_run(run.pk) is None
    run.mark_failed("still saved")  # the state change itself is not affected
    run.refresh_from_db()
    assert run.state == RunState.FAILED


def test_notices_say_when_the_first_one_expires_so_open_pages_fetch_them_again(
    operator, member, client_as
):
    soon = timezone.now() + dt.timedelta(minutes=5)
    notice_post(author=operator, message="for a while", expires_at=soon)
    notice_post(author=operator, message="forever")
    c = client_as(member)
    for url in ("/live/notices/", "/live/notice-list/", "/runs/"):
        html = c.get(url).content.decode()
        assert "data-live-expires=" in html, url
    Notice.objects.filter(message="for a while").update(expires_at=timezone.now())
    html = c.get("/live/notices/").content.decode()
    assert "for a while" not in html and "data-live-expires" not in html and "forever" in html


def test_a_new_run_puts_itself_on_its_hosts_dashboard_line(member, sim_host, qwen):
    from apps.runs.services import run_create

    created: list[Run] = []
    messages = _collect(
        member,
        lambda: created.append(run_create(recipe=qwen, host=sim_host, user=member)),
        until=lambda ms: any(f"host-{sim_host.name}-line" in m["html"] for m in ms),
    )
    line = next(m for m in messages if f"host-{sim_host.name}-line" in m["html"])
    assert created[0].get_absolute_url() in line["html"] and "Qwen test" in line["html"]


def test_benchmark_progress_ticks_push_no_stubs_but_state_changes_do(
    member, sim_host, qwen, quick_suite
):
    job = _job(quick_suite, qwen, sim_host, member)
    messages = _collect(
        member,
        lambda: push_job(job.pk, personal=False),
        until=lambda ms: any(f'id="job-{job.pk}-progress"' in m["html"] for m in ms),
    )
    assert not messages[-1].get("changed")
    messages = _collect(
        member,
        lambda: job.move(J.QUEUED, J.CANCELLED, finished_at=timezone.now()),
        until=lambda ms: any("Cancelled" in m["html"] for m in ms),
    )
    changed = next(m for m in messages if "Cancelled" in m["html"])["changed"]
    assert f"job-{job.pk}-actions" in changed and f"queue-{sim_host.name}" in changed


def test_an_account_without_a_role_sees_no_notices_or_banners(operator, outsider, client_as):
    from apps.hosts.models import Host

    Host.objects.get_or_create(name="spark-1", defaults={"simulated": True})
    notice_post(author=operator, message="For the team only")
    set_banner("spark-1", "warn", "MemAvailable low on spark-1")
    response = client_as(outsider).get("/runs/")
    assert response.status_code == 403  # the "no role yet" page
    html = response.content.decode()
    assert "For the team only" not in html and "MemAvailable low" not in html
    assert 'id="notices-strip"' not in html and 'id="banners"' not in html
