"""A member imports a file of `vllm bench serve --save-result --save-detailed` as a read-only
job, is told why a bad file is refused, and compares the import beside another job."""

import json
import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login

pytestmark = pytest.mark.e2e

RECIPE = "Nemotron-3-Super 120B — official vLLM Spark recipe"


def vllm_file(concurrency: int, ttft: float) -> bytes:
    """Four requests at one concurrency, as vLLM 0.33 writes them (its keys, detailed)."""
    n, out = 4, 8
    ttfts = [ttft, ttft, ttft + 0.1, ttft + 0.1]
    itls = [[0.05] * (out - 1) for _ in range(n)]
    return json.dumps({
        "date": "20261201-101500", "endpoint_type": "openai-chat", "backend": "openai-chat",
        "label": None, "model_id": "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
        "tokenizer_id": "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", "num_prompts": n,
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": concurrency,
        "duration": 3.0, "completed": n, "failed": 0, "total_input_tokens": 400 * n,
        "total_output_tokens": out * n, "request_throughput": n / 3.0, "request_goodput": None,
        "output_throughput": out * n / 3.0, "total_token_throughput": 408 * n / 3.0,
        "input_lens": [400] * n, "output_lens": [out] * n, "ttfts": ttfts, "itls": itls,
        "latencies": [t + 0.35 for t in ttfts], "start_times": [100 + i * 0.2 for i in range(n)],
        "queue_times": [0.0] * n, "generated_texts": [""] * n, "errors": [""] * n,
    }).encode()  # fmt: skip


def import_file(page, name: str, raw: bytes) -> None:
    page.goto("/benchmarks/")
    page.get_by_role("link", name="Import results").click()
    page.get_by_label("File").set_input_files(
        files=[{"name": name, "mimeType": "application/json", "buffer": raw}]
    )
    page.get_by_label("Recipe").select_option(label=RECIPE)
    page.get_by_label("Spark").select_option(label="local-sim")
    page.get_by_role("button", name="Import").click()


def test_a_member_imports_vllm_bench_results_and_compares_them(new_page, live_server_asgi):
    page = new_page()
    login(page, "mia")

    # A file written without --save-detailed has no per-request lists: refused, with why.
    bare = json.loads(vllm_file(2, 0.3))
    for key in ("ttfts", "itls", "input_lens", "output_lens", "start_times", "errors"):
        bare.pop(key)
    bare["ttfts"] = []
    import_file(page, "bare.json", json.dumps(bare).encode())
    expect(page.locator(".errorlist, [role=alert]").first).to_contain_text("--save-detailed")

    import_file(page, "team-run-c2.json", vllm_file(2, 0.3))
    expect(
        page.get_by_role("heading", name=re.compile(r"^Benchmark job \d+: Nemotron"))
    ).to_be_visible()
    expect(page.locator(".imported-from")).to_contain_text(
        "read-only results from vllm bench serve"
    )
    expect(page.locator(".imported-from")).to_contain_text("team-run-c2.json")
    expect(page.get_by_role("button", name="Cancel")).to_be_hidden()
    first = re.search(r"/jobs/(\d+)/", page.url).group(1)
    results = page.locator("[id$='-results']")
    expect(results).to_contain_text("0.35 / 0.40 / 0.40 s")  # TTFT p50/p95/p99, recomputed

    import_file(page, "team-run-c4.json", vllm_file(4, 0.6))
    second = re.search(r"/jobs/(\d+)/", page.url).group(1)
    page.goto("/benchmarks/")
    for job in (first, second):
        page.get_by_label(f"Compare job {job}").check()
    page.get_by_role("button", name="Compare selected").click()
    suites = page.locator(".compare-suite")
    expect(suites).to_have_count(2)
    for name in ("team-run-c2.json", "team-run-c4.json"):  # in the queue page's order
        expect(suites.filter(has_text=f"Imported: {name}")).to_have_count(1)
