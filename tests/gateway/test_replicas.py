"""Several ready runs of one model on different Sparks are replicas behind one name."""

from __future__ import annotations

import asyncio
import collections
import time

import openai
import pytest

from apps.gateway import usage
from apps.gateway.models import UsageRecord
from apps.runs.models import RunState

pytestmark = pytest.mark.django_db(transaction=True)
HI = [{"role": "user", "content": "Hi"}]


def _hosts(user) -> collections.Counter:
    usage.drain()
    return collections.Counter(UsageRecord.objects.filter(user=user).values_list("host", flat=True))


def test_two_replicas_share_the_load_and_a_killed_one_fails_cleanly(panel, replica, member,
                                                                     gateway_key):  # fmt: skip
    sim_a, run_a = replica(time_scale=2)
    sim_b, run_b = replica(time_scale=2)
    key = gateway_key(member)
    model = run_a.served_name

    async def streams(n: int, max_tokens: int, kill_after_first=None):
        client = openai.AsyncOpenAI(base_url=panel.v1, api_key=key, max_retries=0, timeout=60)
        started = asyncio.Event()
        count = 0

        async def one():
            nonlocal count
            try:
                stream = await client.chat.completions.create(
                    model=model, messages=HI, max_tokens=max_tokens, stream=True
                )
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        count += 1
                        if count >= n:
                            started.set()
                return "ok"
            except openai.APIError as exc:
                return f"error: {exc.message}"

        async with client:  # closed in this loop, not by the garbage collector after it
            tasks = [asyncio.create_task(one()) for _ in range(n)]
            if kill_after_first is not None:
                await asyncio.wait_for(started.wait(), 30)
                kill_after_first()
            return await asyncio.gather(*tasks)

    # Fewest requests in flight: 8 concurrent streams split evenly.
    assert asyncio.run(streams(8, 20)) == ["ok"] * 8
    assert _hosts(member) == {run_a.host.name: 4, run_b.host.name: 4}

    # One Spark dies mid-answer (its server killed, the panel not told yet): its streams end
    # with an error event, the other's finish, and new requests go to the survivor at once.
    UsageRecord.objects.all().delete()
    results = asyncio.run(streams(6, 400, kill_after_first=sim_a.proc.kill))
    failed = [r for r in results if r != "ok"]
    assert len(failed) == 3 and all(run_a.host.name in r for r in failed), results
    client = openai.OpenAI(base_url=panel.v1, api_key=key, max_retries=0, timeout=60)
    began = time.monotonic()
    for _ in range(4):
        assert client.chat.completions.create(model=model, messages=HI, max_tokens=2)
    assert time.monotonic() - began < 30
    hosts = _hosts(member)
    assert hosts[run_b.host.name] == 3 + 4 and hosts[run_a.host.name] == 3
    rows = UsageRecord.objects.filter(host=run_a.host.name)
    assert {r.status for r in rows} == {502}

    # Once the run is marked failed (the reconciler or the guard), it leaves the table.
    run_a.transition(RunState.FAILED, failure_reason="gone")
    assert [m.id for m in client.models.list().data] == [model]
    sim_b.stop()
    run_b.transition(RunState.STOPPING)
    with pytest.raises(openai.InternalServerError) as none_left:
        client.chat.completions.create(model=model, messages=HI, max_tokens=2)
    assert none_left.value.body["code"] == "model_not_running"


def test_two_models_never_share_a_public_name(panel, replica, member, gateway_key, qwen):
    """A served name equal to another recipe's model id used to merge the two recipes'
    runs as replicas: a request for one model was answered by either. The recipe is
    refused the name; one saved before that rule does not take the other's requests."""
    from django.core.exceptions import ValidationError

    from apps.gateway.models import ModelAlias
    from apps.recipes.models import Recipe

    _, run = replica(time_scale=2)
    other = Recipe.objects.get(pk=qwen.pk)
    other.pk, other.slug, other.name = None, "impostor", "Impostor"
    other.model_id, other.served_model_name = "someone/else", qwen.model_id
    with pytest.raises(ValidationError) as refused:
        other.full_clean()
    assert "two different models cannot share one name" in str(refused.value)
    other.save()  # as an older panel would have let it
    _, impostor = replica(other, time_scale=2)
    with pytest.raises(ValidationError):
        ModelAlias(name=qwen.model_id, recipe=other).full_clean()

    from apps.gateway.routing import build

    table = build("test")
    assert [r.run_id for r in table.ready[qwen.model_id]] == [run.pk]  # not the impostor
    client = openai.OpenAI(base_url=panel.v1, api_key=gateway_key(member), max_retries=0)
    for _ in range(3):
        client.chat.completions.create(model=qwen.model_id, messages=HI, max_tokens=2)
    assert set(_hosts(member)) == {run.host.name}
    assert impostor.recipe.public_name == qwen.model_id


def test_every_served_name_of_a_recipe_reaches_its_run(panel, keyed_sim, member, gateway_key,
                                                       qwen):  # fmt: skip
    """`--served-model-name a b`: vLLM answers to both names, and so does the team endpoint;
    a name another model's recipe answers to by any of its names is refused."""
    from django.core.exceptions import ValidationError

    from apps.recipes.models import Recipe

    recipe = Recipe.objects.get(pk=qwen.pk)
    recipe.served_model_name = "team-qwen qwen/alt"
    recipe.full_clean()
    recipe.save()
    from tests.gateway.conftest import SIM_ARGS

    served = ["--served-model-name", *recipe.served_names]  # as the runner starts it
    _sim, run = keyed_sim(recipe, *SIM_ARGS, *served, time_scale=2, prefix="gw")
    assert run.served_name == "team-qwen"
    assert run.recipe.served_names == ["team-qwen", "qwen/alt"]
    client = openai.OpenAI(base_url=panel.v1, api_key=gateway_key(member), max_retries=0)
    assert {m.id for m in client.models.list().data} >= {"team-qwen", "qwen/alt"}
    for name in ("team-qwen", "qwen/alt"):
        answer = client.chat.completions.create(model=name, messages=HI, max_tokens=2)
        assert answer.model == name  # the name asked for, whichever the server was asked
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="Team-Qwen", messages=HI, max_tokens=2)

    other = Recipe(name="Other", slug="other", model_id="someone/else",
                   served_model_name="mine qwen/alt")  # fmt: skip
    with pytest.raises(ValidationError) as refused:
        other.full_clean()
    assert "qwen/alt" in str(refused.value) and "two different models" in str(refused.value)
    for bad, why in (("a a", "twice"), ("ok bad!name", "bad!name"),
                     (" ".join(f"n{i}" for i in range(9)), "At most 8")):  # fmt: skip
        recipe.served_model_name = bad
        with pytest.raises(ValidationError) as refused:
            recipe.full_clean()
        assert why in str(refused.value)
