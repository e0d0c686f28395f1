"""Which `vllm serve` options a recipe may carry, decided by rules (issue 39). Pure Python.

Every option of a vLLM's parser (a record of its contract, `vllm_adapter/contracts/`) falls
in one class, decided by the first rule that matches — an explicit line for the few a rule
cannot tell, then rules on what vLLM reads the option as (its dest: name patterns such as
`*_dir` or `*_plugin`), its group and its type — so an option a future vLLM adds is allowed
or denied by a rule, never by accident:

- FIELD   a typed recipe field the planner and the guard need (utilization, lengths, …);
- PATH    names a model, a tokenizer or a config folder: a Hugging Face id or a path inside
          the host's model directories (`sparkdomain/model_refs.py`);
- DATA    everything else: allowed, its value judged by the contract (type, choices,
          `--no-` forms) and, for JSON options, key by key (`json_problem`);
- PANEL   the panel sets it for each run (address, port, key, TLS, placement over Sparks,
          the network the run talks to): never from a recipe; the guard passes only the few
          the panel adds itself (`PANEL_SETS`);
- CODE    loads code or reads/writes files from outside the image (plugins, classes,
          middleware, templates, file and directory paths, `--config`): never;
- MEMORY  sizes memory outside `--gpu-memory-utilization` (offloading, byte and GB sizes):
          on a Spark the CPU and GPU share one pool, so it would undo the ≤ 0.90 rule.

docs/recipes.md ("Options a recipe may carry") lists the classes and the denylist.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from sparkdomain.model_refs import model_ref_problem


class Kind(StrEnum):
    FIELD = "field"
    PATH = "path"
    DATA = "data"
    PANEL = "panel"
    CODE = "code"
    MEMORY = "memory"


ALLOWED = frozenset({Kind.FIELD, Kind.PATH, Kind.DATA})


@dataclass(frozen=True)
class Rule:
    """The class of an option and why: `rule` names the rule that decided it."""

    kind: Kind
    rule: str
    reason: str = ""  # one sentence: why a recipe may not carry it
    instead: str = ""  # what to do instead

    @property
    def allowed(self) -> bool:
        return self.kind in ALLOWED

    def refusal(self, spelled: str) -> str:
        return f"{spelled} {self.reason}: {self.instead}"


# --- the typed fields ----------------------------------------------------------------------

# What vLLM reads each typed field of a recipe as (its dest) → the field. The same set as
# `sparkdomain/command.py::FIELD_OF_FLAG` (tests/sparkdomain/test_option_rules.py holds it).
FIELD_DESTS: dict[str, str] = {
    "gpu_memory_utilization": "gpu_memory_utilization",
    "max_model_len": "max_model_len",
    "max_num_seqs": "max_num_seqs",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "enable_prefix_caching": "enable_prefix_caching",
    "enforce_eager": "enforce_eager",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "reasoning_parser": "reasoning_parser",
    "tool_call_parser": "tool_call_parser",
    "served_model_name": "served_model_name",
    "revision": "revision",
}

# Values vLLM reads as a model, a tokenizer or a config folder (also as keys of a JSON
# option: a speculative config's draft `model`); some also take a fixed word.
PATH_DESTS = frozenset(
    {"model_tag", "model", "tokenizer", "hf_config_path", "generation_config", "spec_model"}
)
PATH_WORDS: dict[str, frozenset[str]] = {"generation_config": frozenset({"auto", "vllm"})}

# PANEL options the panel adds to a vector itself (apps/recipes/launch.py: the address and
# port; apps/runs/services.py: a pair's Ray backend) — the guard lets these through, with
# their values checked; a recipe never carries them.
PANEL_SETS = frozenset({"host", "port", "distributed_executor_backend"})
PANEL_WORDS: dict[str, frozenset[str]] = {
    # Never a class name (vLLM imports one given by its qualified name).
    "distributed_executor_backend": frozenset({"ray", "mp", "uni"}),
}

# --- the reasons ---------------------------------------------------------------------------

_WHERE = (
    "is the panel's: it sets where each run listens (its address and a port from the host's range)",
    "leave it out: the panel adds it to every run",
)
_SECRET = (
    "would put a secret in the command line",
    "the panel gives each run its own API key and the Hugging Face token through the environment",
)
_TLS = (
    "is the panel's: it reaches each run over the host's own network",
    "leave it out (TLS for the LAN goes in front of the panel: docs/deploy.md)",
)
_CORS = (
    "is the panel's: clients and browsers reach a model through the panel's gateway, and "
    "a run's own port answers only the panel",
    "use the gateway (/v1) and its keys",
)
_PLACE = (
    "is the panel's: it places each run on one Spark or a pair of Sparks over Ray and sets "
    "the executor, nodes, ranks and their addresses itself",
    "set the tensor parallel size field (1: one Spark, 2: a pair)",
)
_NETWORK = (
    "would make the server listen on or connect to network endpoints the panel does not manage",
    "leave it out; a run talks only to the panel (ask an admin if a deployment needs more)",
)
_FRONTEND = (
    "is the panel's: it speaks HTTP to each run (health, metrics, the gateway) through one "
    "API server",
    "leave it out",
)
_CODE = (
    "loads code from outside the image",
    "ask an admin to build it into an image on the host's allowlist",
)
_FILES = (
    "reads or writes files outside the model directories",
    "put what the model needs in its repository or the host's Hugging Face cache and name "
    "the model; ask an admin for anything else",
)
_TEMPLATE = (
    "runs a Jinja template: a file outside the image, or inline code that the server runs "
    "on every request (Jinja's sandbox has been escaped before: CVE-2024-56326, "
    "CVE-2025-27516)",
    "use the chat template in the model's repository (pick a model or revision that has "
    "the one you need), a template file the image or an approved mod puts in the server's "
    "working directory (--chat-template name.jinja), or ask an admin",
)
_MEMORY = (
    "sizes memory outside --gpu-memory-utilization: a Spark's CPU and GPU share one "
    "128 GB pool, so it could freeze the machine, and the planner cannot count it",
    "size the run with the utilization, max model len and max num seqs fields",
)


def _rule(kind: Kind, rule: str, why: tuple[str, str] = ("", "")) -> Rule:
    return Rule(kind, rule, *why)


# Where a rule on the name cannot tell: each with its reason (explicit wins over the rules).
EXPLICIT: dict[str, Rule] = {
    # The panel's own, for each run.
    "host": _rule(Kind.PANEL, "explicit: the address", _WHERE),
    "port": _rule(Kind.PANEL, "explicit: the port", _WHERE),
    "uds": _rule(Kind.PANEL, "explicit: a Unix socket instead of the port", _WHERE),
    "root_path": _rule(Kind.PANEL, "explicit: the URL prefix", _WHERE),
    "allow_credentials": _rule(Kind.PANEL, "explicit: CORS", _CORS),
    "allowed_origins": _rule(Kind.PANEL, "explicit: CORS", _CORS),
    "allowed_methods": _rule(Kind.PANEL, "explicit: CORS", _CORS),
    "allowed_headers": _rule(Kind.PANEL, "explicit: CORS", _CORS),
    "headless": _rule(Kind.PANEL, "explicit: multi-node", _PLACE),
    "nnodes": _rule(Kind.PANEL, "explicit: multi-node", _PLACE),
    "node_rank": _rule(Kind.PANEL, "explicit: multi-node", _PLACE),
    "distributed_executor_backend": _rule(Kind.PANEL, "explicit: the executor", _PLACE),
    "device_ids": _rule(Kind.PANEL, "explicit: the engine gives a run its GPU", _PLACE),
    "ray_workers_use_nsight": _rule(Kind.PANEL, "explicit: a pair's Ray workers", _PLACE),
    "api_server_count": _rule(Kind.PANEL, "explicit: one API server", _FRONTEND),
    "grpc": _rule(Kind.PANEL, "explicit: HTTP, not gRPC", _FRONTEND),
    "tool_server": _rule(Kind.PANEL, "explicit: outside tool servers", _NETWORK),
    "kv_events_config": _rule(Kind.PANEL, "explicit: publishes on an endpoint", _NETWORK),
    # Code and files a name does not give away.
    "config": _rule(
        Kind.CODE,
        "explicit: a YAML file of options",
        ("would read flags from a file nobody checked", "write the options in the recipe"),
    ),
    "chat_template": _rule(Kind.CODE, "explicit: a Jinja file or inline template", _TEMPLATE),
    "lora_modules": _rule(
        Kind.CODE,
        "explicit: LoRA adapters by path",
        (
            "loads LoRA adapters from paths nobody checked",
            "merge the adapter into a model repository, or ask an admin",
        ),
    ),
    "default_mm_loras": _rule(
        Kind.CODE,
        "explicit: LoRA adapters by path",
        (
            "loads LoRA adapters from paths nobody checked",
            "merge the adapter into a model repository, or ask an admin",
        ),
    ),
    "logits_processors": _rule(Kind.CODE, "explicit: classes by qualified name", _CODE),
    "logging_config": _rule(
        Kind.CODE,
        "explicit: a Python logging configuration",
        (
            "can read a logging configuration file and name any class to build",
            "use --log-level",
        ),
    ),
    "model_loader_extra_config": _rule(
        Kind.CODE,
        "explicit: loader settings",
        ("passes weight loader settings that name files, buckets or code", _FILES[1]),
    ),
    "enable_prompt_embeds": _rule(
        Kind.CODE,
        "explicit: clients' serialized tensors",
        (
            "lets every client send serialized tensors that the server deserializes (torch.load)",
            "ask an admin",
        ),
    ),
    "enable_mm_embeds": _rule(
        Kind.CODE,
        "explicit: clients' serialized tensors",
        (
            "lets every client send serialized tensors that the server deserializes (torch.load)",
            "ask an admin",
        ),
    ),
    # Memory that a name does not give away.
    "num_gpu_blocks_override": _rule(Kind.MEMORY, "explicit: the KV cache's size", _MEMORY),
    # Allowed although a name rule would deny them: their values are not what the rule
    # fears (module names inside the model, the server's own URL paths, the Hub's code).
    "lora_target_modules": _rule(Kind.DATA, "explicit: names of the model's own modules"),
    "disable_access_log_for_endpoints": _rule(
        Kind.DATA, "explicit: the server's own URL paths, not files or endpoints"
    ),
    "trust_remote_code": _rule(
        Kind.DATA, "explicit: code from the model's repository, judged as PATH is"
    ),
}

# Denied options that one shape of value makes harmless: a chat template given as a bare
# file name is read from the server's working directory inside the image — where the image
# or a mod the host approved put it (docs/recipes.md, Mods) — never from the host, and vLLM
# never reads a name without Jinja characters as an inline template (it fails to start
# instead: vllm/entrypoints/chat_utils.py::load_chat_template).
IMAGE_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.(?:jinja2?|j2)$")
ALLOWED_VALUES: dict[str, tuple[re.Pattern, str]] = {
    "chat_template": (IMAGE_FILE, "a template file in the image's working directory"),
}


def value_allows(dest: str, values: list[str]) -> bool:
    """Whether these values make a denied option harmless (`ALLOWED_VALUES`)."""
    found = ALLOWED_VALUES.get(dest)
    return bool(values) and found is not None and all(found[0].match(v) for v in values)


# --- the rules on the name -----------------------------------------------------------------

# Anywhere in the name; or its last word (`cls` alone also means "classification":
# --max-lora-cls-labels is a number).
_CODE_TOKENS = {"class", "classes", "plugin", "plugins", "middleware", "middlewares"}
_CODE_LAST = {"cls", "module", "modules", "processors", "extension", "extensions", "qualname"}
_FILE_LAST = {"path", "paths", "dir", "dirs", "directory", "file", "files", "filename"}
_NETWORK_LAST = {
    "port", "ports", "host", "hosts", "addr", "address", "addresses", "ip", "endpoint",
    "endpoints", "url", "urls", "uri", "uris", "server", "servers",
}  # fmt: skip
_SECRET_LAST = {"key", "token", "secret", "password"}
_SIZE_LAST = {"gb", "gib", "mb", "mib", "kb", "kib", "bytes"}


def _tokens(dest: str) -> list[str]:
    return [t for t in dest.lower().replace("-", "_").split("_") if t]


def name_rule(dest: str, *, takes_value: bool = True, group: str = "") -> Rule | None:
    """The deny rule a name (a dest, or a key inside a JSON option) falls under; None when
    no name rule denies it."""
    tokens = _tokens(dest)
    if not tokens:
        return None
    last = tokens[-1]
    found = set(tokens)
    if last in {"template", "templates"}:
        return _rule(Kind.CODE, "name ends in _template: a Jinja template", _TEMPLATE)
    if found & _CODE_TOKENS:
        word = sorted(found & _CODE_TOKENS)[0]
        return _rule(Kind.CODE, f"name holds {word!r}: Python to import", _CODE)
    if last in _CODE_LAST:
        return _rule(Kind.CODE, f"name ends in _{last}: Python to import", _CODE)
    if last in _FILE_LAST:
        return _rule(Kind.CODE, f"name ends in _{last}: a file or folder", _FILES)
    if "ssl" in found or "tls" in found:
        return _rule(Kind.PANEL, "name holds ssl/tls", _TLS)
    if takes_value and last in _SECRET_LAST:
        return _rule(Kind.PANEL, f"name ends in _{last}: a secret", _SECRET)
    if "memory" in found or any(t.startswith("offload") for t in tokens) or last in _SIZE_LAST:
        return _rule(Kind.MEMORY, "name sizes or moves memory", _MEMORY)
    if group == "OffloadConfig":
        return _rule(Kind.MEMORY, "group OffloadConfig: weights in host memory", _MEMORY)
    if takes_value and last in _NETWORK_LAST:
        return _rule(Kind.PANEL, f"name ends in _{last}: a network endpoint", _NETWORK)
    if dest.endswith("transfer_config"):
        return _rule(Kind.PANEL, "name ends in _transfer_config: moves KV or weights", _NETWORK)
    if dest.startswith("data_parallel") or (
        dest.endswith("parallel_size") and "tensor" not in found
    ):
        return _rule(Kind.PANEL, "placement: data/pipeline/context parallel", _PLACE)
    return None


# --- the classification --------------------------------------------------------------------

_JSON_TYPES = {"loads", "_parse_type", "parse_dataclass", "union_dict_and_str"}
_NUMBER_TYPES = {"int", "float", "human_readable_int", "human_readable_int_or_auto"}


def type_base(type_name: str | None) -> str:
    return (type_name or "").rsplit(".", 1)[-1]


def is_json(option) -> bool:
    """vLLM parses the option's value as JSON (a dict, a dataclass, a list), and takes its
    keys one by one too (`--compilation-config.mode 3`)."""
    return type_base(option.type) in _JSON_TYPES or "valid JSON string" in (option.help or "")


def classify(option) -> Rule:
    """The class of one option record (`vllm_adapter.contract.Option`), by the first rule
    that matches: explicit, FIELD, PATH, the name rules, then DATA."""
    dest = option.dest
    if dest in EXPLICIT:
        return EXPLICIT[dest]
    if dest in FIELD_DESTS:
        return _rule(Kind.FIELD, f"the recipe's {FIELD_DESTS[dest]} field")
    if dest in PATH_DESTS:
        return _rule(Kind.PATH, "a model, tokenizer or config folder")
    found = name_rule(dest, takes_value=option.takes_value, group=option.group or "")
    if found is not None:
        return found
    if is_json(option):
        return _rule(Kind.DATA, "data: JSON, judged key by key")
    if not option.takes_value:
        return _rule(Kind.DATA, "data: a switch (its --no- form too)")
    if option.choices is not None:
        return _rule(Kind.DATA, "data: one of the contract's choices")
    if type_base(option.type) in _NUMBER_TYPES:
        return _rule(Kind.DATA, "data: a number of the contract's type")
    return _rule(Kind.DATA, "data: a word, judged by the value rules")


def classify_contract(contract) -> dict[str, Rule]:
    """dest → its rule, for every option of a contract."""
    return {option.dest: classify(option) for option in contract.options}


# --- values --------------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A value that reads as a filesystem path, a URL or an escape: only PATH options take one.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/")
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
# A Python name vLLM would import (`pkg.mod.Class`, `pkg.mod:fn`) — inside JSON options,
# where vLLM resolves such names (a compile backend, inductor passes, connector classes).
_QUALNAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\Z|[A-Za-z_][\w.]*:[A-Za-z_]\w*\Z")
# Values that ask vLLM to import a class named elsewhere (`--spec-method custom_class`).
CODE_VALUES = frozenset({"custom_class"})
MAX_VALUE_CHARS = 16_384
MAX_JSON_DEPTH = 12


def looks_like_a_path(value: str) -> bool:
    return (
        value.startswith(("/", "~", "./", "../", "\\"))
        or value in {".", ".."}
        or "\\" in value
        or ".." in value.split("/")
        or _SCHEME.match(value) is not None
        or _ESCAPE.search(value) is not None
    )


def word_problem(dest: str, spelled: str, value: str, *, in_json: bool = False) -> str | None:
    """A free string of a DATA option (or a string inside a JSON option)."""
    shown = repr(value if len(value) <= 80 else value[:80] + "…")
    if len(value) > MAX_VALUE_CHARS:
        return f"{spelled}: the value is over {MAX_VALUE_CHARS:,} characters"
    if _CONTROL.search(value):
        return f"{spelled}: {shown} contains a control character"
    if value in CODE_VALUES:
        return f"{spelled}: {shown} {_CODE[0]}: {_CODE[1]}"
    if dest != "disable_access_log_for_endpoints" and looks_like_a_path(value):
        return (
            f"{spelled}: {shown} reads as a path or URL, and this option takes none: "
            "a model, tokenizer or folder goes in its own field (a Hugging Face id or a path "
            "in the host's model directory)"
        )
    if in_json and _QUALNAME.match(value):
        return (
            f"{spelled}: {shown} reads as a Python name to import ({_CODE[0]}): "
            f"{_CODE[1]}; write vLLM's own names (ops as vllm::name)"
        )
    return None


def json_problem(
    spelled: str, value: object, model_dirs: Iterable[str] | None, depth: int = 0
) -> str | None:
    """A parsed JSON value of a DATA option, judged key by key: a key that names a model
    goes through model_refs, a key a name rule denies is refused with its reason, every
    string by `word_problem` (no path, URL or Python name)."""
    if depth > MAX_JSON_DEPTH:
        return f"{spelled}: nested deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{spelled}: JSON keys are strings"
            at = f"{spelled} {key!r}"
            dest = key.replace("-", "_").lower()
            if dest in PATH_DESTS:
                if item is None:
                    continue
                words = PATH_WORDS.get(dest, frozenset())
                if isinstance(item, str) and item in words:
                    continue
                problem = model_ref_problem(item, field=at, model_dirs=model_dirs)
                if problem:
                    return problem
                continue
            rule = EXPLICIT.get(dest)
            if rule is None or rule.allowed:
                rule = name_rule(dest) or rule
            if rule is not None and not rule.allowed:
                return rule.refusal(at)
            if _CONTROL.search(key) or len(key) > 200:
                return f"{spelled}: a key holds a control character or is too long"
            problem = json_problem(at, item, model_dirs, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, list):
        for item in value:
            problem = json_problem(spelled, item, model_dirs, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, str):
        return word_problem("", spelled, value, in_json=True)
    return None  # numbers, booleans, null


def nested(path: str, value: str) -> dict:
    """`--compilation-config.pass_config.x v` as vLLM merges it: {"pass_config": {"x": v}}
    (the value as JSON when it reads as JSON, else the string)."""
    try:
        leaf: object = json.loads(value)
    except ValueError:
        leaf = value
    for key in reversed(path.split(".")):
        leaf = {key: leaf}
    return leaf  # type: ignore[return-value]


def value_problem(
    options, spelled: str, value: str, *, model_dirs: Iterable[str] | None
) -> str | None:
    """Why one value of an allowed option (FIELD, PATH, DATA, or PANEL the panel sets) may
    not reach vLLM; None when it may. `options`: the option as each known vLLM records it.
    Cheap checks only: the contract's type and choices (some vLLM that knows the option
    must take the value: which one runs is the start's check, `contract_problems`), and —
    in every vLLM's reading — the path rule for PATH, JSON key by key, and no path, URL,
    class or flag where a word goes."""
    if _CONTROL.search(value):
        return f"{spelled}: the value contains a control character"
    if value.startswith("-") and not re.match(r"-\d", value):
        return f"{spelled}: the value {value!r} may not start with '-'"
    refused = [problem for option in options if (problem := option.value_problem(value))]
    if len(refused) == len(options):
        return refused[0]  # argparse's words, naming the option
    for option in options:
        problem = _rule_problem(option, spelled, value, model_dirs)
        if problem:
            return problem
    return None


def _rule_problem(option, spelled: str, value: str, model_dirs: Iterable[str] | None) -> str | None:
    rule = classify(option)
    dest = option.dest
    if rule.kind is Kind.FIELD:
        return None  # the recipe's own validators judged it (the utilization: the guard)
    if rule.kind is Kind.PATH:
        if value in PATH_WORDS.get(dest, ()):
            return None
        return model_ref_problem(value, field=spelled, model_dirs=model_dirs)
    if rule.kind is Kind.PANEL:
        words = PANEL_WORDS.get(dest)
        if words is not None and value not in words:
            return f"{spelled} takes one of {', '.join(sorted(words))}"
        if dest == "host" and not re.fullmatch(r"[A-Za-z0-9.:\[\]-]{1,253}", value):
            return f"{spelled}: {value!r} is not an address"
    if is_json(option):
        if len(value) > MAX_VALUE_CHARS:
            return f"{spelled}: the value is over {MAX_VALUE_CHARS:,} characters"
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            if type_base(option.type) != "union_dict_and_str":
                return f"{spelled}: the value must be JSON"
        else:
            return json_problem(spelled, parsed, model_dirs)
    if type_base(option.type) in _NUMBER_TYPES:
        return None
    return word_problem(dest, spelled, value)
