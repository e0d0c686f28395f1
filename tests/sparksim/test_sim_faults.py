"""Every injectable fault, against a real sparksim process, plus the meminfo file,
preemption and reasoning output."""

import asyncio
import itertools
import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import run_async, wait_for
from tests.sparksim.conftest import NEMOTRON, NEMOTRON_FLAGS

BODY = {"model": NEMOTRON, "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}


def _meminfo(path) -> dict[str, int]:
    values = {}
    for line in path.read_text().splitlines():
        key, _, rest = line.partition(":")
        values[key] = int(rest.split()[0])
    return values


def test_crash_after_tokens_kills_the_server_mid_stream(start_sim):
    sim = start_sim(*NEMOTRON_FLAGS, "--fault", "crash-after-tokens:5", time_scale=20)
    received = 0
    with (
        pytest.raises(httpx.HTTPError),
        sim.client() as c,
        c.stream(
            "POST", "/v1/chat/completions", json={**BODY, "max_tokens": 50, "stream": True}
        ) as r,
    ):
        for line in r.iter_lines():
            if '"content":"' in line and '"content":""' not in line:  # compact, as vLLM writes
                received += 1
    assert received == 5
    assert sim.proc.wait(timeout=10) == 1
    assert "illegal memory access" in sim.log()


def test_stall_pauses_a_stream_after_its_nth_token(start_sim):
    sim = start_sim(*NEMOTRON_FLAGS, "--fault", "stall:4@3", time_scale=4)  # 4 s simulated = 1 s
    stamps = []
    with sim.client() as c, c.stream("POST", "/v1/completions",
                                      json={"prompt": "x", "max_tokens": 6, "ignore_eos": True, "stream": True}) as r:  # fmt: skip
        for line in r.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                stamps.append(time.monotonic())
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert len(stamps) == 6
    # The other gaps are ~11 ms; 0.5 s leaves room for a busy machine's pauses.
    assert gaps[2] >= 0.95 and max(gaps[:2] + gaps[3:]) < 0.5


def test_hang_stops_generating_with_requests_running_and_health_green(start_sim):
    """vLLM wedged with requests running: no error, no token, /health 200, and /metrics
    showing a running request whose generation counter no longer moves."""
    sim = start_sim(*NEMOTRON_FLAGS, "--fault", "hang:5", time_scale=20)
    received = 0
    with sim.client() as c:
        with pytest.raises(httpx.ReadTimeout), c.stream(
            "POST", "/v1/completions", timeout=httpx.Timeout(30, read=2),
            json={"prompt": "x", "max_tokens": 50, "ignore_eos": True, "stream": True},
        ) as r:  # fmt: skip
            for line in r.iter_lines():
                if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                    received += 1

        def families() -> dict:
            text = c.get("/metrics").text
            return {f.name: f for f in text_string_to_metric_families(text)}

        first = families()
        time.sleep(0.5)
        second = families()
        assert c.get("/health").status_code == 200
    assert received == 5
    running = [s.value for s in second["vllm:num_requests_running"].samples]
    generated = [
        s.value for s in second["vllm:generation_tokens"].samples if s.name.endswith("_total")
    ]
    before = [s.value for s in first["vllm:generation_tokens"].samples if s.name.endswith("_total")]
    assert running == [1] and generated == before == [5]
    assert "the engine hangs after 5 tokens" in sim.log()


def test_http500_fault_fails_requests_with_vllms_error_shape(start_sim):
    sim = start_sim(*NEMOTRON_FLAGS, "--fault", "http500:1", time_scale=20)
    with sim.client() as c:
        reply = c.post("/v1/chat/completions", json={**BODY, "max_tokens": 2})
        assert reply.status_code == 500
        assert reply.json()["error"]["type"] == "InternalServerError"
        assert c.get("/health").status_code == 200  # only completions fail


@pytest.mark.parametrize("mode", ["malformed", "truncated"])
def test_broken_metrics_fault_yields_text_a_parser_rejects(start_sim, mode):
    sim = start_sim(*NEMOTRON_FLAGS, "--fault", f"metrics:{mode}", time_scale=20)
    text = httpx.get(sim.url + "/metrics").text
    with pytest.raises(ValueError):
        list(text_string_to_metric_families(text))


def test_fail_start_stops_with_an_error_and_no_server(start_sim):
    sim = start_sim(*NEMOTRON_FLAGS, "--fault", "fail-start:graphs", ready=False)
    assert sim.proc.wait(timeout=30) == 1
    log = sim.log()
    assert "Capturing CUDA graphs" in log and "Engine core initialization failed" in log
    assert "Application startup complete." not in log


def test_slow_start_multiplies_the_startup_time(start_sim):
    # Long enough a start that the interpreter's own start-up (~0.5 s on a busy machine)
    # does not hide the 3× factor.
    t0 = time.monotonic()
    log = start_sim(*NEMOTRON_FLAGS, load_scale=500).log()
    normal = time.monotonic() - t0
    t0 = time.monotonic()
    start_sim(*NEMOTRON_FLAGS, "--fault", "slow-start:3", load_scale=500)
    slow = time.monotonic() - t0
    # A busy machine that holds the normal start off the CPU for seconds would break a
    # plain ratio (a pause only ever lengthens the slow one). So the slow start is held to
    # twice the normal one, or twice the normal one's own simulated length when the
    # machine stretched the normal start past it: 3 s, the weights, then the engine's init.
    simulated = 3 + float(log.split("Loading weights took ")[1].split()[0])
    simulated += float(log.split("warmup model) took ")[1].split()[0])
    assert slow > min(normal, simulated / 500) * 2


def test_meminfo_file_shows_the_pool_and_memory_growth(start_sim, tmp_path):
    steady = tmp_path / "steady.meminfo"
    start_sim(*NEMOTRON_FLAGS, "--meminfo-file", str(steady), time_scale=10)
    # 128 GB − 6 GB OS − the pool (0.85 × 121.7 GiB = 111.1 GB) ≈ 10.9 GB available, once
    # the writer's next tick sees the allocated pool.
    wait_for(
        lambda: 10.5e9 < _meminfo(steady)["MemAvailable"] * 1024 < 11.3e9, 5, "pool in meminfo"
    )
    assert _meminfo(steady)["MemTotal"] == 128 * 10**9 // 1024

    growing = tmp_path / "growing.meminfo"
    start_sim(
        *NEMOTRON_FLAGS, "--meminfo-file", str(growing), "--fault", "mem-growth:60", time_scale=10
    )
    first = _meminfo(growing)["MemAvailable"]
    time.sleep(1.0)  # 10 simulated seconds at 1 GB/s
    later = _meminfo(growing)["MemAvailable"]
    assert (first - later) * 1024 > 5e9


def test_kv_exhaustion_preempts_and_every_request_still_finishes(start_sim):
    # A 1B model with a tiny pool: ~700 blocks of 16 tokens for six 3,500-token requests.
    sim = start_sim("--gpu-memory-utilization", "0.05", "--max-model-len", "4096", "--max-num-seqs", "6",
                    "--enforce-eager", model="test/generic-1B", time_scale=20)  # fmt: skip

    async def one(client, i):
        body = {"prompt": list(range(400 + i, 2400 + i)), "max_tokens": 1500, "ignore_eos": True}
        reply = await client.post("/v1/completions", json=body)
        return reply.json()["usage"]["completion_tokens"]

    async def run():
        async with httpx.AsyncClient(base_url=sim.url, timeout=300) as client:
            return await asyncio.gather(*(one(client, i) for i in range(6)))

    assert run_async(run()) == [1500] * 6
    families = {
        f.name: f for f in text_string_to_metric_families(httpx.get(sim.url + "/metrics").text)
    }
    assert families["vllm:num_preemptions"].samples[0].value > 0
    assert "preempted request" in sim.log()


def test_a_reasoning_parser_streams_reasoning_before_the_answer(start_sim):
    sim = start_sim(*NEMOTRON_FLAGS, "--reasoning-parser", "nemotron_v3", time_scale=20)
    kinds = []
    with (
        sim.client() as c,
        c.stream(
            "POST", "/v1/chat/completions", json={**BODY, "max_tokens": 40, "stream": True}
        ) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:])["choices"]
                delta = choices[0]["delta"] if choices else {}
                if delta.get("reasoning"):
                    kinds.append("r")
                elif delta.get("content"):
                    kinds.append("c")
    assert kinds == ["r"] * 10 + ["c"] * 30


def test_an_overloaded_simulator_says_it_cannot_keep_up(start_sim):
    # Tiny steps (a 1B model at 500× speed) and many streams: more work than one loop can do.
    sim = start_sim("--gpu-memory-utilization", "0.5", "--max-model-len", "2048", "--max-num-seqs", "48",
                    model="test/generic-1B", time_scale=500)  # fmt: skip

    async def one(client, i):
        body = {
            "prompt": list(range(300 + i, 364 + i)),
            "max_tokens": 400,
            "ignore_eos": True,
            "stream": True,
        }
        async with client.stream("POST", "/v1/completions", json=body) as r:
            async for _ in r.aiter_lines():
                pass

    async def run():
        async with httpx.AsyncClient(
            base_url=sim.url, timeout=120, limits=httpx.Limits(max_connections=60)
        ) as c:
            await asyncio.gather(*(one(c, i) for i in range(48)))

    run_async(run())
    assert "sparksim cannot keep up" in sim.log()
    assert httpx.get(sim.url + "/sparksim/stats").json()["late_p99_ms"] > 2
