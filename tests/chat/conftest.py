import pytest
from django.test import Client

from apps.chat.models import Conversation
from tests.gateway.fixtures import flush_gateway_keys


@pytest.fixture
def chat_server(db, keyed_sim, qwen, redis_url):
    """A real sparksim (with optional faults) behind a ready run, as the chat sees it; the
    server demands the run's own key, as the runner starts it: the chat must send it. Chat
    answers are counted in Redis like the gateway's requests (apps/gateway/chat_budget.py):
    each test starts with nothing counted there."""
    flush_gateway_keys(redis_url)

    def start(*faults: str, time_scale: float = 20, reasoning: bool = False):
        args = ["--gpu-memory-utilization", "0.8", "--max-model-len", "16384",
                "--max-num-seqs", "8"]  # fmt: skip
        for fault in faults:
            args += ["--fault", fault]
        if reasoning:
            args += ["--reasoning-parser", "deepseek_r1"]
        return keyed_sim(qwen, *args, time_scale=time_scale, prefix="chat")

    return start


@pytest.fixture
def conversation_for():
    def make(user, run, **fields) -> Conversation:
        return Conversation.objects.create(user=user, run=run, recipe=run.recipe, **fields)

    return make


def ws_headers(user=None, origin: str = "http://localhost") -> list[tuple[bytes, bytes]]:
    headers = [(b"host", b"localhost"), (b"origin", origin.encode())]
    if user is not None:
        client = Client()
        client.force_login(user)
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return headers
