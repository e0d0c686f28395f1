"""The URL walk the security tests share: every URL pattern of the project (Django admin
excepted: it has its own staff login), made concrete with real objects.

The walk is built from the resolver, never from a hand-kept list, so a new URL is walked
the moment it exists. What a pattern's parameters need is looked up here by parameter name
(and, for a bare `<int:pk>`, by the URL's name); a parameter nobody knows falls back to a
plausible value, and a regex pattern without a sample fails the walk loudly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from django.apps import apps
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.urls.resolvers import RegexPattern

from apps.api.api import api
from apps.recipes.yaml_io import recipes_to_yaml

# Regex patterns cannot be filled in mechanically: each one gets a sample path here.
REGEX_SAMPLES = {"api/^(?P<rest>.*)$": "api/v2/anything"}

# A bare <int:pk> belongs to the object the URL is about: the longest matching name prefix
# says which. An unknown URL gets 1 (nothing), which is still fine for the login and role
# checks, and the member walk reports it.
PK_BY_URL_PREFIX = {
    "host-models-": "prefetch",
    "gateway-key-": "gateway_key",
    "gateway-limits-key": "gateway_key",
    "gateway-limits-user": "user",
    "gateway-alias-": "alias",
    "token-": "token",
    "webhook-": "webhook",
    "run-": "run",
    "benchmark-suite-": "suite",
    "benchmark-": "job",
    "chat-message": "message",
    "chat-preset-delete": "preset",
    "chat-compare": "comparison",
    "chat-": "conversation",
    "notice-": "notice",
    "user-": "user",
}
# Named parameters mean the same thing wherever they appear.
OBJECT_BY_PARAM = {
    "slug": "recipe_slug",
    "name": "host_name",
    "host": "host_name",
    "run": "run",
    "run_id": "run",
    "job_id": "job",
    "download_id": "prefetch",
}
_PARAM = re.compile(r"<(?:(?P<converter>[^>:]+):)?(?P<param>[^>]+)>")


@dataclass(frozen=True)
class Route:
    key: str  # "namespace:name", the name, or the raw pattern of an unnamed URL
    name: str | None
    template: str  # "runs/<int:pk>/stop/", relative to the site root
    callback: object
    params: tuple[str, ...]

    @property
    def is_api(self) -> bool:
        return self.template.startswith("api/")

    def __str__(self) -> str:
        return f"{self.key} (/{self.template})"


def routes() -> list[Route]:
    """Every URL pattern of the project except the `admin:` namespace."""

    def walk(patterns, prefix: str, namespace: str | None) -> Iterator[Route]:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                if entry.namespace == "admin":
                    continue
                yield from walk(
                    entry.url_patterns, prefix + str(entry.pattern), entry.namespace or namespace
                )
            elif isinstance(entry, URLPattern):
                template = prefix + str(entry.pattern)
                if isinstance(entry.pattern, RegexPattern):
                    params = tuple(entry.pattern.regex.groupindex)
                else:
                    params = tuple(m["param"] for m in _PARAM.finditer(template))
                if entry.name:
                    key = f"{namespace}:{entry.name}" if namespace else entry.name
                else:
                    key = template
                yield Route(key, entry.name, template, entry.callback, params)

    return list(walk(get_resolver().url_patterns, "", None))


def _value(route: Route, param: str, objects: Mapping[str, object]) -> str:
    if param == "pk":
        name = route.name or ""
        prefixes = sorted((p for p in PK_BY_URL_PREFIX if name.startswith(p)), key=len)
        kind = PK_BY_URL_PREFIX[prefixes[-1]] if prefixes else None
    else:
        kind = OBJECT_BY_PARAM.get(param)
    value = objects.get(kind) if kind else None
    if value is None:
        return "1"
    return str(getattr(value, "pk", value))


def concrete_path(route: Route, objects: Mapping[str, object]) -> str:
    """The route as a path with real objects in it; it must resolve back to the route."""
    if "(?P<" in route.template or route.template.startswith("^"):
        if route.template not in REGEX_SAMPLES:
            raise AssertionError(
                f"the URL walk has no sample for the regex route {route}: add one to "
                "tests/security/urlwalk.py REGEX_SAMPLES"
            )
        path = "/" + REGEX_SAMPLES[route.template]
    else:
        path = "/" + _PARAM.sub(lambda m: _value(route, m["param"], objects), route.template)
    match = resolve(path)
    # Django-ninja gives each method of a path its own pattern, all served by the first one.
    if match.route != route.template and match.func is not route.callback:
        raise AssertionError(f"{path} resolves to {match.view_name}, not to {route}")
    return path


# --- the JSON API, from its OpenAPI schema -------------------------------------------------


def api_operations() -> list[tuple[str, str, dict]]:
    """(method, path template, operation) for every operation of the served schema."""
    schema = api.get_openapi_schema(path_params={})
    return [(m, path, op) for path, methods in schema["paths"].items() for m, op in methods.items()]


def api_name(op: dict) -> str:
    """The operation's function name (= its URL name): the operationId less its module."""
    return re.sub(r"^apps_api_(?:routes_[a-z]+|api)_", "", op["operationId"])


def api_request(
    method: str, path: str, op: dict, objects: Mapping, query: Mapping | None = None
) -> tuple[str, dict | None]:
    """A concrete URL (path parameters and required query filled in) and a valid body: a
    request that would do its work if nobody checked who sent it."""
    recipe, host, done = objects["recipe"], objects["host"], objects["done_jobs"]
    values = {"slug": recipe.slug, "name": host.name, "run_id": objects["run"].pk,
              "job_id": objects["job"].pk, "download_id": objects["prefetch"].pk,
              "org": "org", "model": "old-model",
              "key_id": objects["gateway_key"].pk}  # fmt: skip
    queries = {"compare_jobs": {"ids": f"{done[0].pk},{done[1].pk}"}}
    imported = recipes_to_yaml([recipe]).replace(recipe.slug, "api-import")
    bodies = {
        "create_recipe": {
            "name": "API recipe",
            "model_id": "Qwen/Qwen3-32B",
            "gpu_memory_utilization": "0.80",
            "max_model_len": 8192,
        },
        "import_recipes": {"yaml": imported.replace(recipe.name, "API import")},
        "update_recipe": {"max_num_seqs": 2, "description": "changed through the API"},
        "start_run": {"recipe": recipe.slug, "host": host.name},
        "queue_job": {"recipe": recipe.slug, "host": host.name},
        "download_now": {"host": host.name},
        "keys_create": {"name": "walked key", "models": [recipe.model_id]},
        "plan": {"gpu_memory_utilization": "0.8", "max_model_len": 8192, "max_num_seqs": 1},
        "startup_plan": {
            "command": ["vllm", "serve", recipe.model_id, "--gpu-memory-utilization", "0.5"],
            "config": {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "hidden_size": 256,
                "max_position_embeddings": 4096,
                "torch_dtype": "bfloat16",
            },
            "checkpoint_gib": 0.01,
        },
    }
    name = api_name(op)
    url = re.sub(r"{(\w+)}", lambda m: str(values.get(m[1], "{?}")), path)
    assert "{?}" not in url, f"no value for a path parameter of {method.upper()} {path}"
    params = {**queries.get(name, {}), **(query or {})}
    for param in op.get("parameters", []):
        if param["in"] == "query" and param.get("required"):
            assert param["name"] in params, f"no value for ?{param['name']} of {path}"
    if params:
        url += "?" + "&".join(f"{k}={v}" for k, v in params.items())
    body = None
    if "requestBody" in op:
        assert name in bodies, f"add a valid sample body for {method.upper()} {path} ({name})"
        body = bodies[name]
    return url, body


# --- "nothing changed" ----------------------------------------------------------------------

# Rows that change on every request by design, and say nothing about what a request did.
_VOLATILE_APPS = {"sessions", "axes", "admin"}
_VOLATILE_FIELDS = {("api", "apitoken"): {"last_used_at"}}


def db_snapshot() -> dict[str, list[dict]]:
    """Every row of every model (sessions, lockout logs and token last-use stamps aside)."""
    snapshot = {}
    for model in apps.get_models():
        meta = model._meta
        if meta.app_label in _VOLATILE_APPS or not meta.managed or meta.proxy:
            continue
        skip = _VOLATILE_FIELDS.get((meta.app_label, meta.model_name), set())
        rows = model._base_manager.order_by("pk").values()
        snapshot[meta.label] = [{k: v for k, v in row.items() if k not in skip} for row in rows]
    return snapshot


def snapshot_diff(before: dict[str, list[dict]], after: dict[str, list[dict]]) -> list[str]:
    changed = []
    for label in sorted(set(before) | set(after)):
        old, new = before.get(label, []), after.get(label, [])
        if old != new:
            changed.append(f"{label}: {len(old)} → {len(new)} rows" if len(old) != len(new)
                           else f"{label}: a row changed")  # fmt: skip
    return changed


def response_text(response) -> str:
    """Body and headers of a response, as text (streaming bodies read whole)."""
    if getattr(response, "streaming", False):
        body = b"".join(response.streaming_content)
    else:
        body = response.content
    headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
    cookies = "\n".join(str(c) for c in response.cookies.values())
    return f"{headers}\n{cookies}\n\n{body.decode('utf-8', 'replace')}"
