"""sparksim: a simulator of vLLM serving on an NVIDIA DGX Spark (no GPU, no weights).

`python -m sparksim serve <model> [vllm serve flags] [--time-scale X] [--fault SPEC]`.
It never imports Django; see docs/sparksim.md.
"""

__version__ = "0.1.0"
