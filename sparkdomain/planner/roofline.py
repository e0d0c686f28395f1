"""The decode roofline: one step reads the active weights once plus every running
stream's KV (and recurrent state), so bandwidth / bytes read bounds tokens per second
(SPEC §4); and the check of a measured rate against that ceiling."""

from __future__ import annotations

from collections.abc import Callable

from sparkdomain.planner.budget import KvSizes
from sparkdomain.planner.results import RooflineCheck
from sparkdomain.spark import DECODE_BANDWIDTH_SHARE, GB, GRAPH_STEP_SECONDS


def decode_ceilings(
    active: float | None,
    kv: KvSizes,
    tp: int,
    max_num_seqs: int,
    bandwidth_gbs: float,
    comm_seconds: Callable[[int], float] = lambda _tokens: 0.0,
) -> tuple[float | None, float | None, float | None]:
    """Tokens/s ceilings: one stream at an empty context, one stream at max_model_len and
    max_num_seqs streams at max_model_len together; each Spark reads its 1/tp share in
    parallel, then a step of n tokens pays `comm_seconds(n)` on the link between them
    (planner/link.py; nothing on one Spark). None where the active weights (or the KV size)
    are unknown."""
    bandwidth = bandwidth_gbs * GB
    ceiling = ceiling_full = ceiling_batch = None
    if active:
        per_node_active = active / tp
        ceiling = 1 / (per_node_active / bandwidth + comm_seconds(1))
        if kv.per_sequence is not None:
            stream = kv.per_sequence + kv.state_per_sequence
            ceiling_full = 1 / ((per_node_active + stream) / bandwidth + comm_seconds(1))
            n = max_num_seqs
            ceiling_batch = n / ((per_node_active + n * stream) / bandwidth + comm_seconds(n))
    return ceiling, ceiling_full, ceiling_batch


def users_at_rate(
    active: float | None,
    kv: KvSizes,
    tp: int,
    min_tps: float,
    bandwidth_gbs: float,
    comm_seconds: Callable[[int], float] = lambda _tokens: 0.0,
    *,
    limit: int = 100_000,
) -> int | None:
    """How many streams at max_model_len can decode together with each still getting at
    least `min_tps` tokens/s, at the pace a GB10 reaches (DECODE_BANDWIDTH_SHARE of the
    bandwidth plus a step's fixed cost; sparksim decodes at the same pace): a step of n
    streams reads the active weights once and every stream's KV, so each stream's rate
    falls as n grows. 0 when even one stream is slower; None where the active weights or
    the KV size are unknown. An estimate, not a measurement: prefill, a MoE batch touching
    more experts and the scheduler all lower it; a benchmark measures it."""
    if not active or kv.per_sequence is None or min_tps <= 0:
        return None
    reach = bandwidth_gbs * GB * DECODE_BANDWIDTH_SHARE
    stream = kv.per_sequence + kv.state_per_sequence

    def per_stream_tps(n: int) -> float:
        step = (active / tp + n * stream) / reach + GRAPH_STEP_SECONDS + comm_seconds(n)
        return 1 / step

    if per_stream_tps(1) < min_tps:
        return 0
    low, high = 1, limit  # the rate falls with n: the largest n still fast enough
    if per_stream_tps(high) >= min_tps:
        return high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if per_stream_tps(mid) >= min_tps else (low, mid)
    return low


def speculative_ceilings(ceiling_tps: float, mean_acceptance_length: float,
                         num_speculative_tokens: int) -> tuple[float, float]:  # fmt: skip
    """(expected, bound) single-stream ceilings with speculative decoding: a verified step
    gives a stream `mean_acceptance_length` tokens on average and never more than 1 + k,
    and it reads the active weights at least once — so the no-speculation ceiling times
    each. The drafter's own reads and the extra experts a MoE step's 1 + k tokens touch
    only lower what is reached (sparksim models them)."""
    return ceiling_tps * mean_acceptance_length, ceiling_tps * (1 + num_speculative_tokens)


def roofline_check(measured_tps: float, ceiling_tps: float, *,
                   mean_acceptance_length: float | None = None,
                   num_speculative_tokens: int = 0) -> RooflineCheck:  # fmt: skip
    """A measured decode rate as a share of its bandwidth ceiling; above 100 % is not
    physically possible for one stream without speculative decoding (SPEC §4). With it
    (`num_speculative_tokens` k and the expected mean acceptance length), the rate is
    judged against the ceiling with speculation: its share of the expected ceiling, and
    implausible only above 1 + k times the plain one (no step gives more tokens)."""
    if ceiling_tps <= 0:
        raise ValueError("the ceiling must be positive")
    if num_speculative_tokens > 0 and mean_acceptance_length:
        expected, bound = speculative_ceilings(ceiling_tps, mean_acceptance_length,
                                               num_speculative_tokens)  # fmt: skip
        percent = measured_tps / expected * 100
        plausible = measured_tps <= bound
        head = (
            f"{measured_tps:.1f} tok/s is {percent:.0f} % of the {expected:.1f} tok/s ceiling "
            f"with speculative decoding ({ceiling_tps:.1f} tok/s without it × a mean acceptance "
            f"length of {mean_acceptance_length:.2f})"
        )
        if plausible:
            message = head + "."
        else:
            message = (
                head + f": above {bound:.1f} tok/s (1 + {num_speculative_tokens} tokens a step) "
                "is physically implausible; check the model or the measurement."
            )
        return RooflineCheck(measured_tps, expected, percent, plausible, message)
    percent = measured_tps / ceiling_tps * 100
    plausible = percent <= 100.0
    if plausible:
        message = (
            f"{measured_tps:.1f} tok/s is {percent:.0f} % of the {ceiling_tps:.1f} tok/s ceiling."
        )
    else:
        message = (
            f"{measured_tps:.1f} tok/s is {percent:.0f} % of the {ceiling_tps:.1f} tok/s "
            "bandwidth ceiling: above 100 % is physically implausible (each token must read "
            "the active weights once); check the model, speculative decoding or the measurement."
        )
    return RooflineCheck(measured_tps, ceiling_tps, percent, plausible, message)
