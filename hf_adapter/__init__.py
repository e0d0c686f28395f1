"""Everything SparkPanel does with the Hugging Face Hub and a Spark's Hugging Face cache.

The one door to the hub (as `vllm_adapter` is to vLLM): `huggingface_hub` is imported
here and nowhere else in the panel.

- `plan.plan_download`: resolve a revision to its commit, list the repository with sizes,
  choose the files vLLM needs (`sparkdomain.weights`) and count what the cache still lacks.
- `transfer.download`: fetch what is missing into the cache, in the cache's own layout
  (blobs by ETag, snapshot links, refs), resumable after a crash or a stop, with progress.
- `cache`: that layout; `errors`: the hub's refusals in words a user can act on.

Django-free: the worker calls it with the host's cache path, the endpoint and the token.
"""

from huggingface_hub.utils import _detect_agent

# huggingface_hub 2.x fetches `{HF_ENDPOINT as it was at import}/api/agent-harnesses` the
# first time it formats a terminal message (to tell whether an AI agent runs it). A Spark's
# worker talks to no hub but the configured one (a mirror, an offline LAN): an empty
# registry, set before any call (tests/hf_adapter: no name but the hub's is looked up).
_detect_agent._registry = _detect_agent._EMPTY_REGISTRY
