"""The exports carry the client's own flags, under the page's names (issue 43, item 9).

`saturated` is one thing only — a rate level whose backlog grew without bound (the server
fell behind) — on the job page, in the CSV and in the API. The load generator's own lag is
`client_flag` ("ok", "client lag", "busy machine"), and a level whose inter-token
latencies are bursts a lagging client read at once says `itl_from_bursts`. A real level
against sparksim whose client's event loop is kept busy shows the bursts and the flag."""

import asyncio
import csv
import io
import time

import pytest
from django.urls import reverse

from apps.benchmarks import harness, terms
from apps.benchmarks.harness.client import Client
from apps.benchmarks.harness.levels import run_level
from apps.benchmarks.harness.types import LevelSpec, Scenario
from apps.benchmarks.models import J, Job, Result, Suite
from apps.benchmarks.selectors import suite_plan
from tests.conftest import run_async
from tests.sparksim.conftest import NEMOTRON_FLAGS, launch

LAGGED = {"client_lagged": True, "loop_lag_p99_ms": 31.0}
BURSTS = {"itl": {"p50": 0.00021}, "tpot": {"p50": 0.024}}  # the 0.21 ms beside 24 ms
STEADY = {"itl": {"p50": 0.022}, "tpot": {"p50": 0.024}}


def _level(job, kind, concurrency, rate=None, **metrics) -> Result:
    return Result.objects.create(
        job=job, kind=kind, scenario=kind, prompt_tokens=200, output_tokens=128,
        concurrency=concurrency, request_rate=rate, ok=4, ttft_p50_s=0.2, ttft_p95_s=0.3,
        ttft_p99_s=0.3, e2e_p50_s=3.2, decode_tps_p50=40.0, output_tps=40.0 * max(concurrency, 1),
        request_rps=1.0, goodput_rps=1.0, metrics={"time_scale": 1.0, **metrics},
    )  # fmt: skip


@pytest.fixture
def sweep_job(db, quick_suite, qwen, sim_host, member) -> Job:
    """A concurrency sweep: bursts behind a lagging client at 8 streams, a lagging client
    with honest gaps at 4, bursts at one stream stored in the old diagnostics' words, and
    near-zero gaps at 2 from a client that kept up (the server's, not the client's)."""
    job = Job.objects.create(suite=quick_suite, recipe=qwen, host=sim_host, queued_by=member,
                             state=J.DONE, plan=suite_plan(quick_suite))  # fmt: skip
    _level(job, "sweep", 1, diagnostics={"client_saturated": True}, **BURSTS)
    _level(job, "sweep", 2, diagnostics={"client_lagged": False}, **BURSTS)
    _level(job, "sweep", 4, diagnostics=LAGGED, **STEADY)
    _level(job, "sweep", 8, diagnostics=LAGGED, **BURSTS)
    return job


@pytest.fixture
def rate_job(db, qwen, sim_host, member) -> Job:
    """A rate sweep: 1 req/s kept up but its client lagged; 2 req/s fell behind."""
    suite = Suite.objects.create(
        name="rates", scenarios=[{"name": "short", "prompt_tokens": 200, "output_tokens": 16}],
        repetitions=1, warmup_requests=1, sweep_prompt_tokens=200, sweep_output_tokens=128,
        sweep_mode="rate", sweep_rates=[1, 2], requests_per_level=60,
    )  # fmt: skip
    job = Job.objects.create(suite=suite, recipe=qwen, host=sim_host, queued_by=member,
                             state=J.DONE, plan=suite_plan(suite))  # fmt: skip
    _level(job, "rate", 0, rate=1.0, diagnostics=LAGGED, saturated=False, **STEADY)
    _level(job, "rate", 0, rate=2.0, diagnostics={"client_lagged": False}, saturated=True,
           arrival={"saturated": True, "planned": 60, "saturation": "the backlog grew"},
           **STEADY)  # fmt: skip
    return job


FLAGS = ("saturated", "client_flag", "itl_from_bursts")
SWEEP_FLAGS = {  # concurrency → (saturated, client_flag, itl_from_bursts)
    1: (False, "busy machine", True),
    2: (False, "ok", False),
    4: (False, "client lag", False),
    8: (False, "client lag", True),
}
RATE_FLAGS = {1.0: (False, "client lag", False), 2.0: (True, "ok", False)}


def _csv_flags(text: str, key: str) -> dict:
    rows = csv.DictReader(io.StringIO(text))
    return {
        (float(r[key]) if key == "request_rate" else int(r[key])): (
            r["saturated"] == "True",
            r["client_flag"],
            r["itl_from_bursts"] == "True",
        )
        for r in rows
    }


def test_the_csv_and_the_api_carry_backlog_client_lag_and_itl_bursts_apart(
    client_as, api_as, member, sweep_job, rate_job
):
    page = client_as(member)
    api = api_as(member)
    for job, key, want in ((sweep_job, "max_concurrency", SWEEP_FLAGS),
                           (rate_job, "request_rate", RATE_FLAGS)):  # fmt: skip
        text = page.get(reverse("benchmark-csv", args=[job.pk])).content.decode()
        assert _csv_flags(text, key) == want
        response = api.get(f"/jobs/{job.pk}/results.csv")
        assert response.status_code == 200
        assert _csv_flags(response.content.decode(), key) == want
        data = api.get(f"/jobs/{job.pk}/results").data
        assert {r[key]: tuple(r[f] for f in FLAGS) for r in data["results"]} == want
    # The ITL figure stays (it is what was measured), marked rather than dropped.
    rows = list(csv.DictReader(io.StringIO(page.get(
        reverse("benchmark-csv", args=[sweep_job.pk])).content.decode())))  # fmt: skip
    assert {r["median_itl_ms"] for r in rows if r["max_concurrency"] == "8"} == {"0.21"}


def test_the_page_uses_the_exports_words_with_their_meanings(
    client_as, member, sweep_job, rate_job
):
    client = client_as(member)
    html = client.get(sweep_job.get_absolute_url()).content.decode()
    sweep = html[html.index("<h2>Concurrency sweep") :]
    rows = sweep[sweep.index("<tbody>") : sweep.index("</tbody>")].split("</tr>")[:4]
    for row, (_saturated, flag, bursts) in zip(rows, SWEEP_FLAGS.values(), strict=True):
        cell = row[row.index('data-testid="client-flags"') :]
        assert (f">{flag}</abbr>" if flag != "ok" else ">ok") in cell
        assert ('data-term="ITL from bursts"' in cell) is bursts
        assert 'data-term="saturated"' not in row
    # The definitions list explains each word, and "saturated" is the backlog.
    for word in ("client lag", "busy machine", "ITL from bursts", "saturated"):
        assert f"<dt>{terms.get(word).word}</dt>" in html
    assert "backlog" in terms.definition("saturated")
    assert "client_flag" in terms.definition("client lag")
    assert "itl_from_bursts" in terms.definition("ITL from bursts")

    html = client.get(rate_job.get_absolute_url()).content.decode()
    section = html[html.index('data-testid="rate-sweep"') :]
    rows = section[section.index("<tbody>") : section.index("</tbody>")].split("</tr>")[:2]
    assert 'data-term="client lag"' in rows[0] and 'data-term="saturated"' not in rows[0]
    assert 'data-term="saturated"' in rows[1] and 'data-term="client lag"' not in rows[1]


@pytest.mark.parametrize(
    ("metrics", "bursts"),
    [
        ({"diagnostics": LAGGED, **BURSTS}, True),
        ({"diagnostics": {"busy_machine": True}, **BURSTS}, True),  # stored before the split
        ({"diagnostics": {"client_lagged": False}, **BURSTS}, False),  # the client kept up
        ({"diagnostics": LAGGED, **STEADY}, False),
        # the bound: a tenth of the median TPOT
        ({"diagnostics": LAGGED, "itl": {"p50": 0.0025}, "tpot": {"p50": 0.024}}, False),
        ({"diagnostics": LAGGED, "itl": {"p50": 0.0023}, "tpot": {"p50": 0.024}}, True),
        ({"diagnostics": LAGGED, "itl": {}, "tpot": {"p50": 0.024}}, False),  # no ITL kept
        ({"diagnostics": LAGGED, **BURSTS, "tpot": {"p50": None}}, False),
        ({}, False),
        (None, False),
    ],
)
def test_the_itl_burst_rule(metrics, bursts):
    assert harness.itl_from_bursts(metrics) is bursts


def test_a_client_whose_loop_is_kept_busy_reads_bursts_and_says_so(tmp_path):
    """A real level against sparksim (one stream, tokens every ~4 ms of wall clock) while
    something else on the client's event loop holds it for 40 ms at a time: the chunks
    wait in the socket and each read takes several, dated alike."""
    sim = launch(tmp_path, *NEMOTRON_FLAGS, time_scale=10)
    try:

        async def go():
            busy = True

            async def hog():
                while busy:
                    time.sleep(0.04)  # blocks the loop, as a client with too much to do
                    await asyncio.sleep(0.001)

            task = asyncio.create_task(hog())
            try:
                async with await Client.create(sim.url) as client:
                    spec = LevelSpec(Scenario("200/64", 200, 64), 1, 3, 1)
                    return await run_level(client, spec, time_scale=10)
            finally:
                busy = False
                await task

        level = run_async(go())
    finally:
        sim.stop()
    assert level.ok == 3
    stored = level.to_dict()
    assert stored["diagnostics"]["client_lagged"] is True
    assert harness.client_flag(stored["diagnostics"], 1) == "busy machine"
    # Most per-token gaps are ~0, the requests' own time per token is not.
    assert stored["itl"]["p50"] < 0.1 * stored["tpot"]["p50"]
    assert harness.itl_from_bursts(stored) is True
