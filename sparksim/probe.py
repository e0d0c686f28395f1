"""Measure one streamed completion as a client sees it (SPEC §5 definitions).

Used by sparksim's calibration tests and `make bench`: token ids as the prompt give an
exact prompt length; every SSE chunk is timestamped on a monotonic clock; TTFT is the first
chunk carrying generated text; decode tok/s = (tokens − 1) ÷ (last − first).
"""

from __future__ import annotations

import json
import time

import httpx

from sparksim.corpus import TextStream


def measure(
    client: httpx.Client, prompt_tokens: int, gen_tokens: int, scale: float, seed: int
) -> dict:
    prompt = TextStream(seed).next_ids(prompt_tokens)
    body = {
        "prompt": prompt,
        "max_tokens": gen_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    t0 = time.monotonic()
    first = last = None
    usage = None
    with client.stream("POST", "/v1/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            now = time.monotonic()
            data = json.loads(line[6:])
            usage = data.get("usage") or usage
            if data["choices"] and data["choices"][0]["text"]:
                first = first or now
                last = now
    if usage is None or first is None:
        raise RuntimeError("the stream carried no tokens or no usage")
    if usage["prompt_tokens"] != prompt_tokens or usage["completion_tokens"] != gen_tokens:
        raise RuntimeError(f"usage {usage} does not match {prompt_tokens}/{gen_tokens}")
    ttft = (first - t0) * scale
    total = (last - t0) * scale
    decode = (gen_tokens - 1) / (total - ttft) if gen_tokens > 1 and total > ttft else float("nan")
    return {"ttft": ttft, "total": total, "prefill": prompt_tokens / ttft, "decode": decode}
