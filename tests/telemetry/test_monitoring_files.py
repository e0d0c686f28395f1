"""The Prometheus alert rules and the Grafana dashboard the repo ships (monitoring/): the
rules pass `promtool check rules` and their own unit tests (`promtool test rules`), every
PromQL expression of the dashboard parses, and every series either names is one the
panel's /metrics really serves."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from apps.gateway.models import UsageRecord
from apps.hosts.models import Host
from apps.runs.models import Run, RunState
from tests.conftest import ROOT, require_service

pytestmark = pytest.mark.django_db

PROMETHEUS = ROOT / "monitoring" / "prometheus"
RULES = PROMETHEUS / "sparkpanel-alerts.yml"
RULE_TESTS = PROMETHEUS / "sparkpanel-alerts.test.yml"
DASHBOARD = ROOT / "monitoring" / "grafana" / "sparkpanel-dashboard.json"
SERIES = re.compile(r"\bsparkpanel_[a-z0-9_]+")


def _promtool() -> str:
    found = shutil.which("promtool")
    require_service(found is not None, "promtool (Debian's prometheus package)")
    return found


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_alert_rules_pass_promtool_and_their_unit_tests():
    promtool = _promtool()
    checked = _run(promtool, "check", "rules", RULES.name, cwd=PROMETHEUS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 10 rules found" in checked.stdout
    tested = _run(promtool, "test", "rules", RULE_TESTS.name, cwd=PROMETHEUS)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_broken_rule_fails_promtool(tmp_path):
    """The check above can fail: promtool refuses a rule whose PromQL does not parse."""
    promtool = _promtool()
    bad = tmp_path / "bad.yml"
    bad.write_text(RULES.read_text().replace("> 0.9", "> > 0.9", 1))
    result = _run(promtool, "check", "rules", bad.name, cwd=tmp_path)
    assert result.returncode != 0 and "parse error" in (result.stdout + result.stderr)


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = []
    for panel in dashboard["panels"]:
        exprs.extend(target["expr"] for target in panel.get("targets", []))
    return exprs


def test_every_dashboard_expression_parses(tmp_path):
    """Each panel's query, with Grafana's variables filled in as Grafana does, checked by
    promtool as a recording rule."""
    promtool = _promtool()
    exprs = _dashboard_exprs()
    assert len(exprs) >= 15
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {
                        "record": f"sparkpanel_dashboard_query_{i}",
                        "expr": e.replace("$__rate_interval", "1m").replace("$host", ".*"),
                    }
                    for i, e in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard.yml"
    path.write_text(yaml.safe_dump(rules))
    result = _run(promtool, "check", "rules", path.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _served_series(sim_host, qwen) -> set[str]:
    """The series names the panel's /metrics serves with a live agent and a ready run."""
    run = Run.objects.create(recipe=qwen, host=sim_host, state=RunState.READY, port=9)
    sample = {
        "run": run.pk, "mem_available": 9e9, "mem_total": 128e9, "mem_level": "warn",
        "mem_fall_bytes_s": 2e8, "mem_eta_s": 30.0, "kv_usage_pct": 42.0, "running": 3,
        "waiting": 1, "prompt_tps": 900.0, "generation_tps": 60.0, "prefix_hit_rate": 0.5,
        "ttft_p50": 0.4, "ttft_p95": 1.1, "itl_p50": 0.04, "itl_p95": 0.05,
        "preemptions_total": 2.0,
    }  # fmt: skip
    Host.objects.filter(pk=sim_host.pk).update(agent_seen_at=timezone.now(), agent_sample=sample)
    UsageRecord.objects.create(
        request_id="req-1", at=timezone.now(), endpoint="/v1/chat/completions",
        model="team-default", run=run, prompt_tokens=10, completion_tokens=5, status=200,
    )  # fmt: skip
    response = Client(REMOTE_ADDR="127.0.0.1").get("/metrics")
    assert response.status_code == 200
    names = set()
    for family in text_string_to_metric_families(response.content.decode()):
        names.update(sample.name for sample in family.samples)
    return names


def test_the_rules_and_the_dashboard_name_only_series_the_panel_serves(sim_host, qwen):
    served = _served_series(sim_host, qwen)
    named = set(SERIES.findall(RULES.read_text()))
    for expr in _dashboard_exprs():
        named.update(SERIES.findall(expr))
    named -= {name for name in named if name.startswith("sparkpanel_dashboard_query_")}
    assert named and named <= served, sorted(named - served)


def test_each_runs_vllm_series_carry_host_run_and_recipe(sim_host, qwen):
    _served_series(sim_host, qwen)
    text = Client(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    run = Run.objects.get(host=sim_host)
    labels = {"host": sim_host.name, "run": str(run.pk), "recipe": qwen.name}

    def value(name: str, **extra: str) -> float:
        return samples[(name, tuple(sorted({**labels, **extra}.items())))]

    assert value("sparkpanel_run_kv_cache_usage_ratio") == pytest.approx(0.42)
    assert value("sparkpanel_run_requests_running") == 3
    assert value("sparkpanel_run_generation_tokens_per_second") == 60
    assert value("sparkpanel_run_ttft_seconds", quantile="0.95") == pytest.approx(1.1)
    assert value("sparkpanel_run_itl_seconds", quantile="0.5") == pytest.approx(0.04)
    assert value("sparkpanel_run_preemptions_total") == 2
    host = (("host", sim_host.name),)
    assert samples[("sparkpanel_host_watchdog_level", host)] == 1
    assert samples[("sparkpanel_host_memory_act_eta_seconds", host)] == 30
    assert samples[("sparkpanel_host_watchdog_act_bytes", host)] == sim_host.watchdog_act_bytes


def test_a_pair_workers_sample_and_a_silent_agent_export_no_run_series(sim_host, qwen):
    run = Run.objects.create(recipe=qwen, host=sim_host, state=RunState.READY, port=9)
    sample = {"run": run.pk, "pair_worker": True, "kv_usage_pct": 10.0, "mem_level": "ok"}
    Host.objects.filter(pk=sim_host.pk).update(agent_seen_at=timezone.now(), agent_sample=sample)
    text = Client(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()
    assert "sparkpanel_run_kv_cache_usage_ratio{" not in text
    assert f'sparkpanel_host_watchdog_level{{host="{sim_host.name}"}} 0.0' in text
    Host.objects.filter(pk=sim_host.pk).update(
        agent_seen_at=timezone.now() - timezone.timedelta(minutes=5),
        agent_sample={**sample, "pair_worker": False},
    )
    text = Client(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()
    assert "sparkpanel_run_kv_cache_usage_ratio{" not in text
    assert "sparkpanel_host_watchdog_level{" not in text
