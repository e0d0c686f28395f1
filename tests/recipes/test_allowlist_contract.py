"""The panel's own flag tables, checked against what real vLLM versions accept (their
contracts, read out of vLLM by tools/vllm_contract.py), not against a hand-written list."""

from __future__ import annotations

import pytest

from sparkdomain.command import FIELD_OF_FLAG
from sparkdomain.flags import EXTRA_FLAGS, KV_CACHE_DTYPES, TYPED_FLAGS
from vllm_adapter import advice, contract

VERSIONS = contract.available_versions()


@pytest.mark.parametrize("version", VERSIONS)
def test_every_allowed_extra_argument_exists_in_vllm_with_its_kind(version):
    c = contract.load(version)
    for flag, spec in EXTRA_FLAGS.items():
        option = c.option(flag)
        assert option is not None, f"vLLM {version} has no {flag}"
        assert option.takes_value == (spec.kind != "switch"), flag
        if spec.kind == "choice":
            known = option.choices or (c.load_formats if flag == "--load-format" else None)
            if known is not None:
                assert set(spec.choices) <= set(known), (flag, set(spec.choices) - set(known))


@pytest.mark.parametrize("version", VERSIONS)
def test_every_flag_the_panel_sets_itself_exists_in_vllm(version):
    c = contract.load(version)
    missing = [f for f in [*TYPED_FLAGS, *FIELD_OF_FLAG] if c.option(f) is None]
    assert missing == []
    assert set(KV_CACHE_DTYPES) <= set(c.kv_cache_dtypes)


def test_the_removed_flags_advice_talks_about_is_really_gone_from_the_newest_vllm():
    c = contract.load()
    assert [flag for flag in advice.REMOVED if c.has(flag)] == []


def test_a_removed_flag_in_the_extra_arguments_gets_its_advice():
    from sparkdomain.flags import FlagError, validate_extra_args

    with pytest.raises(FlagError, match=r"removed in vLLM 0\.18"):
        validate_extra_args(["--swap-space", "0"])
