"""Measure one streamed completion as a client sees it (SPEC §5 definitions).

Used by sparksim's calibration tests and `make bench`: token ids as the prompt give an
exact prompt length; every read of the SSE stream is timestamped on a monotonic clock and
decoded by the panel's own `vllm_adapter.sse`; TTFT is the first chunk carrying generated
text; decode tok/s = (tokens − 1) ÷ (last − first). Body and path: `vllm_adapter.endpoints`.
"""

from __future__ import annotations

import time

import httpx

from sparksim.corpus import TextStream
from vllm_adapter import endpoints, sse


def measure(
    client: httpx.Client, prompt_tokens: int, gen_tokens: int, scale: float, seed: int
) -> dict:
    prompt = TextStream(seed).next_ids(prompt_tokens)
    body = endpoints.completion_body(
        prompt, max_tokens=gen_tokens, stream=True, continuous_usage=True, ignore_eos=True
    )
    t0 = time.monotonic()
    first = last = None
    usage = None
    decoder = sse.Decoder()
    with client.stream("POST", endpoints.COMPLETIONS, json=body) as response:
        response.raise_for_status()
        for data in response.iter_bytes():
            now = time.monotonic()
            for event in decoder.feed(data):
                chunk = sse.parse_data(event)
                if chunk is None:
                    continue
                usage = sse.usage(chunk) or usage
                if any(sse.has_text(choice) for choice in chunk.get("choices") or ()):
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
