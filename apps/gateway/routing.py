"""Which runs serve a public model name: the route table the gateway holds in memory.

A public name is a recipe's served model name (its model id when it has none) or an alias
operators set (apps/gateway/models.py::ModelAlias). Every ready run of a recipe with that
name is a replica; several on different Sparks share the load (`RouteTable.pick`: fewest
requests in flight, the earliest-listed on a tie). A name some recipe has but no run
serves right now is "known": the gateway answers 503 with the recipe and any start under
way instead of 404.

The table is rebuilt from the database when `gw:routes` (apps/gateway/store.py) moves:
every run state change, recipe, alias and allowed-origin change bumps it.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from dataclasses import dataclass, field

from apps.gateway.models import AllowedOrigin, ModelAlias, OnDemand
from apps.recipes.models import Recipe
from apps.runs.models import STARTING_STATES, Run, RunState

log = logging.getLogger(__name__)


@dataclass
class Replica:
    run_id: int
    host: str
    address: str
    port: int
    served_name: str
    auth: bytes  # the Authorization header value for this run's server ("" if none)
    max_model_len: int = 0


@dataclass
class Known:
    recipes: list[str] = field(default_factory=list)
    starting: list[str] = field(default_factory=list)  # "run 12 on spark-1 (loading weights)"


@dataclass
class RouteTable:
    version: str = ""
    ready: dict[str, list[Replica]] = field(default_factory=dict)
    known: dict[str, Known] = field(default_factory=dict)
    created: dict[str, int] = field(default_factory=dict)  # name -> unix time it became ready
    # Browser origins that may call /v1 (AllowedOrigin): CORS, apps/gateway/cors.py.
    origins: frozenset[str] = frozenset()
    # Public names of on-demand models (apps/gateway/catalog.py) -> their recipe's id: a
    # request for one that no run serves loads it.
    on_demand: dict[str, int] = field(default_factory=dict)

    def names(self) -> list[str]:
        return sorted(self.ready)

    def max_len(self, name: str) -> int | None:
        """The most tokens a replica of `name` could generate (its context length)."""
        lengths = [r.max_model_len for r in self.ready.get(name, ()) if r.max_model_len]
        return max(lengths) if lengths else None

    def pick(self, name: str, inflight: dict[int, int], down: dict[int, float],
             exclude: set[int]) -> Replica | None:  # fmt: skip
        now = time.monotonic()
        best: Replica | None = None
        best_load = 0
        for replica in self.ready.get(name, ()):
            if replica.run_id in exclude or down.get(replica.run_id, 0) > now:
                continue
            load = inflight.get(replica.run_id, 0)
            if best is None or load < best_load:
                best, best_load = replica, load
        return best


def build(version: str) -> RouteTable:
    """The table as the database has it now (a few queries)."""
    table = RouteTable(version=version)
    table.origins = frozenset(AllowedOrigin.objects.values_list("origin", flat=True))
    aliases: dict[int, list[str]] = {}
    for alias in ModelAlias.objects.all():
        aliases.setdefault(alias.recipe_id, []).append(alias.name)
    recipes = list(
        Recipe.objects.only("pk", "name", "served_model_name", "model_id").order_by("pk")
    )
    models: dict[str, set[str]] = {}  # name -> the model ids of the recipes answering to it
    for recipe in recipes:
        for name in [*recipe.served_names, *aliases.get(recipe.pk, [])]:
            table.known.setdefault(name, Known()).recipes.append(recipe.name)
            models.setdefault(name, set()).add(recipe.model_id)
    owner = _owners(recipes, models)
    catalog = set(OnDemand.objects.values_list("recipe_id", flat=True))
    for recipe in recipes:
        if recipe.pk in catalog:
            for name in [*recipe.served_names, *aliases.get(recipe.pk, [])]:
                if owner.get(name, recipe.model_id) == recipe.model_id:
                    table.on_demand[name] = recipe.pk
    runs = (
        Run.objects.filter(state__in=[RunState.READY, *STARTING_STATES])
        .select_related("recipe", "host")
        .order_by("pk")
    )
    for run in runs:
        names = [name for name in [*run.recipe.served_names, *aliases.get(run.recipe_id, [])]
                 if owner.get(name, run.recipe.model_id) == run.recipe.model_id]  # fmt: skip
        if run.state != RunState.READY:
            where = f"run {run.pk} on {run.host.name} ({run.get_state_display().lower()})"
            for name in names:
                table.known.setdefault(name, Known()).starting.append(where)
            continue
        endpoint = urllib.parse.urlsplit(run.local_endpoint)
        key = run.api_key
        replica = Replica(
            run_id=run.pk,
            host=run.host.name,
            address=endpoint.hostname or "127.0.0.1",
            port=endpoint.port or run.port,
            served_name=run.served_name,
            auth=f"Bearer {key}".encode() if key else b"",
            max_model_len=run.recipe.context_tokens or 0,
        )
        ready_at = run.timings.get(RunState.READY, {}).get("start")
        for name in names:
            table.ready.setdefault(name, []).append(replica)
            table.created.setdefault(name, _unix(ready_at, run))
    return table


def _owners(recipes: list[Recipe], models: dict[str, set[str]]) -> dict[str, str]:
    """The one model each public name stands for. Recipes are refused a name that another
    model answers to (Recipe.public_name_clash), but a name can still be shared — recipes
    saved before that rule, an alias equal to another recipe's name — and replicas of two
    different models must never merge: the name goes to the recipe whose model id it is,
    else to the oldest recipe's model; the others are not routed by it (logged)."""
    owner: dict[str, str] = {}
    for name, ids in models.items():
        if len(ids) == 1:
            continue
        chosen = name if name in ids else next(r.model_id for r in recipes
                                               if r.model_id in ids)  # fmt: skip
        owner[name] = chosen
        log.warning("gateway: the name %r is claimed by several models (%s); it routes to %s only",
                    name, ", ".join(sorted(ids)), chosen)  # fmt: skip
    return owner


def _unix(iso: str | None, run: Run) -> int:
    from datetime import datetime

    try:
        return (
            int(datetime.fromisoformat(iso).timestamp()) if iso else int(run.created_at.timestamp())
        )
    except ValueError:
        return int(run.created_at.timestamp())
