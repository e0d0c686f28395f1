"""A run's weights downloaded before its start, by the host's worker with the real
huggingface_hub client, from a local hub (hubsim) speaking the Hub's HTTP API: live
progress, the commit pinned, the server started offline; a stop mid-download, a worker
SIGKILLed mid-download, a disk too small, a gated model; the cache inventory and deletion
(pages and API). The model server is sparksim (a simulated Spark): what matters here is
what happens before it starts. tests/real_vllm/test_panel_runs.py has real vLLM serving a
downloaded model offline."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import psutil
import pytest
from django.db import connection
from django.urls import reverse

from apps.hosts.engines import engine_for
from apps.runs import runner, tasks, weights
from apps.runs.models import Prefetch, Run, RunState
from apps.runs.services import run_start, run_stop
from hf_adapter import cache
from hubsim import store
from tests.conftest import ROOT, free_port, kill_worker_tree, stop_process, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
S = RunState
MIB = 1024 * 1024
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def model_files(shard_mib: int = 48) -> dict:
    """A sharded checkpoint (sparse shards: big on the wire, nothing in hubsim's store)
    with a second copy of its weights in another format that vLLM would not load."""
    return {
        SHARDS[0]: shard_mib * MIB,
        SHARDS[1]: shard_mib * MIB // 2,
        "model.safetensors.index.json": json.dumps(
            {"metadata": {}, "weight_map": {"a": SHARDS[0], "b": SHARDS[1]}}
        ).encode(),
        "pytorch_model.bin": 40 * MIB,  # the same weights again: never fetched
        "config.json": b'{"architectures": ["Qwen3MoeForCausalLM"]}',
        "tokenizer.json": b'{"version": "1.0"}',
        "generation_config.json": b"{}",
    }


@pytest.fixture
def cached_host(sim_host, hub, settings, tmp_path):
    """A simulated Spark whose worker downloads from the local hub into its own cache."""
    settings.HF_ENDPOINT = hub.url
    settings.WEIGHTS_DISK_RESERVE_BYTES = 0
    (tmp_path / "spark-hf").mkdir()
    sim_host.hf_cache_path = str(tmp_path / "spark-hf")
    sim_host.save(update_fields=["hf_cache_path"])
    return sim_host


def transfers(hub, repo_id: str, path: str) -> list[dict]:
    """The hub's log of the GETs that carried one file's bytes: an LFS file's from its CDN
    (after the redirect), a small one's from /resolve/."""
    repo = store.load(hub.root, repo_id)
    file = repo.file(repo.refs["main"], path)
    tail = f"/cdn/{file.sha256}" if file.lfs else f"/resolve/{repo.refs['main']}/{path}"
    return [r for r in hub.requests() if r["method"] == "GET" and r["path"].endswith(tail)]


def fetched_any_file(hub) -> bool:
    """Whether any file's bytes were asked for (the weight index, read to plan, aside)."""
    return any(r["method"] == "GET" and ("/cdn/" in r["path"] or "/resolve/" in r["path"])
               and "index.json" not in r["path"] for r in hub.requests())  # fmt: skip


class Watcher:
    """Reads the run's row from another connection while the worker works, as a page
    would: every (state, percent, download report) it sees."""

    def __init__(self, run: Run):
        self.run_id, self.seen, self.done = run.pk, [], threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        try:
            while not self.done.is_set():
                row = Run.objects.filter(pk=self.run_id).values("state", "percent", "facts").get()
                self.seen.append((row["state"], row["percent"], row["facts"].get("download")))
                time.sleep(0.1)
        finally:
            connection.close()

    def stop(self) -> list:
        self.done.set()
        self.thread.join(10)
        return self.seen


def test_a_start_downloads_what_vllm_loads_with_live_progress_then_serves_that_commit_offline(
    cached_host, hub, qwen, operator, client_as
):
    commit = store.publish(hub.root, qwen.model_id, model_files())
    hub.faults(rate=40 * MIB)  # ~2 s for 72 MiB: several progress reports
    run = run_start(recipe=qwen, host=cached_host, user=operator)
    watcher = Watcher(run)
    runner.start(run.pk)
    seen = watcher.stop()
    run.refresh_from_db()
    assert run.state == S.READY, (run.failure_reason, run.failure_advice)

    downloading = [(p, d) for state, p, d in seen if state == S.DOWNLOADING and d]
    done = [d["done_bytes"] for _, d in downloading]
    assert len(set(done)) >= 3 and done == sorted(done), done  # the bar moved, never back
    assert any(d["rate_bps"] and d["eta_s"] for _, d in downloading)
    assert any(f["active"] for _, d in downloading for f in d["files"])
    assert [p for p, _ in downloading] == sorted(p for p, _ in downloading)
    assert "downloading" in run.timings and run.phase_seconds()["downloading"] > 1

    # Only what vLLM loads, pinned: the run records the commit and serves exactly it.
    w = run.facts["weights"]
    wanted = {p: c for p, c in model_files().items() if p != "pytorch_model.bin"}
    total = sum(c if isinstance(c, int) else len(c) for c in wanted.values())
    assert (w["by"], w["commit"], w["revision"], w["files"]) == ("panel", commit, "main", 6)
    assert w["total_bytes"] == total and w["skipped_bytes"] == 40 * MIB
    assert run.argv[3:5] == ["--revision", commit]
    assert not transfers(hub, qwen.model_id, "pytorch_model.bin")
    snapshot = cache.snapshot_dir(cache.hub_cache(cached_host.hf_cache_path), qwen.model_id, commit)
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(wanted)
    # The server itself never downloads: it started with the hub offline and this cache.
    [server] = engine_for(cached_host).list_managed()
    env = psutil.Process(int(str(server.handle).split(":")[1])).environ()
    assert env["HF_HUB_OFFLINE"] == "1"

    page = client_as(operator).get(run.get_absolute_url()).content.decode()
    assert commit[:12] in page and "downloaded" in page
    # The start-up prediction's inputs are kept for the recipe page: config.json and the
    # size of the safetensors vLLM loads.
    from apps.recipes.models import ModelFacts

    facts = ModelFacts.objects.get(repo_id=qwen.model_id, commit=commit)
    safetensors = sum(c if isinstance(c, int) else len(c) for path, c in wanted.items()
                      if path.endswith(".safetensors"))  # fmt: skip
    assert facts.checkpoint_bytes == safetensors and facts.config == json.loads(
        model_files()["config.json"]
    )

    # The next start of the same recipe fetches nothing: it is all cached.
    run_stop(run=run)
    runner.stop(run.pk)
    hub.clear()
    again = run_start(recipe=qwen, host=cached_host, user=operator)
    runner.start(again.pk)
    again.refresh_from_db()
    assert again.state == S.READY and again.facts["weights"]["fetched_bytes"] == 0
    assert not fetched_any_file(hub)


def test_a_pinned_revision_is_served_even_after_the_upstream_model_changed(
    cached_host, hub, qwen, operator
):
    first = store.publish(hub.root, qwen.model_id, model_files(shard_mib=2))
    changed = {**model_files(shard_mib=2), "config.json": b'{"changed": true}'}
    second = store.publish(hub.root, qwen.model_id, changed)
    qwen.revision = first
    qwen.save()
    run = run_start(recipe=qwen, host=cached_host, user=operator)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == S.READY and run.facts["weights"]["commit"] == first
    assert run.argv[3:5] == ["--revision", first]
    hub_cache = cache.hub_cache(cached_host.hf_cache_path)
    config = cache.snapshot_dir(hub_cache, qwen.model_id, first) / "config.json"
    assert b"changed" not in config.read_bytes()
    # Following the branch instead resolves to the new commit, and only the changed file
    # travels (the shards' blobs are shared).
    run_stop(run=run)
    runner.stop(run.pk)
    qwen.revision = ""
    qwen.save()
    hub.clear()
    again = run_start(recipe=qwen, host=cached_host, user=operator)
    runner.start(again.pk)
    again.refresh_from_db()
    assert again.state == S.READY and again.facts["weights"]["commit"] == second
    assert again.facts["weights"]["fetched_bytes"] == len(changed["config.json"])


def test_a_stop_during_the_download_ends_the_run_and_counts_nothing_half_written(
    cached_host, hub, qwen, operator, monkeypatch
):
    monkeypatch.setattr(tasks.stop_run, "apply_async", lambda *a, **kw: None)  # no worker
    store.publish(hub.root, qwen.model_id, model_files())
    hub.faults(rate=6 * MIB)
    run = run_start(recipe=qwen, host=cached_host, user=operator)
    worker = threading.Thread(target=lambda: (runner.start(run.pk), connection.close()))
    worker.start()

    def fetched() -> int:
        report = Run.objects.get(pk=run.pk).facts.get("download") or {}
        return report.get("done_bytes", 0)

    wait_for(lambda: fetched() > 8 * MIB, 60, "8 MiB downloaded")
    run_stop(run=Run.objects.get(pk=run.pk))
    worker.join(60)
    run.refresh_from_db()
    assert run.state == S.STOPPED and not run.handle
    assert not engine_for(cached_host).list_managed()  # no server was started
    hub_cache = cache.hub_cache(cached_host.hf_cache_path)
    partials = list(cache.repo_dir(hub_cache, qwen.model_id).glob("blobs/*.incomplete"))
    assert partials and sum(p.stat().st_size for p in partials) >= 8 * MIB
    weights.scan(cached_host)
    cached_host.refresh_from_db()
    [model] = cached_host.weights_cache["models"]
    assert model["partial"] == sum(p.stat().st_size for p in partials)
    assert all(r["size"] < 48 * MIB for r in model["revisions"])  # no shard counted whole


def test_a_worker_killed_mid_download_resumes_where_it_ended(
    cached_host, hub, qwen, operator, start_worker, settings
):
    store.publish(hub.root, qwen.model_id, model_files(shard_mib=64))
    hub.faults(rate=8 * MIB)
    shared = {"DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}",
              "SPARKPANEL_VAR_DIR": str(settings.VAR_DIR), "HF_ENDPOINT": hub.url,
              "WEIGHTS_DISK_RESERVE_GB": "0"}  # fmt: skip
    node = start_worker(cached_host.queue, cached_host.name, **shared)
    run = run_start(recipe=qwen, host=cached_host, user=operator)

    def done_bytes() -> int:
        return (Run.objects.get(pk=run.pk).facts.get("download") or {}).get("done_bytes", 0)

    wait_for(lambda: done_bytes() > 24 * MIB, 90, "24 MiB downloaded")
    kill_worker_tree(start_worker.processes[node])
    assert Run.objects.get(pk=run.pk).state == S.DOWNLOADING  # nobody downloads now
    hub.faults(rate=64 * MIB)
    start_worker(cached_host.queue, cached_host.name + "-2", **shared)
    wait_for(lambda: Run.objects.get(pk=run.pk).state in (S.READY, S.FAILED), 120, "ready")
    run.refresh_from_db()
    assert run.state == S.READY, (run.failure_reason, run.failure_advice)
    # The big shard was resumed with a Range from where the killed worker left it: one
    # request from the start (the killed worker's; hubsim logs what it wrote into the dead
    # socket too), one from that point to the end — never a second one from zero.
    gets = transfers(hub, qwen.model_id, SHARDS[0])
    whole = [r for r in gets if not r["range"]]
    [resumed] = [r for r in gets if r["range"]]
    start = int(resumed["range"].split("=")[1].rstrip("-"))
    assert len(whole) == 1 and resumed["status"] == 206, gets
    assert start >= 16 * MIB and resumed["sent"] == 64 * MIB - start, gets


def test_not_enough_disk_refuses_before_a_byte_of_weights_is_fetched(
    cached_host, hub, qwen, operator, small_volume
):
    cached_host.hf_cache_path = str(small_volume)
    cached_host.save(update_fields=["hf_cache_path"])
    store.publish(hub.root, qwen.model_id, model_files())
    run = run_start(recipe=qwen, host=cached_host, user=operator)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == S.FAILED
    assert f"needs 0.1 GB, 0.0 GB free on {cached_host.name}" in run.failure_reason
    assert "Delete cached models" in run.failure_advice
    assert not fetched_any_file(hub)
    assert not engine_for(cached_host).list_managed()


@pytest.mark.parametrize(
    ("token", "kind", "advice"),
    [
        ("", "gated_no_token", "Set HF_TOKEN in the Spark worker's environment"),
        ("hf_NotGrantedToken1", "gated", "Accept the licence on the model's page"),
    ],
)
def test_a_gated_model_fails_the_run_with_advice(
    cached_host, hub, qwen, operator, settings, token, kind, advice
):
    store.publish(hub.root, qwen.model_id, model_files(shard_mib=1), gated="manual",
                  tokens=["hf_GrantedToken0"])  # fmt: skip
    settings.HF_TOKEN = token
    run = run_start(recipe=qwen, host=cached_host, user=operator)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == S.FAILED and "gated" in run.failure_reason
    assert advice in run.failure_advice and f"{hub.url}/{qwen.model_id}" in run.failure_advice
    assert token == "" or token not in run.failure_reason + run.failure_advice
    # With the token of an account that accepted the licence, the same recipe starts.
    settings.HF_TOKEN = "hf_GrantedToken0"
    again = run_start(recipe=qwen, host=cached_host, user=operator)
    runner.start(again.pk)
    assert Run.objects.get(pk=again.pk).state == S.READY


def test_the_inventory_lists_and_deletion_removes_exactly_what_is_on_disk(
    cached_host, hub, qwen, operator, member, client_as, monkeypatch
):
    # The host's worker, in this process: the tasks run where they are queued.
    for task in (tasks.weights_delete, tasks.weights_scan):
        monkeypatch.setattr(task, "apply_async", lambda args, queue, _t=task: _t(*args))
    commit = store.publish(hub.root, qwen.model_id, model_files(shard_mib=4))
    run = run_start(recipe=qwen, host=cached_host, user=operator)
    runner.start(run.pk)
    cached_host.refresh_from_db()
    hub_cache = cache.hub_cache(cached_host.hf_cache_path)
    on_disk = sum(
        p.stat().st_size for p in cache.repo_dir(hub_cache, qwen.model_id).glob("blobs/*")
    )
    [model] = cached_host.weights_cache["models"]
    assert (model["repo"], model["size"], model["partial"]) == (qwen.model_id, on_disk, 0)
    [revision] = model["revisions"]
    assert (revision["commit"], revision["refs"], revision["files"]) == (commit, ["main"], 6)

    operator_client, member_client = client_as(operator), client_as(member)
    page = operator_client.get(reverse("host-models", args=[cached_host.name])).content.decode()
    assert qwen.model_id in page and qwen.name in page and "in use: run" in page
    listing = member_client.get(f"/api/v1/hosts/{cached_host.name}/models").json()
    assert [m["repo"] for m in listing["models"]] == [qwen.model_id]
    assert listing["models"][0]["recipes"] == [qwen.slug] and listing["models"][0]["in_use"]
    # Never what a running run uses; and members may not delete at all.
    url = f"/api/v1/hosts/{cached_host.name}/models/{qwen.model_id}"
    assert member_client.delete(url).status_code == 403
    refused = operator_client.delete(url)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "in_use"
    assert cache.repo_dir(hub_cache, qwen.model_id).exists()

    run_stop(run=Run.objects.get(pk=run.pk))
    runner.stop(run.pk)
    delete_url = reverse("host-models-delete", args=[cached_host.name])
    confirm = operator_client.get(delete_url, {"repo": qwen.model_id})
    assert confirm.status_code == 200 and "Yes, delete it" in confirm.content.decode()
    assert cache.repo_dir(hub_cache, qwen.model_id).exists()  # asking deletes nothing
    done = operator_client.post(delete_url, {"repo": qwen.model_id, "confirm": "1"})
    assert done.status_code == 302
    assert not cache.repo_dir(hub_cache, qwen.model_id).exists()
    cached_host.refresh_from_db()
    assert cached_host.weights_cache["models"] == []
    assert "Deleted" in cached_host.weights_cache["last_delete"]["text"]
    # Unknown names are refused in words, and nothing is touched.
    missing = operator_client.delete(f"/api/v1/hosts/{cached_host.name}/models/org/none")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_cached"


def test_download_now_prefetches_without_starting_and_can_be_cancelled(
    cached_host, hub, qwen, operator, member, client_as, monkeypatch
):
    queued = []
    monkeypatch.setattr(tasks.prefetch, "apply_async", lambda args, queue: queued.append(args))
    store.publish(hub.root, qwen.model_id, model_files(shard_mib=4))
    api = client_as(operator)
    assert client_as(member).post(
        f"/api/v1/recipes/{qwen.slug}/download", {"host": cached_host.name},
        content_type="application/json",
    ).status_code == 403  # fmt: skip
    answer = api.post(f"/api/v1/recipes/{qwen.slug}/download", {"host": cached_host.name},
                      content_type="application/json")  # fmt: skip
    assert answer.status_code == 202 and answer.json()["state"] == "queued"
    again = api.post(reverse("recipe-download", args=[qwen.slug]), {"host": cached_host.pk})
    assert again.status_code == 302 and Prefetch.objects.count() == 1  # the same one
    [(item_id,)] = queued
    tasks.prefetch(item_id)  # the host's worker
    item = Prefetch.objects.get(pk=item_id)
    assert item.state == "done" and item.commit and item.progress["finished"]
    assert not Run.objects.exists()  # nothing was started
    cached_host.refresh_from_db()
    assert [m["repo"] for m in cached_host.weights_cache["models"]] == [qwen.model_id]
    page = client_as(member).get(reverse("recipe-detail", args=[qwen.slug])).content.decode()
    assert "Download now" not in page  # members may not; the cache is shown
    assert item.commit[:12] in page

    # A second model, cancelled while it downloads: stopped, its partial kept.
    store.publish(hub.root, "org/other", {"model.safetensors": 64 * MIB, "config.json": b"{}"})
    hub.faults(rate=4 * MIB)
    other = Prefetch.objects.create(recipe=qwen, host=cached_host, repo_id="org/other")
    worker = threading.Thread(target=lambda: (tasks.prefetch(other.pk), connection.close()))
    worker.start()
    wait_for(lambda: (Prefetch.objects.get(pk=other.pk).progress or {}).get("done_bytes", 0) > 0,
             60, "downloading")  # fmt: skip
    cancelled = api.post(f"/api/v1/downloads/{other.pk}/cancel")
    assert cancelled.status_code == 200
    worker.join(60)
    assert Prefetch.objects.get(pk=other.pk).state == "cancelled"
    assert api.post(f"/api/v1/downloads/{other.pk}/cancel").status_code == 409


def test_a_cache_folder_the_worker_cannot_see_fails_the_run_with_what_to_set(
    cached_host, hub, qwen, operator, tmp_path
):
    store.publish(hub.root, qwen.model_id, model_files(shard_mib=1))
    cached_host.hf_cache_path = str(tmp_path / "not-mounted")
    cached_host.save(update_fields=["hf_cache_path"])
    run = run_start(recipe=qwen, host=cached_host, user=operator)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == S.FAILED and "does not exist where its worker runs" in run.failure_reason
    assert "HF_CACHE_DIR" in run.failure_advice and not (tmp_path / "not-mounted").exists()
    assert not fetched_any_file(hub)


def test_without_a_cache_or_for_a_local_path_nothing_is_downloaded_and_the_page_says_why(
    sim_host, qwen, operator, client_as
):
    real = type(sim_host)(name="spark-x", simulated=False)
    assert "vLLM downloads the weights itself" in real.weights_not_downloaded(qwen.model_id)
    assert "a path inside the server" in real.weights_not_downloaded("/models/qwen")
    real.hf_cache_path = "/srv/hf"
    assert real.weights_not_downloaded(qwen.model_id) is None
    run = run_start(recipe=qwen, host=sim_host, user=operator)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == S.READY and "downloading" not in run.timings
    assert run.facts["weights"]["by"] == "vllm" and "sparksim needs no weights" in (
        run.facts["weights"]["why"])  # fmt: skip
    assert "--revision" not in run.argv
    assert (
        "sparksim needs no weights"
        in client_as(operator).get(run.get_absolute_url()).content.decode()
    )


def test_broken_connections_resume_from_the_last_whole_chunk(cached_host, hub, qwen, operator):
    """Bodies cut after 12 MiB (the next six bodies, whichever files they are): huggingface_hub
    resumes each cut shard with a Range from the last whole 10 MiB chunk it wrote; only the
    bytes after that chunk cross the wire twice."""
    store.publish(hub.root, qwen.model_id, model_files(shard_mib=40))
    hub.faults(drop_after=12 * MIB, drops=6)
    run = run_start(recipe=qwen, host=cached_host, user=operator)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == S.READY, (run.failure_reason, run.failure_advice)
    gets = [r for r in hub.requests() if "/cdn/" in r["path"] and r["method"] == "GET"]
    cut = [r for r in gets if r.get("dropped")]
    resumed = [r for r in gets if r["range"]]
    assert cut and len(resumed) == len(cut), gets
    chunk = 10 * MIB  # huggingface_hub's DOWNLOAD_CHUNK_SIZE
    assert all(int(r["range"].split("=")[1].rstrip("-")) % chunk == 0 for r in resumed)
    lost = sum(r["sent"] % chunk for r in cut)
    assert sum(r["sent"] for r in gets) == (40 + 20) * MIB + lost, gets


def test_a_hub_that_is_down_is_retried_with_the_reason_on_the_page(
    cached_host, qwen, operator, settings, tmp_path
):
    """The panel's own retries (after huggingface_hub's): the hub answers only from the
    fourth try on; the run says why it waits, then downloads and becomes ready."""
    root = tmp_path / "late-hub"
    root.mkdir()
    store.publish(root, qwen.model_id, model_files(shard_mib=1))
    port = free_port()
    settings.HF_ENDPOINT = f"http://127.0.0.1:{port}"
    settings.WEIGHTS_RETRY_PAUSE_S = 0.4  # tries at 0, 0.4, 1.6 and 5.2 s
    argv = [sys.executable, "-m", "hubsim", "serve", "--root", str(root), "--port", str(port)]
    late: list[subprocess.Popen] = []
    timer = threading.Timer(2.5, lambda: late.append(subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))  # fmt: skip
    run = run_start(recipe=qwen, host=cached_host, user=operator)
    watcher = Watcher(run)
    timer.start()
    try:
        runner.start(run.pk)
    finally:
        timer.cancel()
        for proc in late:
            stop_process(proc)
    seen = watcher.stop()
    run.refresh_from_db()
    assert run.state == S.READY, (run.failure_reason, run.failure_advice)
    notes = [d["note"] for state, _, d in seen if state == S.DOWNLOADING and d and d.get("note")]
    assert any(f"Could not reach 127.0.0.1:{port}" in n or "Could not reach" in n for n in notes)
    assert any("trying again in" in n and "(try 2 of 5)" in n for n in notes), notes
