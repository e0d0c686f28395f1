"""sparksim refuses a recipe that does not fit as real vLLM refuses it: computed from the
same checkpoint, weight format and host as the planner, worded in vLLM's own messages
(the contract read out of vLLM's source), in the order vLLM meets its checks, exit 1.

Real sparksim processes; the panel's runner on a simulated process host; the words are
checked against the contract file and, through the contract's `file:line`, against the
real vLLM source in var/.
"""

from __future__ import annotations

import ast
import dataclasses
import html
import importlib.util
import json
import re
from decimal import Decimal

import pytest
from django.urls import reverse

from apps.hosts.engines.base import SPARKSIM_CHECKPOINT, SPARKSIM_HOST, LaunchSpec, sim_env
from apps.hosts.engines.docker import DockerEngine
from sparkdomain import planner
from sparkdomain.spark import GIB
from sparksim.facts import checkpoint_architecture, host_spec
from sparksim.profiles import resolve_profile
from tests.conftest import ROOT, free_port, require_service
from tests.vllm_adapter.real_parser import venv_python
from vllm_adapter import contract as vllm_contract
from vllm_adapter.logparse import LogFollower

CONTRACTS = ROOT / "vllm_adapter" / "contracts"
REFUSALS = ("free_memory", "load_oom", "no_cache_memory", "kv_too_small", "engine_failed")

LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"
# The recipe: Llama 3.3 70B in BF16 (141 GB of weights) at 131,072 tokens × 32.
BF16_70B = {"total_params_b": 70.6, "weight_format": "bf16", "num_layers": 80, "kv_heads": 8,
            "head_dim": 128}  # fmt: skip
BF16_FLAGS = ["--gpu-memory-utilization", "0.80", "--max-model-len", "131072",
              "--max-num-seqs", "32"]  # fmt: skip


def contract_formats(version: str = "0.33.0") -> dict[str, list[dict]]:
    """The contract FILE, read here (not through the code under test)."""
    data = json.loads((CONTRACTS / f"vllm-{version}.json").read_text(encoding="utf-8"))
    return data["log_formats"]


def template(key: str, starts: str, version: str = "0.33.0") -> str:
    [fmt] = [e["format"] for e in contract_formats(version)[key] if e["format"].startswith(starts)]
    return fmt


def pattern(fmt: str) -> str:
    """A template as a regex: its words exactly, any value where vLLM puts one."""
    return ".+?".join(re.escape(part) for part in fmt.split("{}"))


def errors(log: str) -> list[str]:
    """The messages of the ERROR lines, in order (vLLM's prefix removed)."""
    return [
        line.split("] ", 1)[1]
        for line in log.splitlines()
        if line.startswith("ERROR ") and "] " in line
    ]


def numbers(text: str) -> list[float]:
    return [float(n) for n in re.findall(r"\d+(?:\.\d+)?", text)]


@pytest.fixture
def checkpoint(monkeypatch):
    """Give the next sparksim the engine's environment for a recipe (as the panel does)."""

    def give(arch: dict, host: dict | None = None) -> None:
        spec = LaunchSpec(run_id=1, host_name="h", argv=[], image="", port=0, checkpoint=arch,
                          host_facts=host if host is not None else {})  # fmt: skip
        for key, value in sim_env(spec).items():
            monkeypatch.setenv(key, value)

    return give


# --- the recipe -----------------------------------------------------------------


def test_the_planners_does_not_fit_recipe_is_refused_with_vllms_load_error(start_sim, checkpoint):
    arch = planner.Architecture(**BF16_70B)
    plan = planner.plan(arch, planner.Flags(0.80, 131072, 32))
    assert plan.verdict is planner.Verdict.DOES_NOT_FIT  # what the panel says of it

    checkpoint(BF16_70B)
    sim = start_sim(*BF16_FLAGS, model=LLAMA_70B, ready=False)
    assert sim.proc.wait(timeout=60) == 1
    log = sim.log()
    said = errors(log)
    load_oom = template("load_oom", "Failed to load model")
    # vLLM's order: its load_model logs the advice with torch's error, EngineCore reports the
    # failure with the exception, the API server gives up.
    assert said[0] == f"{load_oom} (original error: {said[0].split('(original error: ')[1]}"
    assert said[0].split("(original error: ")[1].startswith("CUDA out of memory.")
    assert said[1] == template("engine_failed", "EngineCore failed to start")
    assert said[2].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert re.fullmatch(
        "RuntimeError: " + pattern(template("engine_failed", "Engine core initialization")),
        said[3],
    )
    assert len(said) == 4
    # It failed while loading the weights, after the device check passed and before any KV.
    assert log.index("Starting to load model") < log.index("Loading safetensors checkpoint")
    assert log.index("Loading safetensors checkpoint") < log.index(load_oom)
    for later in ("Model loading took", "Available KV cache memory", "Application startup"):
        assert later not in log
    follower = LogFollower()
    follower.feed(log)
    assert follower.error is not None and follower.error.cause == "load_oom"
    assert "quantized checkpoint" in follower.error.advice and "0.90" in follower.error.advice


def test_without_the_recipes_checkpoint_the_profile_decides(start_sim):
    # The same vector with no checkpoint facts: the model's profile (NVFP4, 40 GB) fits,
    # which is how sparksim used to reach Ready with a recipe real vLLM refuses.
    sim = start_sim(*BF16_FLAGS, model=LLAMA_70B)
    assert "Application startup complete." in sim.log()


def test_a_recipe_that_fits_starts_with_the_planners_own_kv_cache(start_sim, checkpoint):
    nvfp4 = {**BF16_70B, "weight_format": "nvfp4"}
    checkpoint(nvfp4)
    sim = start_sim("--gpu-memory-utilization", "0.85", "--max-model-len", "8192",
                    "--max-num-seqs", "4", model=LLAMA_70B)  # fmt: skip
    log = sim.log()
    assert "Application startup complete." in log
    assert errors(log) == []
    plan = planner.plan(planner.Architecture(**nvfp4), planner.Flags(0.85, 8192, 4))
    assert plan.verdict is planner.Verdict.FITS
    kv = float(log.split("Available KV cache memory: ")[1].split()[0])
    assert kv == round(plan.kv_available_bytes / GIB, 2)


def test_the_hosts_own_memory_decides(start_sim, checkpoint):
    # A host with more OS reserve has less free at start: 0.90, fine on a stock Spark,
    # now asks for more than is free. Same recipe, another host, vLLM's first check.
    checkpoint({**BF16_70B, "weight_format": "nvfp4"}, {"os_reserve_gb": 12.0})
    sim = start_sim("--gpu-memory-utilization", "0.90", "--max-model-len", "8192",
                    model=LLAMA_70B, ready=False)  # fmt: skip
    assert sim.proc.wait(timeout=60) == 1
    said = errors(sim.log())
    text = template("free_memory", "Free memory on device {} ({}/{} GiB) on startup is less than "
                    "desired")  # fmt: skip
    assert re.fullmatch("ValueError: " + pattern(text), said[1]), said
    free, total = numbers(said[1].split("cuda:0 (")[1])[:2]
    assert free == round((128 - 12 - 3) * 1e9 / GIB, 2) and total == 121.7
    assert "Starting to load model" not in sim.log()  # checked before any weight is loaded


# --- each of vLLM's refusals, in its words ------------------------------------------------

CASES = {
    # (1) utilization × total above what is free at start: vLLM's own default 0.92
    "free_memory": (
        "meta-llama/Llama-3.1-8B",
        ["--gpu-memory-utilization", "0.92", "--max-model-len", "8192"],
        "Free memory on device {} ({}/{} GiB) on startup is less than desired",
    ),
    # (3) 65.6 GB of BF16 weights in a 65.3 GB pool: loads, then no room for KV
    "no_cache_memory": (
        "Qwen/Qwen3-32B",
        ["--gpu-memory-utilization", "0.5", "--max-model-len", "4096"],
        "No available memory",
    ),
    # (4) one 262,144-token request needs 80 GiB of KV; 16.4 GiB is there
    "kv_too_small": (
        "nvidia/Llama-3.3-70B-Instruct-FP4",
        ["--gpu-memory-utilization", "0.5", "--max-model-len", "262144"],
        "To serve at least one request",
    ),
}


@pytest.mark.parametrize("key", CASES)
def test_each_refusal_is_vllms_own_message_then_enginecore_failed(start_sim, key):
    model, flags, starts = CASES[key]
    sim = start_sim(*flags, model=model, ready=False)
    assert sim.proc.wait(timeout=60) == 1
    said = errors(sim.log())
    assert said[0] == template("engine_failed", "EngineCore failed to start")
    assert re.fullmatch("ValueError: " + pattern(template(key, starts)), said[1]), said[1]
    assert said[2].startswith("RuntimeError: Engine core initialization failed.")
    follower = LogFollower()
    follower.feed(sim.log())
    assert follower.error is not None and follower.error.cause == key
    if key == "kv_too_small":  # vLLM's estimate sentence, and its format_gib numbers
        estimate = template("kv_too_small", "Based on the available memory")
        assert re.search(pattern(estimate), said[1])
        assert "(80.0 GiB KV cache is needed" in said[1]
    if key == "free_memory":
        assert "(0.92, 111.96 GiB)" in said[1] and "cuda:0 (110.83/121.7 GiB)" in said[1]


# --- where the words come from ---------------------------------------------------------------


def _string_of():
    spec = importlib.util.spec_from_file_location(
        "vllm_contract_tool", ROOT / "tools" / "vllm_contract.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._string_of


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_the_contracts_messages_are_the_real_vllm_sources(version):
    """Each refusal's stored format is the string at its `file:line` in that vLLM's source."""
    python = venv_python(version)
    require_service(
        python.exists(), f"vLLM {version} in {python.parent.parent} (tools/vllm_env.sh)"
    )
    [package] = (python.parent.parent / "lib").glob("python3*/site-packages/vllm")
    string_of = _string_of()
    formats = contract_formats(version)
    for key in REFUSALS:
        assert formats.get(key), f"{key} missing from vLLM {version}'s contract"
        for entry in formats[key]:
            path, line = entry["where"].removeprefix("vllm/").rsplit(":", 1)
            tree = ast.parse((package / path).read_text(encoding="utf-8"))
            found = {
                string_of(node)
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant | ast.JoinedStr | ast.BinOp)
                and getattr(node, "lineno", None) == int(line)
            }
            assert entry["format"] in found, (key, entry["where"])


def test_sparksims_messages_are_filled_from_the_contract():
    from sparksim.vllm_errors import VllmErrors

    said = VllmErrors("0.33.0")
    assert said.no_cache_memory() == "ValueError: " + template("no_cache_memory", "No available")
    assert said.load_oom("X").startswith(template("load_oom", "Failed to load model"))
    assert said.engine_core_failed() == template("engine_failed", "EngineCore failed")
    for version in vllm_contract.available_versions():  # every version sparksim imitates
        assert VllmErrors(version).load_oom("X")


# --- the engines pass the facts, only to sparksim ------------------------------------------


def _spec(**kw) -> LaunchSpec:
    argv = ["vllm", "serve", LLAMA_70B, "--port", "8100", *BF16_FLAGS]
    return LaunchSpec(run_id=3, host_name="sim-1", argv=argv, image="vllm/vllm-openai:v0.11.0",
                      port=8100, **kw)  # fmt: skip


def test_the_docker_engine_passes_the_facts_to_sparksim_and_never_to_vllm():
    spec = _spec(checkpoint=BF16_70B, host_facts={"os_reserve_gb": 6.0})
    sim = DockerEngine(host_name="sim-1", simulated=True, client=object(),
                       image_allowlist=["*"]).container_config(spec)  # fmt: skip
    assert json.loads(sim["environment"][SPARKSIM_CHECKPOINT]) == BF16_70B
    assert json.loads(sim["environment"][SPARKSIM_HOST]) == {"os_reserve_gb": 6.0}
    real = DockerEngine(host_name="spark-1", client=object(),
                        image_allowlist=["vllm/vllm-openai:*"]).container_config(spec)  # fmt: skip
    assert SPARKSIM_CHECKPOINT not in real["environment"]
    assert SPARKSIM_HOST not in real["environment"]


def test_the_recipes_checkpoint_replaces_the_profiles_weights_and_kv_as_wholes():
    profile = resolve_profile(LLAMA_70B).architecture
    env = {SPARKSIM_CHECKPOINT: json.dumps({"total_params_b": 70.6, "weight_format": "bf16"})}
    arch = checkpoint_architecture(profile, env)
    assert (arch.weight_format, arch.total_params_b) == ("bf16", 70.6)
    assert arch.num_layers == profile.num_layers  # the recipe said nothing of its KV
    assert checkpoint_architecture(profile, {}) == profile
    assert (
        host_spec({SPARKSIM_HOST: json.dumps({"os_reserve_gb": 9.0, "new": 1})}).os_reserve_gb
        == 9.0
    )
    with pytest.raises(ValueError, match="not JSON"):
        checkpoint_architecture(profile, {SPARKSIM_CHECKPOINT: "{nope"})


# --- through the panel's runner --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_runner_fails_the_run_with_cause_load_oom(sim_host, operator, member, client_as):
    """An operator's override lets a does-not-fit recipe start: sparksim refuses it as vLLM
    does, and the run fails with the load_oom cause and its advice."""
    from apps.recipes.launch import argv_on
    from apps.recipes.models import Recipe
    from apps.runs import runner
    from apps.runs.models import Run, RunState
    from apps.runs.services import _free_port

    recipe = Recipe.objects.create(
        name="Llama 70B BF16 long", model_id=LLAMA_70B, gpu_memory_utilization=Decimal("0.80"),
        max_model_len=131072, max_num_seqs=32, **BF16_70B,
    )  # fmt: skip
    assert recipe.plan(sim_host.spec()).verdict is planner.Verdict.DOES_NOT_FIT
    # At the host's 50× the 119 GB that fit load in ~25 s before the shard that does not.
    # A port of its own: the fixture's range starts where other sim_host tests' servers do.
    sim_host.port_min = sim_host.port_max = free_port()
    sim_host.save()
    port = _free_port(sim_host)
    # Admitted as the operator's override admits it (admission is tested in tests/runs).
    run = Run.objects.create(recipe=recipe, host=sim_host, started_by=operator, port=port,
                             image=recipe.image, argv=argv_on(recipe, sim_host, port))  # fmt: skip
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.FAILED, run.state
    load_oom = template("load_oom", "Failed to load model")
    assert load_oom in run.failure_reason, run.failure_log[-3000:]
    follower = LogFollower()
    follower.feed(run.failure_log)
    assert follower.error is not None and follower.error.cause == "load_oom"
    assert run.failure_advice == follower.error.advice
    assert "Application startup complete." not in run.failure_log
    assert dataclasses.asdict(recipe.architecture())["weight_format"] == "bf16"
    # The run's page says so, with the advice, to anyone on the team.
    page = client_as(member).get(reverse("run-detail", args=[run.pk]))
    assert page.status_code == 200
    text = html.unescape(page.content.decode())
    assert "Failed to load model - not enough GPU memory" in text
    assert run.failure_advice in text
