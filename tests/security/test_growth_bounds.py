"""Issue 17, class 1: no tiny input makes unbounded work.

Each parser and generator is fed the smallest input that used to make it grow without
bound (a recursive placeholder, nested YAML anchors, a 5,000-digit number, a prompt of
millions of tokens) and must answer with a clear refusal in bounded time and memory,
through the same door a user uses (the API, the forms) where there is one.

`bounded()` measures: wall time, the tracemalloc peak while the call runs, what is still
allocated after it returns (a cache that keeps growing), and the size of what it answers.
It stops the call once it runs past its limits (a profiling timer checks twice per CPU
tenth of a second) so the old code fails in seconds instead of running for minutes; the
limits are ceilings many times above what the bounded code needs, never timings a busy
core could break.
"""

from __future__ import annotations

import gc
import json
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from django.urls import reverse

from apps.benchmarks.forms import SuiteForm
from apps.benchmarks.harness import Client, LevelSpec, Scenario, build_messages, run_level
from apps.benchmarks.models import Job, Suite
from apps.benchmarks.selectors import suite_plan
from apps.benchmarks.services import JobRefused, job_queue
from apps.recipes.models import Recipe
from sparkdomain.hf_config import ConfigImportError, parse_hf_config
from tests.api.conftest import assert_error
from tests.conftest import run_async
from tests.sparksim.conftest import NEMOTRON_FLAGS, launch

SECONDS = 20.0  # each bounded call needs well under a second; 20 s: a busy machine's pauses
MEGABYTES = 40.0  # each bounded call peaks at a few MB
ANSWER_BYTES = 64_000  # an error answer names the problem; it never echoes a document


class Unbounded(AssertionError):
    pass


@dataclass
class Measure:
    seconds: float = 0.0
    peak_mb: float = 0.0
    retained_mb: float = 0.0


@contextmanager
def bounded(seconds: float = SECONDS, megabytes: float = MEGABYTES):
    """Run the block under tracemalloc; stop it with Unbounded past either limit.

    A watchdog thread checks both every 50 ms and interrupts the main thread with a
    signal (which also breaks a wait on a socket or on another thread)."""
    measure = Measure()
    gc.collect()
    tracemalloc.start()
    started = time.monotonic()
    done = threading.Event()
    verdict: list[str] = []
    main = threading.main_thread().ident
    assert threading.get_ident() == main

    def watch() -> None:
        while not done.wait(0.05):
            elapsed = time.monotonic() - started
            peak = tracemalloc.get_traced_memory()[1]
            if elapsed > seconds:
                verdict.append(f"still running after {elapsed:.1f} s (limit {seconds} s)")
            elif peak > megabytes * 2**20:
                verdict.append(f"allocated {peak / 2**20:.0f} MB (limit {megabytes} MB)")
            if verdict:
                signal.pthread_kill(main, signal.SIGUSR1)
                return

    def stop(_signum, _frame) -> None:
        if not done.is_set():
            raise Unbounded(verdict[0])

    previous = signal.signal(signal.SIGUSR1, stop)
    watchdog = threading.Thread(target=watch, daemon=True)
    watchdog.start()
    try:
        yield measure
    finally:
        done.set()
        watchdog.join()
        signal.signal(signal.SIGUSR1, previous)
        measure.seconds = time.monotonic() - started
        measure.peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
        gc.collect()
        measure.retained_mb = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
    assert measure.seconds < seconds, measure
    assert measure.peak_mb < megabytes, measure


@pytest.fixture(autouse=True)
def _warm(db):
    """Import every URL module, view and schema before anything is measured (a first
    request imports half the panel, which under tracemalloc alone takes seconds)."""
    from django.test import Client as DjangoClient
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - the import is the point
    DjangoClient().post("/api/v1/recipes/import", "{}", content_type="application/json")


def _sparkrun(defaults: str, command: str) -> str:
    return (
        "model: org/tiny\nruntime: vllm\ncontainer: vllm/vllm-openai:v0.11.0\n"
        f"defaults:\n{defaults}command: {command}\n"
    )


# --- sparkrun placeholders ----------------------------------------------------------------

PLACEHOLDERS = {
    # The probe's 89 bytes: 4 copies of itself, ten rounds deep.
    "self": (_sparkrun('  a: "{a}{a}{a}{a}"\n', "vllm serve {a}"), "refers to itself"),
    "mutual": (
        _sparkrun('  a: "{b}{b}"\n  b: "{c}{c}"\n  c: "{a}{a}"\n', "vllm serve {a}"),
        "refers to itself",
    ),
    # No cycle, but each of ten levels quadruples: 4**10 copies.
    "exponential": (
        _sparkrun(
            "".join(
                f'  p{i}: "{{p{i + 1}}}{{p{i + 1}}}{{p{i + 1}}}{{p{i + 1}}}"\n' for i in range(9)
            )
            + '  p9: "--max-num-seqs 4 "\n',
            "vllm serve {p0}",
        ),
        "longer than",
    ),
    "deep": (
        _sparkrun(
            "".join(f'  q{i}: "{{q{i + 1}}}"\n' for i in range(40)) + "  q40: x\n",
            "vllm serve {q0}",
        ),
        "nested more than",
    ),
}


@pytest.mark.parametrize("case", PLACEHOLDERS)
def test_a_recursive_or_exploding_placeholder_is_refused_in_bounded_time_and_memory(
    case, operator, api_as
):
    text, words = PLACEHOLDERS[case]
    assert len(text) < 1000
    api = api_as(operator)
    with bounded():
        response = api.post("/recipes/import", {"yaml": text})
    error = assert_error(response, 422)
    assert len(response.content) < ANSWER_BYTES
    assert any(words in m for messages in error["fields"].values() for m in messages), error
    assert not Recipe.objects.filter(model_id="org/tiny").exists()


def test_placeholders_that_nest_a_little_still_fill_the_command(operator, api_as):
    text = _sparkrun(
        "  gpu_memory_utilization: 0.7\n  max_model_len: 4096\n  max_num_seqs: 3\n"
        '  served_model_name: "{model}-served"\n',
        "vllm serve {model} --max-model-len {max_model_len} --max-num-seqs {max_num_seqs} "
        "--served-model-name {served_model_name}",
    )
    with bounded():
        response = api_as(operator).post("/recipes/import", {"yaml": text})
    assert response.status_code == 200, response.content[:2000]
    recipe = Recipe.objects.get(model_id="org/tiny")
    assert (recipe.max_model_len, recipe.max_num_seqs) == (4096, 3)
    assert recipe.served_model_name == "org/tiny-served"


# --- YAML: aliases, depth, sizes ----------------------------------------------------------


def _laughs(levels: int) -> str:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


HOSTILE_YAML = {
    # The probe's 351 bytes: a name that expands to 9**8 strings.
    "laughs as a sparkrun name": (
        "model: org/tiny\nruntime: vllm\n" + _laughs(7) + "name: *l6\n",
        "alias",
    ),
    "laughs in a panel recipe": (
        _laughs(7) + "recipes:\n- name: *l6\n  model_id: org/tiny\n",
        "alias",
    ),
    "laughs through merge keys": (
        "a: &a {x: 1, y: 2, z: 3}\n"
        + "".join(
            f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}' if i > 1 else '*a'] * 8)}]}}\n"
            for i in range(1, 8)
        )
        + "recipes: [*m7]\n",
        "alias",
    ),
    "an alias to itself": ("recipes: &r [*r]\n", "alias"),
    "deep nesting": ("recipes: " + "[" * 20_000 + "]" * 20_000 + "\n", "nested"),
    "a 5,000-digit number": (
        f"recipes:\n- name: big\n  model_id: org/tiny\n  max_num_seqs: {'9' * 5000}\n",
        "number",
    ),
    "a huge scalar": (
        "recipes:\n- name: big\n  model_id: org/tiny\n  description: " + "x" * 300_000 + "\n",
        "characters",
    ),
    "a huge unknown key": (
        "recipes:\n- ? " + "k" * 60_000 + "\n  : 1\n  name: x\n  model_id: org/tiny\n",
        "unknown key",
    ),
}


@pytest.mark.parametrize("case", HOSTILE_YAML)
def test_hostile_yaml_is_refused_in_bounded_time_memory_and_answer_size(case, operator, api_as):
    text, words = HOSTILE_YAML[case]
    api = api_as(operator)
    with bounded():
        response = api.post("/recipes/import", {"yaml": text})
    error = assert_error(response, 422)
    assert len(response.content) < ANSWER_BYTES, len(response.content)
    messages = [m for ms in error["fields"].values() for m in ms]
    assert any(words in m for m in messages), messages
    assert all(len(m) <= 600 for m in messages), [len(m) for m in messages]
    assert not Recipe.objects.filter(model_id="org/tiny").exists()


def test_the_import_page_refuses_nested_aliases_with_a_form_error(operator, client_as):
    client = client_as(operator)
    text = "model: org/tiny\nruntime: vllm\n" + _laughs(7) + "name: *l6\n"
    with bounded():
        response = client.post(reverse("recipe-import"), {"text": text})
    assert response.status_code == 400
    assert len(response.content) < 200_000
    assert "alias" in response.content.decode()


def test_thousands_of_bad_extra_arguments_get_a_bounded_message():
    from sparkdomain.flags import FlagError, validate_extra_args

    tokens = [f"--bogus-{i}" for i in range(5000)]
    with bounded(), pytest.raises(FlagError) as refused:
        validate_extra_args(tokens)
    message = str(refused.value)
    assert "--bogus-0 is not an option of any vLLM" in message
    assert "4,990 more" in message
    assert len(message) < 10_000, len(message)


# --- config.json ----------------------------------------------------------------------------

BASE_CONFIG = {"num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512}


def _config(**extra) -> str:
    return json.dumps({**BASE_CONFIG, **extra})


HOSTILE_CONFIGS = {
    "deep nesting": ('{"num_hidden_layers": 4, "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nest"),
    "a 5,000-digit integer": (_config().replace('"num_hidden_layers": 4', '"num_hidden_layers": ' + "9" * 5000), "number"),
    "a 1e308 float": (_config().replace('"num_hidden_layers": 4', '"num_hidden_layers": 1e308'), "number"),
    "NaN": (_config().replace("}", ', "rope_theta": NaN}'), "NaN"),
    "Infinity": (_config().replace("}", ', "rope_theta": -Infinity}'), "Infinity"),
    "a huge document": (_config(pad="x" * 3_000_000), "larger than"),
}  # fmt: skip


@pytest.mark.parametrize("case", HOSTILE_CONFIGS)
def test_hostile_config_json_is_refused_in_bounded_time_and_memory(case):
    text, words = HOSTILE_CONFIGS[case]
    with bounded(), pytest.raises(ConfigImportError) as refused:
        parse_hf_config(text)
    assert words in str(refused.value)
    assert len(str(refused.value)) <= 600


def test_config_json_notes_never_echo_an_unbounded_value():
    kinds = [f"kind-{i}-" + "z" * 2000 for i in range(500)]
    text = _config(num_hidden_layers=len(kinds), layer_types=kinds)
    with bounded():
        result = parse_hf_config(text)
    assert sum(len(n) for n in result.notes) < 20_000


def test_the_wizard_refuses_a_deep_config_json_with_its_own_message(member, client_as):
    text = '{"num_hidden_layers": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with bounded():
        response = client_as(member).post(
            reverse("recipe-wizard"), {"action": "import_config", "step": "1", "config_text": text}
        )
    assert response.status_code < 500
    assert "nest" in response.content.decode()


# --- benchmark suites and prompts ----------------------------------------------------------

SUITE = {
    "name": "huge", "description": "", "repetitions": 1, "warmup_requests": 1,
    "sweep_enabled": "on", "sweep_prompt_tokens": 1834, "sweep_output_tokens": 108,
    "requests_per_level": 4, "slo_ttft_s": 2.0, "slo_tpot_s": 0.1,
    "scenarios_text": "short: 58/2", "levels_text": "1, 2",
}  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sweep_prompt_tokens", 50_000_000),
        ("sweep_output_tokens", 50_000_000),
        ("scenarios_text", "huge: " + "9" * 5000 + "/2"),
        ("scenarios_text", "huge: ²/2"),
        ("scenarios_text", "\n".join(f"s{i}: 58/2" for i in range(5000))),
        ("levels_text", ", ".join(str(i) for i in range(1, 1025))),
        ("slo_ttft_s", 1e308),
        # 10,001 prompts of 1,834 tokens held at once: more than a level may hold.
        ("requests_per_level", 10_000),
    ],
    ids=lambda v: str(v)[:30],
)
def test_every_numeric_suite_field_has_an_upper_bound(field, value, operator, client_as):
    data = {**SUITE, field: value}
    assert SuiteForm(data).is_valid() is False
    with bounded():
        response = client_as(operator).post(reverse("benchmark-suite-new"), data)
    assert response.status_code == 400
    assert not Suite.objects.filter(name="huge").exists()


def test_a_suite_whose_prompts_exceed_the_recipes_context_is_refused_when_queued(
    sim_host, qwen, member, api_as
):
    suite = Suite.objects.create(
        name="long", scenarios=[{"name": "short", "prompt_tokens": 58, "output_tokens": 2}],
        sweep_prompt_tokens=8000, sweep_output_tokens=500, sweep_levels=[1], requests_per_level=1,
    )  # fmt: skip
    assert qwen.max_model_len == 8192
    with pytest.raises(JobRefused, match="max_model_len") as refused:
        job_queue(suite=suite, recipe=qwen, host=sim_host, user=member)
    assert refused.value.code == "prompt_too_long"
    by_api = api_as(member).post(
        "/jobs", {"recipe": qwen.slug, "host": sim_host.name, "suite": suite.name}
    )
    assert_error(by_api, 422, "prompt_too_long")
    assert not Job.objects.exists()


def test_a_job_queued_before_the_bounds_fails_before_any_run_or_prompt(sim_host, qwen, member):
    from apps.benchmarks import runner
    from apps.runs.models import Run

    suite = Suite.objects.create(
        name="old", scenarios=[{"name": "huge", "prompt_tokens": 58, "output_tokens": 2}],
        sweep_enabled=False,
    )  # fmt: skip
    plan = {**suite_plan(suite), "scenarios": [
        {"name": "huge", "prompt_tokens": 50_000_000, "output_tokens": 2}]}  # fmt: skip
    job = Job.objects.create(suite=suite, recipe=qwen, host=sim_host, queued_by=member, plan=plan)
    with bounded(seconds=60, megabytes=60):
        runner.run_job(job.pk)
    job.refresh_from_db()
    assert job.state == "failed"
    assert "50,000,000 prompt tokens" in job.error, job.error
    assert not Run.objects.exists()


@pytest.fixture(scope="module")
def nemotron(tmp_path_factory):
    sim = launch(tmp_path_factory.mktemp("growth"), *NEMOTRON_FLAGS, time_scale=20)
    yield sim
    sim.stop()


RETAINED = """
import asyncio, gc, json, sys, tracemalloc
from apps.benchmarks.harness import Client, build_messages

async def go(n):
    async with await Client.create(sys.argv[1]) as client:
        return await build_messages(client, n, "salt")

asyncio.run(go(100))  # the connection's own first-use caches, once
gc.collect()
tracemalloc.start()
messages = asyncio.run(go(130_000))
size = len(messages[0]["content"])
del messages
gc.collect()
print(json.dumps({"size": size, "retained": tracemalloc.get_traced_memory()[0]}))
"""


def test_building_a_long_prompt_leaves_no_growing_cache_behind(nemotron):
    """In a fresh process (whatever earlier tests left in this one), after a short build:
    what a 130,000-token build leaves allocated is not a copy of its prompt's words."""
    done = subprocess.run(
        [sys.executable, "-c", RETAINED, nemotron.url],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["size"] > 130_000
    assert report["retained"] < 256 * 1024, report


def test_a_level_of_millions_of_prompt_tokens_is_refused_before_any_prompt_is_built(nemotron):
    spec = LevelSpec(Scenario("huge", 5_000_000, 2), 1, 1, 1)

    async def go():
        async with await Client.create(nemotron.url) as client:
            return await run_level(client, spec)

    with bounded() as measure:
        result = run_async(go())
    assert result.error and "prompt tokens" in result.error, result.error
    assert result.sent == 0
    assert measure.retained_mb < 1, measure


def test_prompt_building_refuses_more_tokens_than_any_context(nemotron):
    from apps.benchmarks.harness import PromptLengthError

    async def go():
        async with await Client.create(nemotron.url) as client:
            return await build_messages(client, 50_000_000, "salt")

    with bounded(), pytest.raises(PromptLengthError, match="at most"):
        run_async(go())
