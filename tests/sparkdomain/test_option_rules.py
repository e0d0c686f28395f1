"""Issue 39, item 1: every `vllm serve` option is classified by rules, and the last guard
(`sparkdomain/command.py::assert_safe_argv`) follows the classes.

- every option of every committed contract falls in a class by a named rule (the DATA
  catch-all is a deliberate rule too), and the counts are printed per contract;
- the known dangerous options are denied, each with its reason (a table);
- options a future vLLM might add (`--foo-plugins`, `--bar-worker-cls`, …) are denied by
  rule, not by luck;
- the FIELD set is the recipe's typed fields (`command.py::FIELD_OF_FLAG`);
- every spelling of --gpu-memory-utilization stays a FIELD under the ≤ 0.90 rule;
- the guard lets every allowed option through with a value its contract takes, refuses
  every denied one whatever its value, judges PATH values and JSON options key by key.
"""

from __future__ import annotations

import collections

import pytest

from sparkdomain import option_rules
from sparkdomain.command import FIELD_OF_FLAG, UnsafeCommand, assert_safe_argv
from sparkdomain.model_refs import HF_CACHE_IN_CONTAINER
from sparkdomain.option_rules import Kind, classify
from vllm_adapter import contract as vllm_contract
from vllm_adapter.contract import Option

CONTRACTS = [vllm_contract.load(v) for v in vllm_contract.available_versions()]
DIRS = (HF_CACHE_IN_CONTAINER,)
IN_CACHE = f"{HF_CACHE_IN_CONTAINER}/hub/models--org--draft/snapshots/0123abcd"
BASE = ["vllm", "serve", "org/model", "--gpu-memory-utilization", "0.80"]
UTILIZATION = "gpu_memory_utilization"


def _option(flag: str, **kw) -> Option:
    """An option record as a contract would hold it (for options no vLLM has yet)."""
    fields = {"options": (flag,), "hidden": (), "dest": flag[2:].replace("-", "_"),
              "action": "_StoreAction", "nargs": None, "type": "str", "choices": None,
              "default": None, "const": None, "group": "", "help": "", "deprecated": False}  # fmt: skip
    return Option(**{**fields, **kw})


def _every_option():
    for contract in CONTRACTS:
        for option in contract.options:
            yield contract, option


def _passes(*args: str) -> bool:
    try:
        assert_safe_argv([*BASE, *args], model_dirs=DIRS)
    except UnsafeCommand:
        return False
    return True


# --- every option has a class, by a rule ---------------------------------------------------


def test_every_option_of_every_contract_is_classified_by_a_named_rule():
    deliberate_data = {
        "data: JSON, judged key by key", "data: a switch (its --no- form too)",
        "data: one of the contract's choices", "data: a number of the contract's type",
        "data: a word, judged by the value rules",
    }  # fmt: skip
    for contract in CONTRACTS:
        counts = collections.Counter()
        for option in contract.options:
            rule = classify(option)
            assert isinstance(rule.kind, Kind) and rule.rule, option.dest
            counts[rule.kind.value] += 1
            if rule.kind is Kind.DATA and not rule.rule.startswith("explicit:"):
                assert rule.rule in deliberate_data, (option.dest, rule)
            if not rule.allowed:  # a denial says why and what to do instead
                assert rule.reason and rule.instead, (option.dest, rule)
        assert sum(counts.values()) == len(contract.options)
        print(contract.version, dict(sorted(counts.items())))
    # Every explicit line is about an option some contract has (the list does not rot).
    dests = {option.dest for _, option in _every_option()}
    assert set(option_rules.EXPLICIT) <= dests, set(option_rules.EXPLICIT) - dests


# The known dangerous options: each denied, in its class, with its reason.
DENIED = [
    ("--host", Kind.PANEL, "where each run listens"),
    ("--port", Kind.PANEL, "where each run listens"),
    ("--uds", Kind.PANEL, "where each run listens"),
    ("--root-path", Kind.PANEL, "where each run listens"),
    ("--api-key", Kind.PANEL, "secret in the command line"),
    ("--hf-token", Kind.PANEL, "secret in the command line"),
    ("--ssl-keyfile", Kind.PANEL, "the panel's"),
    ("--ssl-certfile", Kind.PANEL, "the panel's"),
    ("--ssl-ca-certs", Kind.PANEL, "the panel's"),
    ("--enable-ssl-refresh", Kind.PANEL, "the panel's"),
    ("--allowed-origins", Kind.PANEL, "gateway"),
    ("--allow-credentials", Kind.PANEL, "gateway"),
    ("--headless", Kind.PANEL, "places each run"),
    ("--nnodes", Kind.PANEL, "places each run"),
    ("--node-rank", Kind.PANEL, "places each run"),
    ("--master-addr", Kind.PANEL, "network endpoints"),
    ("--master-port", Kind.PANEL, "network endpoints"),
    ("--data-parallel-address", Kind.PANEL, "network endpoints"),
    ("--data-parallel-size", Kind.PANEL, "places each run"),
    ("--distributed-executor-backend", Kind.PANEL, "places each run"),
    ("--api-server-count", Kind.PANEL, "one API server"),
    ("--grpc", Kind.PANEL, "HTTP"),
    ("--otlp-traces-endpoint", Kind.PANEL, "network endpoints"),
    ("--tool-server", Kind.PANEL, "network endpoints"),
    ("--kv-transfer-config", Kind.PANEL, "network endpoints"),
    ("--kv-events-config", Kind.PANEL, "network endpoints"),
    ("--config", Kind.CODE, "from a file nobody checked"),
    ("--chat-template", Kind.CODE, "Jinja"),
    ("--trust-request-chat-template", Kind.CODE, "Jinja"),
    ("--tool-parser-plugin", Kind.CODE, "loads code"),
    ("--reasoning-parser-plugin", Kind.CODE, "loads code"),
    ("--io-processor-plugin", Kind.CODE, "loads code"),
    ("--middleware", Kind.CODE, "loads code"),
    ("--logits-processors", Kind.CODE, "loads code"),
    ("--worker-cls", Kind.CODE, "loads code"),
    ("--worker-extension-cls", Kind.CODE, "loads code"),
    ("--scheduler-cls", Kind.CODE, "loads code"),
    ("--model-class-overrides", Kind.CODE, "loads code"),
    ("--lora-modules", Kind.CODE, "LoRA adapters"),
    ("--download-dir", Kind.CODE, "files outside"),
    ("--allowed-local-media-path", Kind.CODE, "files outside"),
    ("--mm-encoder-fp8-scale-path", Kind.CODE, "files outside"),
    ("--model-loader-extra-config", Kind.CODE, "files"),
    ("--logging-config", Kind.CODE, "any class"),
    ("--enable-prompt-embeds", Kind.CODE, "torch.load"),
    ("--kv-cache-memory-bytes", Kind.MEMORY, "outside --gpu-memory-utilization"),
    ("--num-gpu-blocks-override", Kind.MEMORY, "outside --gpu-memory-utilization"),
    ("--cpu-offload-gb", Kind.MEMORY, "outside --gpu-memory-utilization"),
    ("--kv-offloading-size", Kind.MEMORY, "outside --gpu-memory-utilization"),
    ("--mm-processor-cache-gb", Kind.MEMORY, "outside --gpu-memory-utilization"),
]


@pytest.mark.parametrize("flag, kind, why", DENIED, ids=[d[0] for d in DENIED])
def test_the_dangerous_options_are_denied_with_their_reason(flag, kind, why):
    found = [c.option(flag) for c in CONTRACTS if c.option(flag)]
    assert found, f"{flag} is in no contract: the table went stale"
    for option in found:
        rule = classify(option)
        assert rule.kind is kind and not rule.allowed, (flag, rule)
        assert why in rule.refusal(flag), rule.refusal(flag)


@pytest.mark.parametrize(
    "flag, kind",
    [
        ("--foo-plugins", Kind.CODE),
        ("--bar-worker-cls", Kind.CODE),
        ("--baz-middleware", Kind.CODE),
        ("--x-file", Kind.CODE),
        ("--y-dir", Kind.CODE),
        ("--z-path", Kind.CODE),
        ("--new-loader-class", Kind.CODE),
        ("--custom-op-module", Kind.CODE),
        ("--sampler-template", Kind.CODE),
        ("--metrics-endpoint", Kind.PANEL),
        ("--sidecar-port", Kind.PANEL),
        ("--upstream-url", Kind.PANEL),
        ("--registry-token", Kind.PANEL),
        ("--tls-cert", Kind.PANEL),
        ("--expert-parallel-size", Kind.PANEL),
        ("--host-memory-gb", Kind.MEMORY),
        ("--encoder-cache-bytes", Kind.MEMORY),
        ("--offload-experts", Kind.MEMORY),
    ],
)
def test_an_option_a_future_vllm_adds_is_denied_by_rule(flag, kind):
    rule = classify(_option(flag))
    assert rule.kind is kind and not rule.allowed and not rule.rule.startswith("explicit"), rule
    # …as a key inside a JSON option too.
    problem = option_rules.json_problem("--x-config", {flag[2:]: "v"}, DIRS)
    assert problem and rule.reason in problem, problem


@pytest.mark.parametrize(
    "option, kind",
    [
        (_option("--foo-threshold", type="int"), Kind.DATA),
        (_option("--bar-mode", choices=("a", "b")), Kind.DATA),
        (_option("--enable-baz", action="EnableDisableAction"), Kind.DATA),
        (_option("--qux-config", type="parse_dataclass"), Kind.DATA),
        (_option("--enable-x-endpoint", action="_StoreTrueAction"), Kind.DATA),  # a switch
    ],
)
def test_a_future_option_no_rule_denies_is_data_judged_by_its_contract(option, kind):
    assert classify(option).kind is kind


def test_the_field_set_is_the_recipes_typed_fields():
    typed = {option.dest for c in CONTRACTS for flag in FIELD_OF_FLAG if (option := c.option(flag))}
    assert set(option_rules.FIELD_DESTS) == typed
    classified = {o.dest for _, o in _every_option() if classify(o).kind is Kind.FIELD}
    assert classified == typed


# --- the ≤ 0.90 rule, every spelling ------------------------------------------------------


def _utilization_spellings() -> set[str]:
    """Every way a known vLLM reads as --gpu-memory-utilization: its strings and aliases,
    underscores for dashes (each and all), and every prefix argparse might take."""
    out = set()
    for contract in CONTRACTS:
        option = contract.option("--gpu-memory-utilization")
        for string in option.all_strings:
            body = string[2:]
            out |= {string, "--" + body.replace("-", "_")}
            parts = body.split("-")
            for i in range(1, len(parts)):
                out.add("--" + "-".join(parts[:i]) + "_" + "-".join(parts[i:]))
            out |= {string[:n] for n in range(3, len(string))}  # abbreviations
    return out


def test_every_spelling_of_the_utilization_stays_a_field_under_the_rule():
    spellings = _utilization_spellings()
    assert len(spellings) > 40
    for contract in CONTRACTS:
        assert classify(contract.option("--gpu-memory-utilization")).kind is Kind.FIELD
    for spelling in spellings:
        for value in ("0.95", "0.91", "1", "nan", "0.905"):
            for args in ([spelling, value], [f"{spelling}={value}"]):
                vector = ["vllm", "serve", "org/model", *args]
                with pytest.raises(UnsafeCommand):
                    assert_safe_argv(vector)
                # Next to a safe value: counted twice, or refused as an abbreviation.
                assert not _passes(*args), args
        assert not _passes(spelling, "0.85")  # a second one, even when safe
        assert not _passes(f"{spelling}.x", "0.5")
        exact = all(c.resolve(spelling)[1] == "exact" for c in CONTRACTS)
        alone = ["vllm", "serve", "org/model", spelling, "0.85"]
        if exact:
            assert_safe_argv(alone)  # an exact spelling is the field: one value, ≤ 0.90
        else:
            with pytest.raises(UnsafeCommand):
                assert_safe_argv(alone)
    assert _passes() and not _passes("--gpu-memory-utilization=0.90", "--seed", "1")
    with pytest.raises(UnsafeCommand, match="missing"):
        assert_safe_argv(["vllm", "serve", "org/model", "--seed", "1"])


def test_no_allowed_option_sizes_memory_around_the_utilization():
    """What could size memory outside the ≤ 0.90 budget is denied, by name or group."""
    for _, option in _every_option():
        rule = classify(option)
        if rule.kind is Kind.FIELD:
            continue
        words = option.dest.split("_")
        if "memory" in words or "offload" in words or words[-1] in {"gb", "mb", "bytes"}:
            assert rule.kind is Kind.MEMORY, option.dest


# --- the guard follows the classes ---------------------------------------------------------


def _a_good_value(option) -> list[str]:
    """A value the contract takes for an option (none for a switch)."""
    if not option.takes_value:
        return []
    choices = [o.choices for c in CONTRACTS if (o := c.option(option.name)) and o.choices]
    if choices:  # one every known vLLM takes
        common = set.intersection(*map(set, choices)) - option_rules.CODE_VALUES
        return [sorted(common)[0]]
    base = option_rules.type_base(option.type)
    if base in {"int", "human_readable_int", "human_readable_int_or_auto"}:
        return ["1"]
    if base == "float":
        return ["0.5"]
    if option_rules.is_json(option):
        return ["{}"]
    if option.dest in option_rules.PATH_DESTS:
        return ["org/other"]
    return ["x"]


def test_every_allowed_option_passes_the_guard_with_a_value_its_contract_takes():
    passed = 0
    for _, option in _every_option():
        rule = classify(option)
        if not rule.allowed or option.dest in {UTILIZATION, "model_tag"}:
            continue
        for string in option.all_strings:
            args = [string, *_a_good_value(option)]
            assert _passes(*args), (args, rule)
            passed += 1
    assert passed > 250, passed


def test_every_denied_option_is_refused_whatever_its_value():
    values = [None, "x", "1", "{}", "org/model", f"{IN_CACHE}/x", "/tmp/evil"]
    refused = 0
    for _, option in _every_option():
        rule = classify(option)
        if rule.allowed:
            continue
        for string in option.all_strings:
            for value in values:
                vectors = [[string]] if value is None else [[string, value], [f"{string}={value}"]]
                for args in vectors:
                    if option.dest in option_rules.PANEL_SETS and _passes(*args):
                        continue  # the panel's own, judged below
                    assert not _passes(*args), (args, rule)
                    refused += 1
    assert refused > 500, refused
    # The panel's own pass only with what the panel puts there.
    assert _passes("--host", "0.0.0.0", "--port", "8100")  # noqa: S104
    assert _passes("--distributed-executor-backend", "ray")
    for args in (["--port", "x"], ["--host", "a b"], ["--host", "$(id)"],
                 ["--distributed-executor-backend", "my.Executor"]):  # fmt: skip
        assert not _passes(*args), args


PATH_OPTIONS = ["--tokenizer", "--hf-config-path", "--spec-model", "--generation-config"]
HOSTILE_PATHS = ["/tmp/evil", "a/../../../../tmp/evil", "%2e%2e/x", "~/.ssh",
                 f"{HF_CACHE_IN_CONTAINER}/../../etc", "s3://bucket/m", HF_CACHE_IN_CONTAINER]  # fmt: skip


@pytest.mark.parametrize("flag", PATH_OPTIONS)
def test_a_path_option_takes_a_hub_id_or_a_path_in_the_model_directory(flag):
    assert any(c.option(flag) for c in CONTRACTS)
    assert _passes(flag, "org/other") and _passes(flag, IN_CACHE) and _passes(f"{flag}={IN_CACHE}")
    for value in HOSTILE_PATHS:
        assert not _passes(flag, value) and not _passes(f"{flag}={value}"), value
    assert _passes("--generation-config", "vllm") and _passes("--generation-config", "auto")


GUARD_CASES = [
    # A speculative config: its draft model is a PATH, its method not a class to load.
    (["--speculative-config", '{"model": "org/draft", "num_speculative_tokens": 3}'], True),
    (["--speculative-config", f'{{"model": "{IN_CACHE}", "method": "eagle3"}}'], True),
    (["--speculative-config", '{"model": "/tmp/evil"}'], False),
    (["--speculative-config", '{"model": "a/../../x"}'], False),
    (["--speculative-config", '{"method": "custom_class"}'], False),
    (["--spec-method", "custom_class"], False),
    (["--speculative-config.model", "/tmp/evil"], False),
    (["--speculative-config.model=org/draft"], True),
    (["-sc", '{"model": "org/draft"}'], True),
    (["--speculative-config", "org/draft"], False),  # not JSON
    # A compilation config: data, but no path, file, folder or Python name inside.
    (["--compilation-config", '{"mode": 3, "cudagraph_mode": "FULL_AND_PIECEWISE"}'], True),
    (["-cc", '{"pass_config": {"fuse_norm_quant": true}}'], True),
    (["--compilation-config.mode", "3"], True),
    (["--compilation-config", '{"debug_dump_path": "/tmp/x"}'], False),
    (["--compilation-config", '{"cache_dir": "x"}'], False),
    (["--compilation-config", '{"backend": "evil.module.compile"}'], False),
    (["--compilation-config", '{"inductor_passes": {"p": "pkg.mod:fn"}}'], False),
    (["--compilation-config", '{"inductor_compile_config": {"cpp.cxx": "/tmp/cc"}}'], False),
    (["--compilation-config.debug_dump_path", "x"], False),
    (["--compilation-config", '{"splitting_ops": ["vllm::unified_attention"]}'], True),
    # Other JSON options: their keys by the same name rules.
    (["--structured-outputs-config", '{"reasoning_parser_plugin": "/x.py"}'], False),
    (["--structured-outputs-config", '{"backend": "xgrammar"}'], True),
    (["--profiler-config", '{"torch_profiler_dir": "x"}'], False),
    (["--hf-overrides", '{"auto_map": {"AutoConfig": "cfg.Config"}}'], False),
    (["--hf-overrides", '{"architectures": ["Qwen3ForCausalLM"]}'], True),
    (["--additional-config", '{"api_key": "s"}'], False),
    (["--additional-config", '{"gpu_memory_utilization": 0.99}'], False),
    (["--default-chat-template-kwargs", '{"enable_thinking": false}'], True),
    (["--limit-mm-per-prompt", '{"image": 2}'], True),
    (["--pt-load-map-location", "cpu"], True),
    (["--seed.x", "1"], False),  # only JSON options take keys
    # Words, numbers, choices, switches: judged by the contract and the value rules.
    # A value one known vLLM takes passes (which vLLM runs is the start's check).
    (["--moe-backend", "aiter_triton_mxfp4_mxfp4"], True),  # 0.33 only
    (["--spec-method", "medusa"], True),  # 0.32 only
    (["--moe-backend", "nope"], False),
    (["--seed", "7"], True),
    (["--seed", "x"], False),
    (["--dtype", "fp9"], False),
    (["--max-model-len", "-1"], True),
    (["--max-model-len", "32k"], True),
    (["--cudagraph-capture-sizes", "1", "2", "4"], True),
    (["--cohere-format", "/etc/passwd"], False),
    (["--tokenizer-mode", "file:///etc/passwd"], False),
    (["--disable-access-log-for-endpoints", "/health,/metrics"], True),
    (["--enable-prefix-caching=1"], False),
    (["--no-enable-chunked-prefill"], True),
    (["--disable-chunked-prefill"], True),
    (["--trust-remote-code", "/tmp/evil"], False),  # a stray value vLLM would refuse
    (["--seed", "1", "2"], False),
    (["--enable-chunked"], False),  # an abbreviation: spelled out or refused
    (["-O3"], False),
    (["-q", "fp8"], True),
    (["-tp=2"], True),
    (["-t", "2"], False),
    (["--", "x"], False),
]


@pytest.mark.parametrize(
    "args, passes", GUARD_CASES, ids=[" ".join(a)[:60] for a, _ in GUARD_CASES]
)
def test_the_guard_judges_values_by_the_contract_and_the_rules(args, passes):
    assert _passes(*args) is passes, args


def test_a_denial_says_why_and_what_to_do_instead():
    cases = {
        "--tool-parser-plugin": "loads code from outside the image: ask an admin",
        "--uds": "is the panel's: it sets where each run listens",
        "--chat-template": "use the chat template in the model's repository",
        "--kv-cache-memory-bytes": "size the run with the utilization",
        "--config": "would read flags from a file nobody checked",
    }
    for flag, words in cases.items():
        with pytest.raises(UnsafeCommand, match=words):
            assert_safe_argv([*BASE, flag, "x"])
