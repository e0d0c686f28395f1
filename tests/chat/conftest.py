import uuid

import pytest
from django.test import Client

from apps.chat.models import Conversation
from apps.hosts.models import Host
from apps.runs.models import Run, RunState, new_api_key_salt
from tests.sparksim.conftest import launch


@pytest.fixture
def chat_server(db, tmp_path, qwen):
    """A real sparksim (with optional faults) behind a ready run, as the chat sees it."""
    sims = []

    def start(*faults: str, time_scale: float = 20, reasoning: bool = False):
        args = [
            "--gpu-memory-utilization",
            "0.8",
            "--max-model-len",
            "16384",
            "--max-num-seqs",
            "8",
        ]
        for fault in faults:
            args += ["--fault", fault]
        if reasoning:
            args += ["--reasoning-parser", "deepseek_r1"]
        # The server demands the run's own key, as the runner starts it: the chat must send it.
        salt = new_api_key_salt()
        key = Run(api_key_salt=salt).api_key
        sim = launch(tmp_path, *args, model=qwen.model_id, time_scale=time_scale, api_key=key)
        sims.append(sim)
        port = int(sim.url.rsplit(":", 1)[1])
        host = Host.objects.create(name=f"chat-{uuid.uuid4().hex[:6]}", engine="process",
                                   sim_time_scale=time_scale,
                                   simulated=True, port_min=port, port_max=port)  # fmt: skip
        run = Run.objects.create(recipe=qwen, host=host, port=port, image="x",
                                 state=RunState.READY, api_key_salt=salt)  # fmt: skip
        return sim, run

    yield start
    for sim in sims:
        sim.stop()


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
