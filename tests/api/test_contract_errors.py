"""The API refuses what the host's vLLM refuses, on the field, in vLLM's words."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_the_api_refuses_swap_space_and_nvfp4_on_the_fields(api_as, operator):
    api = api_as(operator)
    body = {"name": "X", "model_id": "Qwen/Qwen3-32B", "gpu_memory_utilization": "0.85",
            "max_model_len": 8192, "quantization": "nvfp4", "extra_args": ["--swap-space", "0"]}  # fmt: skip
    response = api.post("/recipes", body)
    assert response.status_code == 422
    fields = response.data["error"]["fields"]
    assert "removed in vLLM 0.18" in str(fields["extra_args"])
    body.pop("extra_args")
    response = api.post("/recipes", body)
    assert response.status_code == 422
    assert "Unknown quantization method: nvfp4" in str(response.data["error"]["fields"])
    body["quantization"] = ""
    response = api.post("/recipes", body)
    assert response.status_code == 201, response.data
    assert "--swap-space" not in response.data["argv"]
    assert response.data["argv"][:3] == ["vllm", "serve", "Qwen/Qwen3-32B"]
