"""The `sparkpanel` command line (sparkcli/) and `manage.py apitoken`.

The CLI runs in-process against the real API through httpx's WSGI transport (no server),
or against canned answers (httpx.MockTransport) for retries and the pure helpers.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import sparkcli
from apps.api.models import ApiToken
from apps.api.tokens import token_create
from apps.benchmarks.models import Job, Result, Suite
from apps.benchmarks.selectors import suite_plan
from apps.hosts.models import Host
from sparkcli import client
from sparkcli.compare import compare_table, decode_check
from sparkcli.parser import build_parser
from sparkcli.render import ProgressDisplay, progress_bar
from tests.api.conftest import Api, assert_error
from tests.conftest import ROOT

BASE = "http://testserver"
CANNED_TOKEN = "spk_test"


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(client, "RETRY_BACKOFF_S", (0.0, 0.0, 0.0))


def run(argv, *, transport=None, token=CANNED_TOKEN, url=BASE):
    """main(argv) → (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    environ = {"SPARKPANEL_URL": url}
    if token:
        environ["SPARKPANEL_TOKEN"] = token
    code = sparkcli.main(argv, transport=transport, environ=environ, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


# --- the panel in-process -----------------------------------------------------------------
@pytest.fixture
def panel(db):
    """The real Django app behind an httpx transport (the test's transaction stays open:
    Django's per-request connection closing is switched off, as its test client does)."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield httpx.WSGITransport(app=WSGIHandler())
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def host(db):
    return Host.objects.create(name="cli-sim", engine=Host.Engine.PROCESS, simulated=True)


@pytest.fixture
def member_token(member):
    return token_create(user=member, name="cli")[1]


def make_job(member, qwen, host, state="done", results=(), **fields) -> Job:
    suite = Suite.objects.get(name="Quick check")
    job = Job.objects.create(
        suite=suite, recipe=qwen, host=host, queued_by=member, state=state,
        plan=suite_plan(suite), **fields,
    )  # fmt: skip
    for kind, prompt, output, concurrency, decode, ttft in results:
        Result.objects.create(
            job=job, kind=kind, scenario="s", prompt_tokens=prompt, output_tokens=output,
            concurrency=concurrency, ok=4, decode_tps_p50=decode, ttft_p50_s=ttft,
        )  # fmt: skip
    return job


BASELINE = [("scenario", 1834, 32, 1, 20.0, 0.5), ("sweep", 1834, 32, 4, 15.0, 0.9)]


def test_queue_status_wait_results_compare_against_the_real_api(
    panel, member, member_token, qwen, host
):
    code, out, err = run(["whoami"], transport=panel, token=member_token)
    assert code == 0 and out.startswith("mia-member (member) at http://testserver"), (out, err)

    argv = ["queue", "--recipe", qwen.slug, "--host", host.name, "--suite", "Quick check"]
    code, out, err = run(argv, transport=panel, token=member_token)
    assert code == 0, err
    first = Job.objects.get(pk=int(out))  # stdout is the id alone: JOB=$(sparkpanel queue …)
    assert first.suite.name == "Quick check" and first.queued_by == member
    assert "queued" in err and "next in line" in err
    # No key given: each call generates its own, so a second call queues a second job.
    code, out, _ = run(argv, transport=panel, token=member_token)
    assert int(out) != first.pk
    # The same key twice: one job.
    keyed = [*argv, "--idempotency-key", "ci-42", "--note", "nightly"]
    code, out1, _ = run(keyed, transport=panel, token=member_token)
    code2, out2, err2 = run(keyed, transport=panel, token=member_token)
    assert code == code2 == 0 and out1 == out2
    assert "already queued with this Idempotency-Key" in err2

    code, out, _ = run(["status", str(first.pk)], transport=panel, token=member_token)
    assert code == 0 and f"job {first.pk}: queued" in out and "position: 1" in out
    code, out, _ = run(["status", "--json"], transport=panel, token=member_token)
    assert {j["id"] for j in json.loads(out)} == set(Job.objects.values_list("pk", flat=True))
    code, out, _ = run(["status"], transport=panel, token=member_token)
    assert out.splitlines()[0].split() == ["id", "state", "host", "recipe", "suite", "done", "step"]

    # wait: 2 when the timeout passes first …
    code, _, err = run(
        ["wait", str(first.pk), "--timeout", "0.2", "--interval", "0.05"],
        transport=panel, token=member_token,
    )  # fmt: skip
    assert code == 2 and "timed out" in err and f"sparkpanel cancel {first.pk}" in err
    # … 1 for failed, interrupted or cancelled, 0 for done.
    code, out, _ = run(["cancel", str(first.pk)], transport=panel, token=member_token)
    assert code == 0 and out.strip() == f"job {first.pk}: cancelled"
    code, _, err = run(["wait", str(first.pk)], transport=panel, token=member_token)
    assert code == 1 and f"job {first.pk} cancelled" in err
    failed = make_job(member, qwen, host, state="failed", error="the model did not load")
    code, _, err = run(["wait", str(failed.pk)], transport=panel, token=member_token)
    assert code == 1 and "the model did not load" in err

    base = make_job(member, qwen, host, results=BASELINE, summary={"capacity_text": "serves 4"})
    code, _, err = run(["wait", str(base.pk)], transport=panel, token=member_token)
    assert code == 0 and f"job {base.pk} done" in err and "serves 4" in err

    code, out, _ = run(["results", str(base.pk)], transport=panel, token=member_token)
    data = json.loads(out)
    assert [r["median_decode_tok_s"] for r in data["results"]] == [20.0, 15.0]
    code, out, _ = run(
        ["results", str(base.pk), "--format", "csv"], transport=panel, token=member_token
    )
    assert (
        out.splitlines()[0].startswith("job,kind,scenario,input_len") and len(out.splitlines()) == 3
    )

    slower = [("scenario", 1834, 32, 1, 19.5, 0.5), ("sweep", 1834, 32, 4, 13.5, 1.0)]
    new = make_job(member, qwen, host, results=slower)
    ids = [str(base.pk), str(new.pk)]
    code, out, err = run(["compare", *ids], transport=panel, token=member_token)
    assert code == 0
    assert "single 1834/32" in out and "sweep 1834/32 ×4" in out and "(−10.0 %)" in out
    code, _, err = run(
        ["compare", *ids, "--max-decode-drop", "5"], transport=panel, token=member_token
    )
    assert code == 3 and "sweep 1834/32 ×4 decode 13.5 tok/s vs 15.0" in err, err
    assert "single" not in err  # −2.5 % is within 5 %
    code, _, err = run(
        ["compare", *ids, "--max-decode-drop", "10", "--format", "csv"],
        transport=panel, token=member_token,
    )  # fmt: skip
    assert code == 0 and "decode check passed" in err and "2 shared levels" in err


def test_api_errors_exit_4_with_the_message_and_how_to_fix_a_token(
    panel, member, member_token, outsider, host
):
    code, _, err = run(["status", "999999"], transport=panel, token=member_token)
    assert code == 4 and err.startswith("error: No job 999999.")
    code, _, err = run(
        ["queue", "--recipe", "nope", "--host", host.name], transport=panel, token=member_token
    )
    assert code == 4 and "error: No recipe 'nope'." in err
    code, _, err = run(["compare", "1", "2", "3", "4", "5", "6", "7"], transport=panel,
                       token=member_token)  # fmt: skip
    assert code == 4 and "Compare 2 to 6 jobs." in err and "  ids: 2 to 6 ids" in err

    code, _, err = run(["whoami"], transport=panel, token="spk_not-a-token")
    assert code == 4 and "invalid or has been revoked" in err
    assert "http://testserver/accounts/profile/" in err and "SPARKPANEL_TOKEN" in err
    code, _, err = run(["whoami"], transport=panel, token=token_create(user=outsider, name="x")[1])
    assert code == 4 and "no role yet" in err and "/accounts/profile/" in err
    code, _, err = run(["whoami"], token=None)
    assert code == 4 and "no API token" in err and "/accounts/profile/" in err


# --- retries and connection failures (canned answers) -------------------------------------
def test_retries_connect_errors_and_gateway_errors_with_the_same_idempotency_key():
    seen = []
    answers = iter(["connect", 502, 504, 201])

    def handler(request):
        seen.append(request)
        answer = next(answers)
        if answer == "connect":
            raise httpx.ConnectError("refused", request=request)
        if answer == 201:
            return httpx.Response(201, json={"id": 7, "state": "queued", "position": 1})
        return httpx.Response(answer, text="<html>bad gateway</html>")

    code, out, err = run(["queue", "--recipe", "r", "--host", "h"],
                         transport=httpx.MockTransport(handler))  # fmt: skip
    assert code == 0 and out == "7\n", err
    keys = {r.headers["Idempotency-Key"] for r in seen}
    assert len(seen) == 4 and len(keys) == 1 and len(keys.pop()) == 36  # one uuid4
    assert seen[0].headers["Authorization"] == "Bearer spk_test"
    assert json.loads(seen[0].content) == {"recipe": "r", "host": "h", "suite": None, "note": ""}


def test_gives_up_after_three_retries_and_says_which_url_failed():
    calls = []

    def refuse(request):
        calls.append(request)
        raise httpx.ConnectError("Connection refused", request=request)

    code, _, err = run(["status"], transport=httpx.MockTransport(refuse), url="http://spark:9/")
    assert code == 5 and len(calls) == 4
    assert "could not reach the panel at http://spark:9 (Connection refused" in err

    # A gateway error on a request that is not safe to repeat is not retried.
    calls.clear()

    def gateway(request):
        calls.append(request)
        return httpx.Response(502, text="Bad Gateway")

    code, _, err = run(["cancel", "3"], transport=httpx.MockTransport(gateway))
    assert code == 4 and len(calls) == 1 and "HTTP 502" in err and "Bad Gateway" in err

    # Something that is not the panel.
    html = httpx.MockTransport(lambda request: httpx.Response(200, text="<html>hello</html>"))
    code, _, err = run(["whoami"], transport=html, url="http://elsewhere")
    assert code == 4 and "is not JSON: is http://elsewhere a SparkPanel?" in err


def test_the_module_does_not_import_django():
    probe = "import sys, sparkcli; print(sorted(m for m in sys.modules if m.startswith('django')))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         check=True, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    assert out.stdout.strip() == "[]"


# --- arguments and exit codes -------------------------------------------------------------
def test_help_documents_the_exit_codes(capsys):
    assert sparkcli.main(["--help"]) == 0
    text = capsys.readouterr().out
    for line in ("0   success", "1   wait: the job failed", "2   wait: --timeout passed",
                 "3   compare --max-decode-drop", "4   the panel refused", "--max-decode-drop 5"):  # fmt: skip
        assert line in text
    assert sparkcli.main(["wait", "--help"]) == 0
    assert "0 done, 1 failed, interrupted or cancelled, 2 timed out" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [[], ["wait"], ["wait", "x1"], ["compare", "4"], ["queue", "--host", "h"],
     ["compare", "1", "2", "--max-decode-drop", "-1"], ["wait", "1", "--interval", "0"],
     ["results", "1", "--format", "xml"]],
)  # fmt: skip
def test_usage_errors_exit_64_not_2(argv, capsys):
    assert sparkcli.main(argv, environ={}) == 64
    assert "error:" in capsys.readouterr().err


def test_connection_options_work_before_or_after_the_command(tmp_path):
    parser = build_parser()
    args = parser.parse_args(["--url", "http://a:1", "status", "--token", "spk_x"])
    assert (args.url, args.token) == ("http://a:1", "spk_x")
    token_file = tmp_path / "token"
    token_file.write_text("spk_from_file\n")
    args = parser.parse_args(["status"])
    assert client.resolve_token(args, {"SPARKPANEL_TOKEN_FILE": str(token_file)}) == "spk_from_file"
    assert client.resolve_token(args, {"SPARKPANEL_TOKEN": "spk_env"}) == "spk_env"
    args = parser.parse_args(["status", "--token-file", str(token_file)])
    assert client.resolve_token(args, {"SPARKPANEL_TOKEN": "spk_env"}) == "spk_from_file"
    assert client.normalise_url("spark:8000/api/v1/") == "http://spark:8000"


# --- the decode check and the table (pure) ------------------------------------------------
def job(pk, *rows, state="done"):
    keys = ("kind", "input_len", "output_len", "max_concurrency", "median_decode_tok_s",
            "median_ttft_ms")  # fmt: skip
    return {"job": pk, "state": state, "results": [dict(zip(keys, r, strict=True)) for r in rows]}


def test_decode_check_compares_every_job_with_the_first_on_shared_levels():
    base = job(1, ("scenario", 128, 64, 1, 100.0, 50), ("sweep", 1834, 108, 2, 80.0, 90),
               ("sweep", 1834, 108, 4, 60.0, 120))  # fmt: skip
    ok = job(2, ("scenario", 128, 64, 1, 95.0, 50), ("sweep", 1834, 108, 2, 81.0, 90),
             ("sweep", 1834, 108, 8, 1.0, 900))  # ×8: not in the baseline, ignored  # fmt: skip
    slow = job(3, ("sweep", 1834, 108, 4, 56.9, 130), ("scenario", 128, 64, 2, 1.0, 50))
    check = decode_check([base, ok, slow], 5)
    assert not check.ok and check.compared == 3 and not check.nothing_shared
    [drop] = check.drops
    assert (drop.job, drop.baseline, drop.shape) == (3, 1, ("sweep", 1834, 108, 4))
    assert round(drop.percent, 1) == 5.2
    assert str(drop) == ("job 3: sweep 1834/108 ×4 decode 56.9 tok/s vs 60.0 in baseline job 1 "
                         "(−5.2 %)")  # fmt: skip
    assert decode_check([base, ok, slow], 5.2).ok
    assert decode_check([base, ok], 5).ok  # exactly −5 % is allowed


def test_decode_check_fails_when_nothing_is_shared_and_skips_missing_numbers():
    base = job(1, ("scenario", 128, 64, 1, 100.0, 50), ("sweep", 1834, 108, 2, None, None))
    empty = job(2, state="failed")
    other = job(3, ("scenario", 4096, 64, 1, 10.0, 50))
    unmeasured = job(4, ("scenario", 128, 64, 1, None, None))
    check = decode_check([base, empty, other, unmeasured], 5)
    assert check.nothing_shared == [2, 3, 4] and not check.drops and not check.ok
    # A baseline level without a decode rate compares with nothing.
    assert decode_check([base, job(5, ("sweep", 1834, 108, 2, 1.0, 1))], 5).nothing_shared == [5]


def test_compare_table_has_one_row_per_shape_with_each_jobs_numbers():
    base = job(11, ("scenario", 128, 64, 1, 100.0, 50.4), ("sweep", 1834, 108, 2, 80.0, 90))
    new = job(12, ("scenario", 128, 64, 1, 90.0, 55.0), ("sweep", 1834, 108, 4, 70.0, 120))
    lines = compare_table([base, new]).splitlines()
    assert lines[0].split("  ")[0] == "shape" and "#11 decode tok/s" in lines[0]
    assert "#12 TTFT ms" in lines[0]
    assert lines[1].split() == ["single", "128/64", "100.0", "50", "90.0", "(−10.0", "%)", "55"]
    assert lines[2].split() == ["sweep", "1834/108", "×2", "80.0", "90", "–", "–"]
    assert lines[3].split() == ["sweep", "1834/108", "×4", "–", "–", "70.0", "120"]


def test_progress_bar_and_plain_lines_when_stderr_is_not_a_terminal():
    running = {"id": 5, "state": "running", "progress": {"step": "Measuring sweep at 2 concurrent",
               "done": 9, "total": 20, "percent": 45.0}}  # fmt: skip
    assert progress_bar(running) == (
        "job 5 running [#########...........]  45 % Measuring sweep at 2 concurrent (9/20 requests)"
    )
    assert progress_bar(running, width=30).endswith("…") and len(progress_bar(running, 30)) == 30
    queued = {"id": 5, "state": "queued", "position": 2, "progress": {}}
    assert progress_bar(queued) == "job 5 queued [....................]   ? % position 2"

    stream = io.StringIO()
    display = ProgressDisplay(stream, tty=False)
    for job_state in (queued, queued, running, running, {**running, "progress": {
            **running["progress"], "done": 10, "percent": 50.0}}):  # fmt: skip
        display.update(job_state)
    display.end()
    assert len(stream.getvalue().splitlines()) == 2  # only when something changed

    stream = io.StringIO()
    display = ProgressDisplay(stream, tty=True)
    display.update(queued)
    display.update(running)
    display.end()
    assert stream.getvalue().count("\r") == 2 and stream.getvalue().endswith("\n")


# --- manage.py apitoken and manage.py spark -----------------------------------------------
def test_apitoken_creates_lists_and_revokes(member, capsys):
    call_command("apitoken", member.username, "--name", "nightly CI")
    captured = capsys.readouterr()
    clear = captured.out.strip()
    assert clear.startswith("spk_") and "\n" not in clear  # only the token: TOKEN=$(…)
    me = Api(clear).get("/me")
    assert me.status_code == 200 and me.data["username"] == member.username
    token = ApiToken.objects.get(user=member)
    assert token.name == "nightly CI" and token.prefix == clear[:12]

    out = io.StringIO()
    call_command("apitoken", member.username, "--list", stdout=out)
    header, row = out.getvalue().splitlines()
    assert header.split() == ["name", "prefix", "created", "last", "used", "revoked"]
    assert row.startswith("nightly CI") and f"{token.prefix}…" in row and row.endswith("no")

    out = io.StringIO()
    call_command("apitoken", member.username, "--revoke", token.prefix, stdout=out)
    assert "Revoked token 'nightly CI'" in out.getvalue()
    assert_error(Api(clear).get("/me"), 401, "unauthenticated")
    out = io.StringIO()
    call_command("apitoken", member.username, "--revoke", clear, stdout=out)
    assert "already revoked" in out.getvalue()

    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("apitoken", "nobody", "--name", "x")
    with pytest.raises(CommandError, match="no token starting with"):
        call_command("apitoken", member.username, "--revoke", "spk_zzzzzzzz")


def test_manage_py_spark_is_the_cli(capsys):
    from apps.api.management.commands.spark import Command

    with pytest.raises(SystemExit) as exit_info:
        Command().run_from_argv(["manage.py", "spark", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: manage.py spark") and "exit codes:" in out
    with pytest.raises(SystemExit) as exit_info:
        Command().run_from_argv(["manage.py", "spark", "wait"])
    assert exit_info.value.code == 64
