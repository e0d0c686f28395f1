"""The roofline with speculative decoding (issue 41): a good MTP result is above the plain
ceiling, so it is judged against the ceiling with speculation — implausible only above
1 + k tokens a step."""

from __future__ import annotations

import pytest

from sparkdomain.planner import roofline_check
from sparkdomain.planner.roofline import speculative_ceilings


def test_a_speculative_result_above_the_plain_ceiling_is_plausible_up_to_1_plus_k():
    plain = roofline_check(40.0, 30.0)
    assert not plain.plausible and "implausible" in plain.message
    spec = roofline_check(40.0, 30.0, mean_acceptance_length=2.5, num_speculative_tokens=3)
    assert spec.plausible and spec.ceiling_tps == pytest.approx(75.0)
    assert spec.percent == pytest.approx(40 / 75 * 100)
    assert "with speculative decoding" in spec.message and "2.50" in spec.message
    beyond = roofline_check(130.0, 30.0, mean_acceptance_length=2.5, num_speculative_tokens=3)
    assert not beyond.plausible and "1 + 3 tokens a step" in beyond.message
    assert speculative_ceilings(30.0, 2.5, 3) == (75.0, 120.0)
    # k = 0 is no speculation at all.
    assert roofline_check(40.0, 30.0, mean_acceptance_length=2.5).plausible is False
