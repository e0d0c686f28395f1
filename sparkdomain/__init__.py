"""The Spark domain: the rules and arithmetic of serving vLLM on a DGX Spark, with no Django.

- ``spark``: the machine's numbers (memory, bandwidth, reserves, the guard's lines) and the
  ≤ 0.90 utilization rule's constants;
- ``planner``: memory and roofline planning for a recipe on a host;
- ``calibration``: plan against measured, the pure arithmetic;
- ``flags`` and ``command``: a recipe's ``vllm serve`` arguments and the command guard;
- ``presets``: the shipped model presets; ``hf_config``: reading a model's config.json;
- ``sparkrun``: importing sparkrun recipes; ``bounded``: the bounded YAML/JSON reader every
  import goes through; ``meminfo``: parsing ``/proc/meminfo``.

Everything here is plain Python: the Django apps, the vLLM adapter and sparksim import it;
it imports none of them (``lint-imports`` holds that).
"""
