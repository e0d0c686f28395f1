"""Issue 38, finding 9: every value vLLM reads as a model, a tokenizer or a folder is a
Hugging Face id or a path inside a host's model directory (its Hugging Face cache).

An outside probe saved `--tokenizer a/../../../../tmp/evil` (with `--trust-remote-code`
vLLM imports the Python it finds there) and a model `/root/.ssh`. Each hostile value below
is refused through the recipe form, the API and YAML / sparkrun import
(`sparkdomain/model_refs.py::model_ref_problem`, behind the model's validators and the
extra arguments' allowlist); a path accepted there is checked again against the host a
run starts on (admission, `apps/recipes/launch.py::argv_on`) and by the last guard in
front of both engines (`assert_safe_argv` with the engine's own model directories), which
judges every vLLM option by the rules of `sparkdomain/option_rules.py` (issue 39): the chat
templates, download directories, plugins and classes that read files or load code never
pass, and every value vLLM reads as a model, tokenizer or folder (`--hf-config-path`, a
speculative config's draft `model`) is judged like the model.
"""

from __future__ import annotations

import posixpath
import shlex
from urllib.parse import unquote

import pytest
import yaml
from huggingface_hub.utils import HFValidationError, validate_repo_id
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.hosts.engines.base import EngineError, LaunchSpec
from apps.hosts.engines.docker import DockerEngine
from apps.hosts.engines.process import ProcessEngine
from apps.hosts.models import Host
from apps.recipes.forms import RecipeForm
from apps.recipes.models import Recipe
from apps.recipes.yaml_io import recipes_from_yaml
from apps.runs.services import RunRefused, run_create
from sparkdomain import option_rules
from sparkdomain.command import PATH_DESTS, UnsafeCommand, assert_safe_argv
from sparkdomain.flags import FlagError, validate_extra_args
from sparkdomain.model_refs import HF_CACHE_IN_CONTAINER, is_hub_id, model_ref_problem
from tests.api.conftest import assert_error
from tests.recipes.factories import recipe_data
from vllm_adapter import contract as vllm_contract

IN_CACHE = f"{HF_CACHE_IN_CONTAINER}/hub/models--org--tiny/snapshots/0123abcd"
HOSTILE = [
    "a/../../../../tmp/evil",  # the probe's --tokenizer
    "/root/.ssh",  # the probe's model
    "~/.ssh",
    "~root/.ssh",
    "..",
    "./../x",
    "%2e%2e/x",
    "%252e%252e/%252e%252e/etc",  # escaped twice
    "org/../../x",
    "org/%2e%2e",
    "a/b\x00",
    "a\\..\\..\\x",
    "..\\x",
    "org\\name",
    f"{HF_CACHE_IN_CONTAINER}/../../../etc",  # starts inside, climbs out
    f"{HF_CACHE_IN_CONTAINER}/hub/../../../../tmp/evil",
    HF_CACHE_IN_CONTAINER,  # the cache itself (its token file), not a model inside it
    "/tmp/evil",
    "/models/my-model",  # an absolute path outside every model directory
    "s3://bucket/model",
    "org/name/extra",
    "org--x/name",
    "-org/name",
    "org/name.git",
]
GOOD = ["nvidia/Qwen3.5-35B-A3B-NVFP4", "Qwen/Qwen3-32B", "sparkpanel/tiny_llama", IN_CACHE]
# Options that make vLLM read a file or a folder, or import Python: never in a recipe,
# never past the last guard. (A speculative or compilation config is JSON judged key by
# key: none of these values is one it takes. `--hf-config-path` names a model's config: a
# PATH, tests/sparkdomain/test_option_rules.py.)
FILE_OR_CODE_OPTIONS = [
    "--chat-template", "--download-dir", "--speculative-config",
    "--tool-parser-plugin", "--reasoning-parser-plugin", "--middleware", "--logits-processors",
    "--worker-cls", "--worker-extension-cls", "--scheduler-cls", "--lora-modules",
    "--allowed-local-media-path", "--model-loader-extra-config", "--kv-transfer-config",
    "--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs", "--uds", "--io-processor-plugin",
    "--mm-encoder-fp8-scale-path", "--compilation-config", "--config", "--hf-token",
]  # fmt: skip
BASE = ["vllm", "serve", "org/model", "--gpu-memory-utilization", "0.80"]


@pytest.fixture
def spark(db):
    """A Spark whose admin set a Hugging Face cache: its containers see it at
    /root/.cache/huggingface, the only model directory a recipe may name a path in."""
    return Host.objects.create(name="paths-spark", engine=Host.Engine.DOCKER,
                               hf_cache_path="/srv/hf-cache")  # fmt: skip


def _tokenizer_lines(value: str) -> str:
    return f"--tokenizer {shlex.quote(value)}\n--trust-remote-code"


# --- refused through the form, the API and YAML / sparkrun import ------------------------


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_model_or_tokenizer_is_refused_by_the_recipe_form(spark, value):
    form = RecipeForm(data=recipe_data(model_id=value))
    assert not form.is_valid() and "model_id" in form.errors, value
    if "\x00" not in value:  # Django's own null-character check speaks first there
        assert " ".join(form.errors["model_id"]).startswith("model: "), form.errors
    form = RecipeForm(data=recipe_data(extra_args=_tokenizer_lines(value)))
    assert not form.is_valid() and "extra_args" in form.errors, value
    assert "--tokenizer" in " ".join(form.errors["extra_args"])
    assert not Recipe.objects.filter(name="Test recipe").exists()


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_model_or_tokenizer_is_refused_by_the_api(spark, operator, api_as, value):
    api = api_as(operator)
    body = {"name": "Path probe", "model_id": "org/model", "gpu_memory_utilization": "0.80",
            "max_model_len": 8192, "max_num_seqs": 2}  # fmt: skip
    error = assert_error(api.post("/recipes", body | {"model_id": value}), 422, "invalid")
    assert "model_id" in error["fields"], error
    extra = ["--tokenizer", value, "--trust-remote-code"]
    error = assert_error(api.post("/recipes", body | {"extra_args": extra}), 422, "invalid")
    assert "extra_args" in error["fields"], error
    assert not Recipe.objects.filter(name="Path probe").exists()


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_model_or_tokenizer_is_refused_by_yaml_and_sparkrun_import(spark, value):
    before = Recipe.objects.count()
    recipe = {"name": "YAML probe", "model_id": "org/model", "gpu_memory_utilization": 0.8,
              "max_model_len": 8192}  # fmt: skip
    for entry in (
        recipe | {"model_id": value},
        recipe | {"extra_args": ["--tokenizer", value, "--trust-remote-code"]},
    ):
        result = recipes_from_yaml(yaml.safe_dump({"sparkpanel": 1, "recipes": [entry]}))
        assert not result.ok, entry
    sparkrun = {"model": value, "runtime": "vllm", "container": "vllm/vllm-openai:v0.11.0",
                "defaults": {"gpu_memory_utilization": 0.8, "max_model_len": 8192}}  # fmt: skip
    result = recipes_from_yaml(yaml.safe_dump(sparkrun))
    assert not result.ok, value
    assert Recipe.objects.count() == before


def test_the_probes_values_are_refused_through_the_import_api(spark, operator, api_as):
    text = yaml.safe_dump({"recipes": [{
        "name": "Probe", "model_id": "/root/.ssh", "gpu_memory_utilization": 0.8,
        "max_model_len": 8192,
        "extra_args": ["--tokenizer", "a/../../../../tmp/evil", "--trust-remote-code"],
    }]})  # fmt: skip
    error = assert_error(api_as(operator).post("/recipes/import", {"yaml": text}), 422)
    shown = str(error["fields"])
    assert "model_id" in shown and "/root/.ssh" in shown and "outside" in shown
    assert not Recipe.objects.filter(name="Probe").exists()


# --- accepted: Hub ids, and paths inside the model directory -----------------------------


@pytest.mark.parametrize("value", GOOD)
def test_hub_ids_and_paths_in_the_model_directory_are_accepted(spark, operator, api_as, value):
    form = RecipeForm(data=recipe_data(name="Form ok", model_id=value,
                                       extra_args=_tokenizer_lines(value)))  # fmt: skip
    assert form.is_valid(), form.errors
    body = {"name": "API ok", "model_id": value, "gpu_memory_utilization": "0.80",
            "max_model_len": 8192, "extra_args": ["--tokenizer", value]}  # fmt: skip
    response = api_as(operator).post("/recipes", body)
    assert response.status_code == 201, response.data
    entry = {"name": "YAML ok", "model_id": value, "gpu_memory_utilization": 0.8,
             "max_model_len": 8192, "extra_args": ["--tokenizer", value]}  # fmt: skip
    result = recipes_from_yaml(yaml.safe_dump({"recipes": [entry]}))
    assert result.ok, result.problems
    assert Recipe.objects.get(name="YAML ok").extra_args == ["--tokenizer", value]


def test_without_any_model_directory_a_path_is_refused_with_the_reason(db):
    form = RecipeForm(data=recipe_data(model_id=IN_CACHE))
    assert not form.is_valid()
    assert "no model directory" in " ".join(form.errors["model_id"])


# --- the host a run starts on, and the last guard in front of both engines ------------------


def test_a_path_must_lie_in_the_model_directory_of_the_host_a_run_starts_on(
    spark, sim_host, qwen, operator, tmp_path
):
    # Saved for the Spark's containers: the simulated process host has no cache at all.
    Recipe.objects.filter(pk=qwen.pk).update(model_id=IN_CACHE)
    qwen.refresh_from_db()
    with pytest.raises(RunRefused) as refused:
        run_create(recipe=qwen, host=sim_host, user=operator)
    assert refused.value.code == "unsafe_recipe" and "no model directory" in str(refused.value)
    # Its cache is a directory of the host itself (a local server's HF_HOME), not the
    # container's mount: still outside.
    sim_host.hf_cache_path = str(tmp_path / "hf")
    sim_host.save()
    with pytest.raises(RunRefused, match="outside the model directories"):
        run_create(recipe=qwen, host=sim_host, user=operator)
    # A row changed behind the validators' back (the probe's tokenizer) is refused too.
    inside = f"{tmp_path}/hf/hub/models--org--tiny/snapshots/0123abcd"
    Recipe.objects.filter(pk=qwen.pk).update(
        model_id=inside, extra_args=["--tokenizer", "a/../../../../tmp/evil", "--trust-remote-code"]
    )
    qwen.refresh_from_db()
    with pytest.raises(RunRefused, match=r"climbs out"):
        run_create(recipe=qwen, host=sim_host, user=operator)
    Recipe.objects.filter(pk=qwen.pk).update(extra_args=["--tokenizer", inside])
    qwen.refresh_from_db()
    run = run_create(recipe=qwen, host=sim_host, user=operator)
    assert run.argv[2] == inside and run.argv[run.argv.index("--tokenizer") + 1] == inside


def _spec(argv: list[str]) -> LaunchSpec:
    return LaunchSpec(run_id=7, host_name="spark-1", argv=argv, image="vllm/vllm-openai:v1",
                      port=8100)  # fmt: skip


def test_both_engines_judge_paths_by_their_own_model_directory(tmp_path):
    cached = DockerEngine(host_name="spark-1", hf_cache="/srv/hf", client=object())
    bare = DockerEngine(host_name="spark-1", client=object())
    inside = [*BASE[:2], IN_CACHE, *BASE[3:], "--tokenizer", IN_CACHE, "--trust-remote-code"]
    assert cached.container_config(_spec(inside))["command"][1] == IN_CACHE
    with pytest.raises(EngineError, match="no model directory"):
        bare.container_config(_spec(inside))
    for hostile in (["--tokenizer", "/tmp/evil", "--trust-remote-code"],
                    ["--tokenizer=a/../../../../tmp/evil"], ["--model", "/root/.ssh"],
                    ["--chat-template", f"{HF_CACHE_IN_CONTAINER}/x.jinja"]):  # fmt: skip
        with pytest.raises(EngineError, match="refused to start"):
            cached.container_config(_spec([*BASE, *hostile]))
    local = ProcessEngine(runs_dir=tmp_path, simulated=False, hf_home=str(tmp_path / "hf"))
    mine = f"{tmp_path}/hf/hub/models--org--m/snapshots/abc"
    assert local.command([*BASE[:2], mine, *BASE[3:]])[2] == mine
    for model in (IN_CACHE, "/root/.ssh", f"{tmp_path}/hf/../elsewhere"):
        with pytest.raises(EngineError, match="refused to start"):
            local.command([*BASE[:2], model, *BASE[3:]])


@pytest.mark.parametrize("option", FILE_OR_CODE_OPTIONS)
def test_every_option_that_reads_a_file_or_loads_code_is_refused_everywhere(option):
    # It is an option of a vLLM SparkPanel knows (so the list does not go stale)...
    assert any(
        c.option(option) for c in map(vllm_contract.load, vllm_contract.available_versions())
    )
    # ...the recipe's allowlist refuses it, and so does the last guard, whatever its value.
    with pytest.raises(FlagError):
        validate_extra_args([option, f"{IN_CACHE}/x"], (HF_CACHE_IN_CONTAINER,))
    for value in (f"{IN_CACHE}/x", "org/model", '{"model": "/tmp/evil"}', "x"):
        for vector in ([*BASE, option, value], [*BASE, f"{option}={value}"]):
            with pytest.raises(UnsafeCommand):
                assert_safe_argv(vector, model_dirs=(HF_CACHE_IN_CONTAINER,))


def test_every_vllm_option_is_refused_by_the_last_guard_or_bounded():
    """Each spelling of every option of every known vLLM, with a path outside the model
    directory as its value: the guard lets it through only if the rules allow the option
    (a recipe field, a PATH, DATA) or the panel sets it — never one that reads a file or
    loads code, and never with that path as a model, tokenizer or folder."""
    contracts = [vllm_contract.load(v) for v in vllm_contract.available_versions()]
    passed, refused = set(), 0
    for contract in contracts:
        for option in contract.options:
            for string in option.all_strings:
                for vector in ([*BASE, string, "/tmp/evil"], [*BASE, f"{string}=/tmp/evil"]):
                    try:
                        assert_safe_argv(vector, model_dirs=(HF_CACHE_IN_CONTAINER,))
                    except UnsafeCommand:
                        refused += 1
                        continue
                    passed.add((string, option.dest))
                    rule = option_rules.classify(option)
                    assert rule.allowed or option.dest in option_rules.PANEL_SETS, (string, rule)
    assert refused > 500, refused
    denied = {
        option.dest
        for c in contracts
        for flag in FILE_OR_CODE_OPTIONS
        if (option := c.option(flag))
    }
    assert not {dest for _, dest in passed} & denied, passed
    # A path value never passes where vLLM reads one (switches take no value: it is a
    # stray positional there, which vLLM refuses).
    assert not {dest for _, dest in passed} & PATH_DESTS, passed


def test_trust_remote_code_runs_only_code_from_the_hub_or_the_model_directory():
    for tokenizer in ("org/tok", IN_CACHE):
        assert_safe_argv([*BASE, "--trust-remote-code", "--tokenizer", tokenizer],
                         model_dirs=(HF_CACHE_IN_CONTAINER,))  # fmt: skip
    for tokenizer in HOSTILE:
        with pytest.raises(UnsafeCommand):
            assert_safe_argv([*BASE, "--trust-remote-code", "--tokenizer", tokenizer],
                             model_dirs=(HF_CACHE_IN_CONTAINER,))  # fmt: skip
        with pytest.raises(FlagError):
            validate_extra_args(["--trust-remote-code", "--tokenizer", tokenizer],
                                (HF_CACHE_IN_CONTAINER,))  # fmt: skip


# --- the rule itself ------------------------------------------------------------------------

PROPERTY = settings(max_examples=400, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
FRAGMENTS = ["..", ".", "%2e", "%2E", "%252e", "%2f", "\\", "/", "//", "~", "a", "hub", "x.y",
             "-", "_", HF_CACHE_IN_CONTAINER, "\x00", "%00", " ", "org", "tmp"]  # fmt: skip


def _hub_valid(value: str) -> bool:
    try:
        validate_repo_id(value)
    except HFValidationError:
        return False
    return value.count("/") == 1


@PROPERTY
@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8).map("".join))
def test_whatever_the_rule_accepts_stays_in_the_model_directory_or_is_a_hub_id(value):
    """An oracle of its own: decode every escape, read backslashes as '/', let the
    filesystem's `..` apply (relative to a working directory) — what the rule accepts is
    a Hub id by huggingface_hub's own check, or lands inside the model directory."""
    if model_ref_problem(value, field="model", model_dirs=(HF_CACHE_IN_CONTAINER,)):
        return
    text = value
    for _ in range(5):
        text = unquote(text)
    text = text.replace("\\", "/")
    if not text.startswith("/"):
        assert _hub_valid(value) and "\x00" not in text, value
        assert posixpath.normpath(f"/srv/cwd/{text}").startswith("/srv/cwd/"), value
        return
    assert posixpath.normpath(text).startswith(HF_CACHE_IN_CONTAINER + "/"), value


@settings(max_examples=600, deadline=None, derandomize=True, database=None)
@given(st.text(alphabet="ab9_-./", min_size=1, max_size=14))
def test_the_hub_rule_is_huggingface_hubs_own(value):
    assert is_hub_id(value) == _hub_valid(value), value


def test_the_hub_rule_keeps_the_hubs_length_limit():
    assert is_hub_id("o" * 96 + "/" + "n" * 96) and _hub_valid("o" * 96 + "/" + "n" * 96)
    assert not is_hub_id("o" * 97 + "/n") and not _hub_valid("o" * 97 + "/n")
    assert not is_hub_id("o/" + "n" * 97) and not _hub_valid("o/" + "n" * 97)


def test_a_row_saved_before_the_rule_is_shown_with_its_problem_never_a_500(
    qwen, operator, client_as
):
    Recipe.objects.filter(pk=qwen.pk).update(
        extra_args=["--tokenizer", "a/../../../../tmp/evil", "--trust-remote-code"]
    )
    response = client_as(operator).get(qwen.get_absolute_url())
    assert response.status_code == 200
    assert "climbs out of a directory" in response.content.decode()
