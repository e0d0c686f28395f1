"""Everything SparkPanel knows about vLLM, in one place (no Django).

- ``contract``: what a given vLLM version accepts and emits (its `vllm serve` options,
  quantization methods, parsers, metrics, log formats), generated from vLLM itself by
  ``tools/vllm_contract.py`` into ``contracts/vllm-<version>.json``;
- ``logparse``: a starting server's log → phases, facts and failures;
- ``metrics``: fetching and parsing ``/metrics``;

Not named ``vllm``: the real package would shadow it (or be shadowed by it).
"""
