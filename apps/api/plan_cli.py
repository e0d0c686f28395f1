"""`manage.py spark plan [options] -- vllm serve MODEL [flags…]`: will this command start on
this host, and what will vLLM print? Runs here, not through the API (no server needed).

    manage.py spark plan --host spark-1 -- vllm serve Qwen/Qwen3-0.6B --max-model-len 32768
    manage.py spark plan --json --config config.json --checkpoint-gib 21.8 \\
        --vllm-version 0.22.1 --total-gib 121.69 -- vllm serve nvidia/Qwen3.6-35B-A3B-NVFP4 …

Inputs: the model's config.json (`--config FILE`, else the host's Hugging Face cache, else
the hub unless offline), its checkpoint size (`--checkpoint-gib`, else the cache or the
hub's file sizes), the vLLM version (`--vllm-version`, default the host's), the host's
memory (`--total-gib`, `--free-gib`, default the host's measured figures). The answer is
vLLM's (vllm_adapter/startup) beside the panel's own rule (`panel_allows`, `panel_reason`:
utilization ≤ 0.90 and the guard's freeze margin). docs/recipes.md, "What vLLM does at
start-up".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from hf_adapter.errors import HubError
from sparkdomain import spark
from vllm_adapter.startup import ModelConfigError, predict

MAX_CONFIG_BYTES = 4 * 1024 * 1024


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{prog} plan",
        description="Predict what vLLM does when it starts a command: the figures it prints "
        "and whether it starts (its error, in its words), beside the panel's own rule.",
        epilog="Everything after -- is the command: vllm serve MODEL [flags…].",
    )
    parser.add_argument("--host", help="a host of the panel: its vLLM version and memory")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument("--config", type=Path, help="the model's config.json")
    parser.add_argument("--checkpoint-gib", type=float, help="the checkpoint's size (GiB)")
    parser.add_argument("--vllm-version", help="the vLLM version (default: the host's)")
    parser.add_argument("--total-gib", type=float, help="CUDA's total memory per GPU (GiB)")
    parser.add_argument("--free-gib", type=float, help="the free memory CUDA reports (GiB)")
    parser.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="cpu: vLLM's CPU backend (its KV cache is VLLM_CPU_KVCACHE_SPACE)",
    )
    return parser


def main(argv: list[str], prog: str = "manage.py spark") -> int:
    if "--" in argv:
        at = argv.index("--")
        own, command = argv[:at], argv[at + 1 :]
    else:
        own, command = argv, []
    parser = _parser(prog)
    args = parser.parse_args(own)
    if command[:2] != ["vllm", "serve"] or len(command) < 3:
        parser.error("give the command after --: vllm serve MODEL [flags…]")
    host = _host(args.host) if args.host else None
    version = args.vllm_version or (host.contract_version if host else None)
    total = args.total_gib or (host.cuda_visible_gib if host else spark.CUDA_VISIBLE_GIB)
    free = args.free_gib if args.free_gib is not None else _free(host)
    if not version:
        from vllm_adapter import contract

        version = contract.latest_version()
    try:
        config, checkpoint, source = _model(args, command, host)
        prediction = predict(config, command, vllm_version=version, total_gib=total,
                             free_gib=free, checkpoint_gib=checkpoint,
                             env=os.environ, device=args.device)  # fmt: skip
        if source:
            prediction.notes.insert(0, source)
    except (ModelConfigError, ValueError, OSError, HubError) as exc:
        print(f"{prog} plan: {exc}", file=sys.stderr)
        return 2
    out = prediction.as_dict()
    out.update(panel_verdict(prediction))
    if args.json:
        print(json.dumps(out))
    else:
        print(_text(out))
    return 0


def _host(name: str):
    from apps.hosts.models import Host

    host = Host.objects.filter(name=name).first()
    if host is None:
        raise SystemExit(f"no host named {name!r}")
    return host


def _free(host) -> float | None:
    """The free memory CUDA will see on the host now (on a GB10: MemAvailable), from the
    host agent's last reading; None when the panel has none."""
    return (host.free_gib() or None) if host is not None else None


def _model(args, command: list[str], host) -> tuple[dict, float | None, str]:
    """config.json and the checkpoint's size: given, else from the host's Hugging Face
    cache, else from the hub (unless HF_HUB_OFFLINE) — hf_adapter/facts.py."""
    if args.config is not None:
        return _config(args.config), args.checkpoint_gib, ""
    from django.conf import settings

    from hf_adapter import cache as hub_cache
    from hf_adapter.facts import model_facts
    from sparkdomain.model_refs import is_hub_id

    model = command[2]
    if not is_hub_id(model):
        raise ModelConfigError(f"{model} is not a Hugging Face id: give its config.json (--config)")
    revision = "main"
    if "--revision" in command[:-1]:
        revision = command[command.index("--revision") + 1]
    home = Path(host.hf_cache_path) if host is not None and host.hf_cache_path else (
        Path(settings.VAR_DIR) / "plan-cache"
    )  # fmt: skip
    facts = model_facts(
        model, revision, hub_cache=hub_cache.hub_cache(home), endpoint=settings.HF_ENDPOINT,
        token=settings.HF_TOKEN or None, offline=os.environ.get("HF_HUB_OFFLINE") == "1",
    )  # fmt: skip
    from apps.recipes.models import ModelFacts

    ModelFacts.record(facts)  # the recipe pages read it
    checkpoint = args.checkpoint_gib
    if checkpoint is None and facts.checkpoint_bytes:
        checkpoint = facts.checkpoint_bytes / (1 << 30)
    where = "the host's cache" if facts.source == "cache" else "the hub"
    return (
        facts.config,
        checkpoint,
        f"config.json and checkpoint size of {model} at {facts.commit[:12]} from {where}",
    )


def _config(path: Path) -> dict:
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ModelConfigError(f"{path} is over {MAX_CONFIG_BYTES // (1 << 20)} MiB")
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ModelConfigError(f"{path} is not JSON: {exc}") from None


def panel_verdict(prediction) -> dict:
    utilization = prediction.breakdown.get("gpu_memory_utilization")
    if utilization is not None and float(utilization) > float(spark.MAX_GPU_MEMORY_UTILIZATION):
        return {"panel_allows": False, "panel_reason": (
            f"--gpu-memory-utilization {utilization} is above the Spark's "
            f"{spark.MAX_GPU_MEMORY_UTILIZATION}: the whole machine can freeze")}  # fmt: skip
    if utilization is None:
        return {"panel_allows": False, "panel_reason": (
            "no --gpu-memory-utilization: vLLM's default is above the Spark's "
            f"{spark.MAX_GPU_MEMORY_UTILIZATION}")}  # fmt: skip
    if not prediction.starts:
        return {"panel_allows": False, "panel_reason": f"vLLM would not start: {prediction.error}"}
    return {"panel_allows": True, "panel_reason": None}


def _text(out: dict) -> str:
    lines = [f"vLLM {out['vllm_version']}: " + ("starts" if out["starts"] else "does not start")]
    if out["error"]:
        lines.append(f"  error: {out['error']}")
    for key, label in (("model_loading_gib", "Model loading took (GiB)"),
                       ("available_kv_cache_gib", "Available KV cache memory (GiB)"),
                       ("kv_cache_tokens", "GPU KV cache size (tokens)"),
                       ("max_concurrency", "Maximum concurrency")):  # fmt: skip
        if out[key] is not None:
            lines.append(f"  {label}: {out[key]:,}")
    smallest = out["breakdown"].get("smallest_utilization")
    if smallest and smallest["utilization"] is None:
        lines.append(
            f"  {smallest['for_sequences']} full-length sequences at once need "
            f"{smallest['needs_kv_gib']} GiB of KV cache: more than this GPU holds at any "
            "utilization (vLLM serves fewer at once)"
        )
    elif smallest:
        lines.append(
            f"  {smallest['for_sequences']} full-length sequences at once need "
            f"--gpu-memory-utilization {smallest['utilization']}, which leaves "
            f"{smallest['leaves_gib']} GiB to the rest of the machine"
        )
    lines.append("  panel: " + ("allows it" if out["panel_allows"] else out["panel_reason"]))
    for note in out["notes"]:
        lines.append(f"  note: {note}")
    return "\n".join(lines)
