import uuid
from decimal import Decimal

import pytest

from apps.hosts.engines import engine_for
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.recipes.presets import RECIPES


@pytest.fixture
def sim_host(db, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    host = Host.objects.create(
        name=f"sim-{uuid.uuid4().hex[:6]}", engine=Host.Engine.PROCESS, simulated=True,
        sim_time_scale=50, port_min=20000, port_max=20999,
    )  # fmt: skip
    yield host
    engine = engine_for(host)  # no server outlives its test
    for managed in engine.list_managed():
        engine.stop(managed.handle, timeout=5)


@pytest.fixture(params=["process", "docker"])
def engine_host(request):
    """The same lifecycle on both engines: a sparksim process, and sparksim in a container
    on the real Docker engine."""
    return request.getfixturevalue("sim_host" if request.param == "process" else "docker_sim_host")


@pytest.fixture
def qwen(db):
    # Built from the preset's data: transactional tests flush the migrated presets away.
    data = next(r for r in RECIPES if r["slug"] == "qwen3-5-35b-max-single-user")
    recipe, _ = Recipe.objects.update_or_create(
        slug="qwen-test",
        defaults={**data, "slug": "qwen-test", "name": "Qwen test", "max_model_len": 8192},
    )
    return recipe


@pytest.fixture
def too_long(db):
    return Recipe.objects.create(
        name="Too long", model_id="nvidia/Llama-3.3-70B-Instruct-FP4", gpu_memory_utilization=Decimal("0.50"),
        max_model_len=262144, max_num_seqs=1, total_params_b=70.6, weight_format="nvfp4", num_layers=80,
        kv_heads=8, head_dim=128,
    )  # fmt: skip
