"""Counting the prompt of an answer that ended without its usage (vllm_adapter/prompt_count.py):
the /tokenize bodies are what vLLM's own request models take, and carry every field of a
chat request that changes how vLLM renders the prompt."""

from __future__ import annotations

import json
import os
import subprocess

from tests.conftest import require_service
from tests.vllm_adapter.real_parser import ROOT, venv_python
from vllm_adapter import prompt_count

CHAT = {
    "model": "public",
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "chat_template_kwargs": {"enable_thinking": False},
    "add_generation_prompt": True,
    "max_tokens": 10,
    "stream": True,
}


def test_a_chat_request_becomes_one_tokenize_body_with_what_renders_the_prompt():
    bodies, known = prompt_count.tokenize_request("/v1/chat/completions", CHAT, "served")
    assert known == 0 and len(bodies) == 1
    body = json.loads(bodies[0])
    assert body["model"] == "served"
    assert body["messages"] == CHAT["messages"] and body["tools"] == CHAT["tools"]
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert "max_tokens" not in body and "stream" not in body


def test_completions_prompts_text_token_ids_and_batches():
    path = "/v1/completions"
    bodies, known = prompt_count.tokenize_request(path, {"prompt": "Once"}, "s")
    assert [json.loads(b) for b in bodies] == [{"model": "s", "prompt": "Once"}] and known == 0
    assert prompt_count.tokenize_request(path, {"prompt": [1, 2, 3]}, "s") == ([], 3)
    bodies, known = prompt_count.tokenize_request(path, {"prompt": ["a", [5, 6], "b"]}, "s")
    assert len(bodies) == 2 and known == 2
    too_many = {"prompt": ["x"] * (prompt_count.MAX_PROMPTS + 1)}
    assert prompt_count.tokenize_request(path, too_many, "s") is None
    assert prompt_count.tokenize_request("/v1/embeddings", {"input": "x"}, "s") is None


def test_the_estimate_counts_every_text_and_token_ids_as_they_are():
    assert prompt_count.estimate({"prompt": [1] * 50}) == 50
    assert prompt_count.estimate({"prompt": "abcdef"}) == 2
    # Content parts, tools and roles are text the template renders too.
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "é" * 30}]}]}
    assert prompt_count.estimate(parts) == -(-(60 + 4 + 4) // 3)
    assert prompt_count.tokenized_count(b'{"count": 12, "tokens": [1]}') == 12
    assert prompt_count.tokenized_count(b'{"count": -1}') is None
    assert prompt_count.tokenized_count(b"<html>") is None


CHECK = r"""
import json, sys
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.serve.tokenize.protocol import TokenizeChatRequest, TokenizeCompletionRequest
bodies = json.loads(sys.stdin.read())
for body in bodies["chat"]:
    TokenizeChatRequest.model_validate(body)
for body in bodies["completion"]:
    TokenizeCompletionRequest.model_validate(body)
print(json.dumps({"tokenize_chat": sorted(TokenizeChatRequest.model_fields),
                  "chat": sorted(ChatCompletionRequest.model_fields)}))
"""


def test_vllms_own_request_models_take_the_bodies_and_nothing_that_renders_is_left_out():
    python = venv_python("0.33.0")
    require_service(python.exists(), f"vLLM 0.33.0 in {python.parent.parent} (tools/vllm_env.sh)")
    chat_bodies, _ = prompt_count.tokenize_request("/v1/chat/completions", CHAT, "served")
    completion_bodies, _ = prompt_count.tokenize_request(
        "/v1/completions", {"prompt": ["a", "b"], "add_special_tokens": False}, "served"
    )
    payload = {"chat": [json.loads(b) for b in chat_bodies],
               "completion": [json.loads(b) for b in completion_bodies]}  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO")}
    result = subprocess.run([str(python), "-c", CHECK], input=json.dumps(payload),
                            capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    fields = json.loads(result.stdout.strip().splitlines()[-1])
    # Every field vLLM's tokenize request shares with its chat request, apart from what
    # names the model and the messages themselves, changes the rendered prompt: the
    # relay must carry it over (a new one in a later vLLM fails here).
    shared = set(fields["tokenize_chat"]) & set(fields["chat"])
    rendering = shared - {"model", "messages", "return_token_strs"}
    assert rendering <= set(prompt_count._CHAT_RENDERING), rendering - set(
        prompt_count._CHAT_RENDERING
    )
    assert set(prompt_count._CHAT_RENDERING) <= set(fields["tokenize_chat"])
