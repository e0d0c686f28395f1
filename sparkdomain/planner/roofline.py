"""The decode roofline: one step reads the active weights once plus every running
stream's KV (and recurrent state), so bandwidth / bytes read bounds tokens per second
(SPEC §4); and the check of a measured rate against that ceiling."""

from __future__ import annotations

from collections.abc import Callable

from sparkdomain.planner.budget import KvSizes
from sparkdomain.planner.results import RooflineCheck
from sparkdomain.spark import GB


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


def roofline_check(measured_tps: float, ceiling_tps: float) -> RooflineCheck:
    """A measured decode rate as a share of its bandwidth ceiling; above 100 % is not
    physically possible for one stream without speculative decoding (SPEC §4)."""
    if ceiling_tps <= 0:
        raise ValueError("the ceiling must be positive")
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
