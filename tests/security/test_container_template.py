"""Whatever a recipe says, the container is the fixed template.

A property test feeds RecipeForm (the validation behind the recipe pages, the API and YAML
import) generated recipes: model ids, images, served names, parsers, utilizations and extra
arguments, valid and hostile (`--privileged`, `-v /:/host`, `--network host`, `;`, `$(…)`,
newlines, NUL, …). Every recipe the form accepts is turned into a `vllm serve` vector and
then into the keyword arguments of `containers.create` by DockerEngine.container_config
(the function `start` hands to Docker; no Docker engine is involved). The properties:

- the vector is `vllm serve <model> …`, one utilization flag, at most 0.90, no container
  option and no control character in any element;
- the container is never privileged, adds no capability, sees no device but the GPU
  request, shares no host namespace (host networking only when the host's admin chose it),
  mounts nothing but the admin's Hugging Face cache, keeps no-new-privileges, runs the list
  command with the fixed `vllm` entrypoint (no shell), and uses an allowlisted image. A
  worker whose settings mount a vLLM venv into the panel's empty image (VLLM_CONTAINER_VENV,
  for machines without a GPU) adds exactly those read-only mounts and that venv's `vllm`
  as the entrypoint; the worker's VLLM_ENV never replaces the token or HF_HOME.

A second property skips the form: any vector the last guard (`assert_safe_argv`) lets
through must still hold the utilization rule and the fixed entrypoint, whatever path built
it (a row edited in the database, a future code path).

Both properties also hold the path rule (issue 38): the model, every `--tokenizer` and
`--hf-config-path` and a speculative config's draft `model` are a Hugging Face id or a path
inside the host's model directory (its Hugging Face cache, at /root/.cache/huggingface in
the container), and no option that reads a file or loads code (`--chat-template`,
`--download-dir`, a tool-parser plugin…) reaches a container (issue 39: the last guard
judges options by `sparkdomain/option_rules.py`).
"""

from __future__ import annotations

import json
import posixpath
import shlex
from decimal import Decimal, InvalidOperation

import docker.errors
import pytest
from docker.types import DeviceRequest
from huggingface_hub.utils import HFValidationError, validate_repo_id
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.hosts.engines.base import EngineError, LaunchSpec
from apps.hosts.engines.docker import (
    HF_CACHE_IN_CONTAINER,
    SIM_BASE_IMAGE,
    DockerEngine,
    MountedVllm,
    container_name,
    image_allowed,
)
from apps.hosts.models import Host
from apps.recipes.forms import RecipeForm
from apps.recipes.yaml_io import recipe_form_data
from sparkdomain.command import UnsafeCommand, assert_safe_argv, serve_argv
from sparkdomain.spark import MAX_GPU_MEMORY_UTILIZATION
from tests.recipes.factories import recipe_data

EXAMPLES = 200
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
UTILIZATION = "--gpu-memory-utilization"
HF_TOKEN = "hf_TemplateTestToken0123456789"
# Every keyword the template may pass to containers.create; anything new must be reviewed.
TEMPLATE_KEYS = {
    "image", "entrypoint", "command", "name", "labels", "environment", "volumes", "shm_size",
    "privileged", "cap_add", "security_opt", "detach", "stdin_open", "tty", "init",
    "log_config", "working_dir", "device_requests", "network_mode", "ports", "mounts",
}  # fmt: skip
# Container options (docker run's, and vLLM's own config file) that must never be argv.
CONTAINER_OPTIONS = {
    "--privileged", "-v", "--volume", "--mount", "--device", "--cap-add", "--network", "--net",
    "--pid", "--ipc", "--userns", "--uts", "--security-opt", "--entrypoint", "-e", "--env",
    "--env-file", "--gpus", "--runtime", "--user", "-u", "--config",
}  # fmt: skip
SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "dash", "zsh", "env", "/usr/bin/env"}

HOSTILE_TOKENS = [
    "--privileged", "-v", "/:/host", "--volume=/:/host", "--device", "/dev/mem",
    "--device=/dev/nvidia0", "--cap-add", "SYS_ADMIN", "--cap-add=ALL", "--network", "host",
    "--net=host", "--pid", "--pid=host", "--ipc", "--ipc=host", "--mount",
    "type=bind,src=/,dst=/host", "--entrypoint", "/bin/sh", "--userns=host", "--security-opt",
    "seccomp=unconfined", "-e", "LD_PRELOAD=/tmp/x.so", "--env", ";", "&&", "||", "|", ">",
    "$(id)", "`id`", "${HOME}", "a\nb", "\n--privileged", "x\x00y", "\x00", "--seed\n--privileged",
    UTILIZATION, "0.95", f"{UTILIZATION}=0.99", "--gpu_memory_utilization", "--gpu-memory-util",
    "--gpu-mem", "--config", "/tmp/c.yaml", "--host", "0.0.0.0", "--port", "22", "--model",  # noqa: S104
    "evil/model", "-q", "-tp", "--served-model-name", "-O3", "--seed=1;id", "--revision",
    "../../etc", "--tokenizer", "$(curl evil)", "#", "--trust-remote-code=1",
    # Paths and options that would read a file or load code (issue 38).
    "/tmp/evil", "a/../../../../tmp/evil", "%2e%2e/x", "/root/.ssh", "--chat-template",
    "/etc/passwd", "--download-dir", "--speculative-config", '{"model": "/tmp/evil"}',
    "--tool-parser-plugin", "/tmp/p.py", "--hf-config-path", "--middleware", "-O3",
]  # fmt: skip
ALLOWED_TOKENS = [
    "--trust-remote-code", "--enable-chunked-prefill", "--async-scheduling", "--load-format",
    "fastsafetensors", "--dtype", "bfloat16", "--seed", "7", "--seed=42",
    "--tokenizer", "org/tok", "--block-size", "16", "--max-logprobs", "5", "--generation-config",
    "vllm", "/root/.cache/huggingface/hub/tok",
]  # fmt: skip
HOSTILE_MODELS = [
    "--privileged", "a/b --privileged", "a/b;id", "/models/../../etc", "$(id)/x", "-v/x",
    "a/b\n--gpu-memory-utilization 0.95", "a/b\x00", "a/b c", "../x/y", "/", "a/b/c",
    # Outside every model directory, or climbing out of one (issue 38).
    "/models/my-model", "/root/.ssh", "~/.ssh", "%2e%2e/x", "a/../../../../tmp/evil",
    "/root/.cache/huggingface/../../../etc", "org/../../x", "a\\b", "..",
]  # fmt: skip
GOOD_IMAGES = [
    "vllm/vllm-openai:cu130-nightly", "vllm/vllm-openai:v0.11.0", "nvcr.io/nvidia/vllm:25.09-py3",
    "localhost:5000/vllm/vllm-openai:dev",
]  # fmt: skip
HOSTILE_IMAGES = [
    "evil/miner:latest", "vllm/vllm-openai:x --privileged", "vllm/vllm-openai:*",
    "--privileged", "vllm/vllm-openai:latest;id", "VLLM/Upper:tag", "vllm/vllm-openai:a\nb",
    "vllm/vllm-openai@sha256:zz", "",
]  # fmt: skip
UTILIZATIONS = [
    "0.50", "0.80", "0.85", "0.9", "0.90", "0.899", "0.905", "0.91", "0.95", "1", "1.0", "0",
    "-0.1", "NaN", "Infinity", "1e-1", "9e-1", " 0.90", "0.90 ", "0,9", "",
]  # fmt: skip
ALLOWLISTS = [[], ["vllm/vllm-openai:*"], ["nvcr.io/nvidia/vllm:25.09-py3"]]
MOUNTED_VLLM = MountedVllm(
    "/opt/vllm-cpu", ("/usr", "/bin", "/lib", "/opt/py3.11", "/opt/vllm-cpu")
)
WORKER_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HOME": "/srv/hf",
              "HF_TOKEN": "hf_FromTheWorkersVllmEnv"}  # fmt: skip

VALID_GROUPS = [
    ["--trust-remote-code"], ["--enable-chunked-prefill"], ["--async-scheduling"],
    ["--load-format", "fastsafetensors"], ["--dtype", "bfloat16"], ["--seed", "7"],
    ["--tokenizer", "org/tok"], ["--block-size=16"],
    ["--max-logprobs", "5"], ["--generation-config", "vllm"],
    ["--tokenizer", "/root/.cache/huggingface/hub/tok"],
]  # fmt: skip
anything = st.one_of(
    st.sampled_from(HOSTILE_TOKENS), st.sampled_from(ALLOWED_TOKENS), st.text(max_size=12)
)


def _insert(items: list[str], token: str, at: int) -> list[str]:
    return [*items[:at], token, *items[at:]]


# Short cousins of the validators' own patterns (sparkdomain/flags.py): cheap to generate,
# and the form still decides what passes.
SHORT_HF_ID = r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,12}/[A-Za-z0-9._-]{1,12}\Z"
SHORT_IMAGE = r"\A([a-z0-9.-]{1,8}(:[0-9]{1,5})?/)?[a-z0-9]{1,8}([._-][a-z0-9]{1,4})?(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,8})?\Z"
SHORT_SERVED_NAME = r"\A[A-Za-z0-9][A-Za-z0-9._/:-]{0,12}\Z"
GOOD_UTILIZATIONS = st.one_of(
    st.sampled_from(["0.5", "0.80", "0.9", "0.90"]),
    st.decimals(min_value=Decimal("0.01"), max_value=Decimal("0.90"), places=2).map(str),
)
VALID_FIELDS = {
    "model_id": st.one_of(
        st.sampled_from(
            ["Qwen/Qwen3-32B", f"{HF_CACHE_IN_CONTAINER}/hub/my-model", "nvidia/Llama-3.3-70B-FP4"]
        ),
        st.from_regex(SHORT_HF_ID),
    ),
    "image": st.one_of(st.sampled_from(GOOD_IMAGES), st.from_regex(SHORT_IMAGE)),
    "served_model_name": st.one_of(st.just(""), st.from_regex(SHORT_SERVED_NAME)),
    "reasoning_parser": st.sampled_from(["", "deepseek_r1", "qwen3"]),
    "tool_call_parser": st.sampled_from(["", "hermes"]),
    "gpu_memory_utilization": GOOD_UTILIZATIONS,
    "quantization": st.sampled_from(["", "nvfp4", "fp8"]),
    "kv_cache_dtype": st.sampled_from(["auto", "fp8"]),
    "extra_args": st.lists(
        st.sampled_from(VALID_GROUPS), max_size=4, unique_by=lambda g: g[0].split("=")[0]
    ).map(lambda groups: [t for g in groups for t in g]),
}
HOSTILE_FIELDS = {
    "model_id": st.sampled_from(HOSTILE_MODELS),
    "image": st.sampled_from(HOSTILE_IMAGES),
    "served_model_name": st.sampled_from(["--privileged", "x y", "a;b", "-x", "x\n--port 22"]),
    "reasoning_parser": st.sampled_from(["--privileged", "a b", "x\x00"]),
    "tool_call_parser": st.sampled_from(["x;id", "$(id)", "-v"]),
    "gpu_memory_utilization": st.one_of(
        st.sampled_from(UTILIZATIONS),
        st.decimals(min_value=0, max_value=Decimal("1.2"), places=3).map(str),
    ),
    "quantization": st.sampled_from(["--privileged", "nvfp4 --privileged"]),
    "kv_cache_dtype": st.sampled_from(["fp8;id", "--privileged"]),
    "extra_args": st.one_of(
        # A hostile token slipped in among allowed flags, or anything at all.
        st.tuples(
            st.lists(st.sampled_from(VALID_GROUPS), max_size=3, unique_by=lambda g: g[0]),
            st.sampled_from(HOSTILE_TOKENS),
            st.integers(min_value=0, max_value=6),
        ).map(lambda t: _insert([x for g in t[0] for x in g], t[1], t[2])),
        st.lists(anything, min_size=1, max_size=6),
    ),
}


@st.composite
def recipes(draw) -> dict:
    """A valid recipe; or one with a single hostile field; or hostile anywhere."""
    mode = draw(st.sampled_from(["valid", "one hostile field", "anything"]))
    target = draw(st.sampled_from(sorted(HOSTILE_FIELDS)))
    fields = {}
    for name in VALID_FIELDS:
        if mode == "anything":
            hostile = draw(st.booleans())
        else:
            hostile = mode == "one hostile field" and name == target
        fields[name] = draw((HOSTILE_FIELDS if hostile else VALID_FIELDS)[name])
    return fields


# How extra arguments arrive: the recipe page's text box, a pasted quoted line, or a list
# (the API and YAML import).
channels = st.sampled_from(["lines", "shlex", "list"])
hosts = st.fixed_dictionaries(
    {
        "gpus": st.booleans(),
        "network": st.sampled_from(["bridge", "host"]),
        "publish_address": st.sampled_from(["", "127.0.0.1"]),
        "hf_cache": st.sampled_from(["", "/srv/hf-cache"]),
        "image_allowlist": st.sampled_from(ALLOWLISTS),
        "shm_size_gib": st.sampled_from([1, 16, 64]),
        "port": st.integers(min_value=1024, max_value=65535),
        # What the host's worker adds from its own settings, never from a recipe.
        "mounted_vllm": st.sampled_from([None, MOUNTED_VLLM]),
        "server_env": st.sampled_from([{}, WORKER_ENV]),
        # An admin's read-only model folders (Host.model_folders), never a recipe's volumes.
        "model_folders": st.sampled_from([[], ["/data/models/draft:/drafter", "/srv/m"]]),
    }
)


class NoDocker:
    """A Docker client that fails the test if the template tries to use it."""

    def __getattr__(self, name):
        raise AssertionError(f"container_config touched the Docker client ({name})")


def _engine(host: dict) -> DockerEngine:
    return DockerEngine(
        host_name="spark-1", gpus=host["gpus"], network=host["network"],
        publish_address=host["publish_address"], hf_cache=host["hf_cache"], hf_token=HF_TOKEN,
        model_folders=host.get("model_folders"),
        shm_size_gib=host["shm_size_gib"], image_allowlist=host["image_allowlist"],
        server_env=host.get("server_env"), mounted_vllm=host.get("mounted_vllm"),
        client=NoDocker(),
    )  # fmt: skip


def _flag(arg: str) -> str:
    """A flag as vLLM's parser reads it: the part before '=', underscores as dashes."""
    return arg.split("=", 1)[0].replace("_", "-")


def _utilizations(argv: list[str]) -> list[str]:
    """Every value the vector gives the utilization flag, however it is spelled; an
    abbreviation (argparse accepts unique prefixes) is reported as such."""
    values = []
    for i, arg in enumerate(argv[3:], start=3):
        if not arg.startswith("--"):
            continue
        flag = _flag(arg)
        if flag == UTILIZATION:
            values.append(arg.split("=", 1)[1] if "=" in arg else (argv[i + 1 : i + 2] or [""])[0])
        elif UTILIZATION.startswith(flag) and len(flag) > 2:
            values.append(f"abbreviated as {arg}")
    return values


# Options that make vLLM read a file or import code: none may reach a container.
# (A speculative config and --hf-config-path name models: their values are judged below.)
FILE_OR_CODE_OPTIONS = {
    "--chat-template", "--download-dir", "--tool-parser-plugin",
    "--middleware", "--logits-processors", "--worker-cls",
    "--worker-extension-cls", "--ssl-keyfile", "--ssl-certfile", "--allowed-local-media-path",
    "--lora-modules", "--reasoning-parser-plugin", "--model-loader-extra-config", "-O3",
}  # fmt: skip


def _path_values(argv: list[str]) -> list[str]:
    """The model, every --tokenizer and --hf-config-path value of a vector, and the draft
    `model` of every speculative config (its JSON, or `--speculative-config.model`)."""
    values = [argv[2]]
    for i, arg in enumerate(argv[3:], start=3):
        value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1 : i + 2] or [""])[0]
        if _flag(arg) in {"--tokenizer", "--hf-config-path", "--speculative-config.model"}:
            values.append(value)
        elif _flag(arg) in {"--speculative-config", "-sc"}:
            try:
                config = json.loads(value)
            except ValueError:
                continue
            if isinstance(config, dict) and config.get("model") is not None:
                values.append(config["model"])
    return values


def _hub_id_or_inside(value: str, dirs: tuple[str, ...]) -> bool:
    """An oracle of its own: huggingface_hub's rule for `org/name`, or a plain absolute path
    strictly inside one of `dirs`, or one given with a trailing '/' (a model folder) itself
    (no '..', '~', '%' or backslash at all)."""
    if "/" in value and not value.startswith("/"):
        try:
            validate_repo_id(value)
            return True
        except HFValidationError:
            return False
    if any(c in value for c in "~%\\") or ".." in value.split("/"):
        return False
    path = posixpath.normpath(value)
    return any(path == d.rstrip("/") if d.endswith("/") else False for d in dirs) or any(
        path.startswith(d.rstrip("/") + "/") for d in dirs
    )


def _check_argv(argv: list[str], model_id: str, bind: str, port: int) -> None:
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    assert argv[:3] == ["vllm", "serve", model_id] and not model_id.startswith("-")
    for value in _path_values(argv):  # the only model directory the database has
        assert _hub_id_or_inside(value, (HF_CACHE_IN_CONTAINER,)), f"path {value!r} accepted"
    assert not {_flag(a) for a in argv} & FILE_OR_CODE_OPTIONS
    for arg in argv:
        assert not any(ord(c) < 32 or c == "\x7f" for c in arg), f"control character in {arg!r}"
        assert _flag(arg) not in CONTAINER_OPTIONS, f"container option {arg!r} in the vector"
    [value] = _utilizations(argv)
    assert 0 < Decimal(value) <= MAX_GPU_MEMORY_UTILIZATION
    assert [argv[i + 1] for i, a in enumerate(argv) if _flag(a) == "--host"] == [bind]
    assert [argv[i + 1] for i, a in enumerate(argv) if _flag(a) == "--port"] == [str(port)]


def _check_container(config: dict, host: dict, argv: list[str], image: str) -> None:
    assert set(config) <= TEMPLATE_KEYS, f"new container options: {set(config) - TEMPLATE_KEYS}"
    assert config["privileged"] is False
    assert config["cap_add"] == []
    assert config["security_opt"] == ["no-new-privileges"]
    if host["gpus"]:
        assert config["device_requests"] == [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    else:
        assert "device_requests" not in config
    if host["network"] == "host":  # the admin's choice on the host, never the recipe's
        assert config["network_mode"] == "host" and "ports" not in config
    else:
        assert "network_mode" not in config
        published = (
            (host["publish_address"], host["port"]) if host["publish_address"] else host["port"]
        )
        assert config["ports"] == {f"{host['port']}/tcp": published}
    expected_mounts = (
        {host["hf_cache"]: {"bind": HF_CACHE_IN_CONTAINER, "mode": "rw"}}
        if host["hf_cache"]
        else {}
    )
    mounted = host.get("mounted_vllm")
    expected_env = {"HF_TOKEN": HF_TOKEN}  # from the worker's HF_TOKEN, not the recipe
    expected_env.update({k: v for k, v in (host.get("server_env") or {}).items()
                         if k not in ("HF_TOKEN", "HF_HOME")})  # fmt: skip
    if mounted:  # the worker's vLLM venv: read-only, in the panel's empty image
        expected_mounts.update({path: {"bind": path, "mode": "ro"} for path in mounted.paths})
        expected_env.update(PYTHONUNBUFFERED="1", HOME="/root")
    assert config["volumes"] == expected_mounts
    folders = host.get("model_folders") or []
    expected_binds = [
        {"Target": target, "Source": source, "Type": "bind", "ReadOnly": True}
        for source, _, target in (e.partition(":") for e in folders)
    ]
    expected_binds = [{**b, "Target": b["Target"] or b["Source"]} for b in expected_binds]
    assert [dict(m) for m in config.get("mounts", [])] == expected_binds
    assert config["entrypoint"] == [mounted.executable if mounted else "vllm"]
    assert isinstance(config["command"], list) and config["command"] == argv[1:]
    assert config["command"][0] == "serve"
    assert config["image"] == (SIM_BASE_IMAGE if mounted else image)
    assert image_allowed(host["image_allowlist"], image)
    assert config["environment"] == expected_env
    assert config["name"] == container_name("spark-1", 7)
    assert config["tty"] is False and config["stdin_open"] is False


def _form(fields: dict, channel: str) -> RecipeForm:
    extra = fields["extra_args"]
    data = recipe_data(**{k: v for k, v in fields.items() if k != "extra_args"})
    if channel == "list":  # what the API and YAML import do with a list
        return RecipeForm(data=recipe_form_data({**data, "extra_args": extra}))
    text = shlex.join(extra) if channel == "shlex" else "\n".join(extra)
    return RecipeForm(data={**data, "extra_args": text})


@pytest.mark.django_db
def test_whatever_the_recipe_form_accepts_becomes_the_fixed_container_template():
    seen = {"accepted": 0, "rejected": 0, "image_refused": 0, "with_extra_args": 0,
            "path_refused": 0}  # fmt: skip
    # A Spark with a Hugging Face cache: a recipe may name a path inside it (issue 38).
    Host.objects.create(name="tpl-spark", engine=Host.Engine.DOCKER, hf_cache_path="/srv/hf")

    @PROPERTY
    @given(fields=recipes(), channel=channels, host=hosts)
    def check(fields, channel, host):
        form = _form(fields, channel)
        if not form.is_valid():
            seen["rejected"] += 1
            return
        recipe = form.save(commit=False)
        seen["accepted"] += 1
        seen["with_extra_args"] += bool(recipe.extra_args)
        bind = host["publish_address"] or "0.0.0.0"  # noqa: S104
        argv = serve_argv(recipe, host=bind, port=host["port"])
        _check_argv(argv, recipe.model_id, bind, host["port"])
        spec = LaunchSpec(run_id=7, host_name="spark-1", argv=argv, image=recipe.image,
                          port=host["port"], env={"HF_TOKEN": "from-a-recipe"})  # fmt: skip
        engine = _engine(host)
        if not all(_hub_id_or_inside(v, engine.model_dirs) for v in _path_values(argv)):
            seen["path_refused"] += 1  # a host without a Hugging Face cache: Hub ids only
            with pytest.raises(EngineError, match="model director"):
                engine.container_config(spec)
            return
        if not image_allowed(host["image_allowlist"], recipe.image):
            seen["image_refused"] += 1
            with pytest.raises(EngineError, match="allowlist"):
                engine.container_config(spec)
            return
        _check_container(engine.container_config(spec), host, argv, recipe.image)

    check()
    print("SEEN", seen)
    # The generators must reach both sides of the validators, or the property says little.
    assert seen["accepted"] >= 20 and seen["rejected"] >= 20, seen
    assert seen["with_extra_args"] >= 5 and seen["image_refused"] >= 1, seen
    assert seen["path_refused"] >= 1, seen


raw_args = st.lists(
    st.one_of(
        st.sampled_from(HOSTILE_TOKENS),
        st.sampled_from(ALLOWED_TOKENS),
        st.sampled_from(UTILIZATIONS),
        st.text(max_size=10),
    ),
    max_size=8,
)


def test_any_vector_the_last_guard_passes_keeps_the_rules_whatever_built_it():
    """The guard in front of both engines, for vectors no form has seen."""
    seen = {"passed": 0, "refused": 0}

    @PROPERTY
    @given(
        program=st.sampled_from(["vllm"] * 5 + ["sh", "/bin/sh", "python3", "/usr/bin/env"]),
        model=st.sampled_from(
            ["a/b"] * 4
            + ["-v", "--privileged", "/models/m", "a/../x", f"{HF_CACHE_IN_CONTAINER}/hub/m"]
        ),
        utilization=st.one_of(GOOD_UTILIZATIONS, st.sampled_from(UTILIZATIONS)),
        extra=st.one_of(
            # Whole allowed groups (a loose --tokenizer takes any next token as its value).
            st.lists(st.sampled_from(VALID_GROUPS), max_size=3).map(
                lambda g: [t for x in g for t in x]
            ),
            st.lists(st.sampled_from(ALLOWED_TOKENS), max_size=6),
            raw_args,
        ),
        host=hosts,
    )
    def check(program, model, utilization, extra, host):
        argv = [program, "serve", model, UTILIZATION, utilization, *extra]
        engine = _engine({**host, "image_allowlist": []})
        try:
            assert_safe_argv(argv, model_dirs=engine.model_dirs)  # what the engine passes
        except UnsafeCommand:
            seen["refused"] += 1
            return
        seen["passed"] += 1
        assert argv[0] == "vllm", f"the guard let {argv[0]!r} be the program"
        assert "--config" not in {_flag(a) for a in argv}, "a config file could set any flag"
        values = _utilizations(argv)
        assert len(values) == 1, f"utilization given as {values}"
        try:
            number = Decimal(values[0].strip())
        except InvalidOperation:
            raise AssertionError(f"utilization {values[0]!r} passed the guard") from None
        assert 0 < number <= MAX_GPU_MEMORY_UTILIZATION
        for value in _path_values(argv):
            assert _hub_id_or_inside(value, engine.model_dirs), f"path {value!r} passed"
        assert not {_flag(a) for a in argv} & FILE_OR_CODE_OPTIONS, argv
        config = engine.container_config(
            LaunchSpec(
                run_id=7,
                host_name="spark-1",
                argv=argv,
                image="vllm/vllm-openai:x",
                port=host["port"],
            )
        )
        mounted = host["mounted_vllm"]
        assert config["entrypoint"] == [mounted.executable if mounted else "vllm"]
        assert config["command"] == argv[1:]
        assert config["privileged"] is False and config["cap_add"] == []
        assert set(config) <= TEMPLATE_KEYS

    check()
    assert seen["passed"] >= 20 and seen["refused"] >= 20, seen


@pytest.mark.django_db
def test_each_hostile_extra_argument_is_refused_by_the_recipe_form():
    hostile_lines = [
        "--privileged", "-v /:/host", "--volume=/:/host", "--device /dev/mem", "--cap-add SYS_ADMIN",
        "--network host", "--net=host", "--pid host", "--ipc host", "--mount type=bind,src=/,dst=/h",
        "--entrypoint /bin/sh", "--security-opt seccomp=unconfined", "-e LD_PRELOAD=/x.so",
        "--seed 1; rm -rf /", "--seed 1 && id", "--revision $(id)", "--tokenizer `id`",
        "--seed 1\x00", f"{UTILIZATION} 0.95", "--gpu_memory_utilization 0.95",
        "--gpu-memory-util 0.95", "--config /tmp/c.yaml", "--host 0.0.0.0", "--port 22",
        "--model evil/model", "-O3", "--revision ../../etc",
    ]  # fmt: skip
    # (`--seed=-1` is a negative number vLLM takes: no longer refused since issue 39.)
    for line in hostile_lines:
        form = RecipeForm(data=recipe_data(extra_args=line))
        assert not form.is_valid() and "extra_args" in form.errors, line


class RecordingDocker:
    """Records what `DockerEngine.start` asks of Docker (containers.create / run)."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self.containers = self
        self.images = self

    def get(self, name):
        raise docker.errors.NotFound("no such container")

    def create(self, **kwargs):
        self.calls.append(("create", kwargs))
        return self

    def run(self, *args, **kwargs):
        self.calls.append(("run", kwargs))
        return self

    def start(self):
        return None

    id = "c0ffee"


def test_start_sends_docker_exactly_the_template():
    client = RecordingDocker()
    host = {"gpus": True, "network": "bridge", "publish_address": "", "hf_cache": "/srv/hf-cache",
            "image_allowlist": ["vllm/vllm-openai:*"], "shm_size_gib": 16, "port": 8100}  # fmt: skip
    engine = _engine(host)
    engine._client = client
    argv = ["vllm", "serve", "Qwen/Qwen3-32B", "--host", "0.0.0.0", "--port", "8100",  # noqa: S104
            UTILIZATION, "0.80"]  # fmt: skip
    spec = LaunchSpec(run_id=7, host_name="spark-1", argv=argv, image="vllm/vllm-openai:v1",
                      port=8100)  # fmt: skip
    engine.start(spec)
    [(call, kwargs)] = client.calls
    assert call == "create"  # never `containers.run`, which takes a shell-ish command too
    assert kwargs == engine.container_config(spec)
    _check_container(kwargs, host, argv, "vllm/vllm-openai:v1")
