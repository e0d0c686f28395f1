"""The panel's own flag tables, checked against what real vLLM versions accept (their
contracts, read out of vLLM by tools/vllm_contract.py), not against a hand-written list."""

from __future__ import annotations

import pytest

from sparkdomain.command import FIELD_OF_FLAG
from sparkdomain.flags import EXTRA_FLAGS, KV_CACHE_DTYPES, TYPED_FLAGS
from sparkdomain.option_rules import Kind, classify
from vllm_adapter import advice, contract

VERSIONS = contract.available_versions()


def test_the_extra_arguments_are_every_option_the_rules_allow_in_the_newest_vllm():
    """EXTRA_FLAGS is derived, never hand-written: every spelling of every PATH or DATA option
    of the newest contract, with the contract's own kind and choices; nothing denied and no
    typed field among them."""
    c = contract.load()
    expected = set()
    for option in c.options:
        rule = classify(option)
        if rule.kind in (Kind.PATH, Kind.DATA) and not set(option.all_strings) & set(TYPED_FLAGS):
            expected |= set(option.options)
    assert set(EXTRA_FLAGS) == expected
    for flag, spec in EXTRA_FLAGS.items():
        option = c.option(flag)
        assert option.takes_value == (spec.kind != "switch"), flag
        if option.choices is not None and spec.kind == "choice":
            assert spec.choices == option.choices, flag
    for flag in (
        "--load-format",
        "--speculative-config",
        "--enable-auto-tool-choice",
        "--trust-remote-code",
        "--attention-backend",
        "--compilation-config",
    ):
        assert flag in EXTRA_FLAGS, flag
    for flag in (
        "--host",
        "--worker-cls",
        "--cpu-offload-gb",
        "--chat-template",
        "--max-model-len",
        "--pipeline-parallel-size",
    ):
        assert flag not in EXTRA_FLAGS, flag


@pytest.mark.parametrize("version", VERSIONS)
def test_every_flag_the_panel_sets_itself_exists_in_vllm(version):
    c = contract.load(version)
    missing = [f for f in [*TYPED_FLAGS, *FIELD_OF_FLAG] if c.option(f) is None]
    assert missing == []
    # The KV field offers every dtype of every known vLLM; each start checks the host's own.
    assert set(c.kv_cache_dtypes) <= set(KV_CACHE_DTYPES)


def test_the_removed_flags_advice_talks_about_is_really_gone_from_the_newest_vllm():
    c = contract.load()
    assert [flag for flag in advice.REMOVED if c.has(flag)] == []


def test_a_removed_flag_in_the_extra_arguments_gets_its_advice():
    from sparkdomain.flags import FlagError, validate_extra_args

    with pytest.raises(FlagError, match=r"removed in vLLM 0\.18"):
        validate_extra_args(["--swap-space", "0"])
