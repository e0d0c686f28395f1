"""Speculative decoding as vLLM runs it (vllm_adapter/speculative.py): the methods and
their drafters, the acceptance a recipe states through vLLM's synthetic rejection sampler
(validated and converted exactly as vLLM 0.33 does it: checked against vLLM itself), and
the defaults per drafter and per model family."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.real_vllm import fixtures as real
from vllm_adapter import speculative
from vllm_adapter.speculative import SpeculationError, conditional_rates, from_config

VLLM_033_PYTHON = real.ROOT / "var" / "vllm-0.33.0" / "bin" / "python"


@pytest.mark.parametrize(("method", "family"), [
    ("mtp", "mtp"), ("qwen3_5_mtp", "mtp"), ("deepseek_mtp", "mtp"), ("nemotron_h_mtp", "mtp"),
    ("eagle", "eagle"), ("eagle3", "eagle"), ("dflash", "dflash"), ("dspark", "dflash"),
    ("draft_model", "draft_model"), ("ngram", "lookup"), ("ngram_gpu", "lookup"),
    ("suffix", "lookup"),
])  # fmt: skip
def test_each_vllm_method_runs_its_kind_of_drafter(method, family):
    assert speculative.method_family(method) == family


def test_a_k_token_draft_gives_one_to_k_plus_one_tokens_a_step():
    spec = from_config('{"method": "mtp", "num_speculative_tokens": 3}')
    assert spec.num_tokens == 3 and spec.draft_passes == 3 and not spec.stated
    assert len(spec.rates) == 3
    assert 1.0 < spec.mean_acceptance_length < 4.0
    assert list(spec.rates) == sorted(spec.rates, reverse=True)  # unconditional: never rises
    assert spec.mean_acceptance_length == pytest.approx(1 + sum(spec.rates))
    assert spec.acceptance_rate == pytest.approx(sum(spec.rates) / 3)
    # A prompt lookup drafts without a GPU pass; a block drafter in one pass.
    assert from_config({"method": "ngram", "num_speculative_tokens": 4}).draft_passes == 0
    assert from_config({"method": "dflash", "model": "z/d", "num_speculative_tokens": 8}).draft_passes == 1  # fmt: skip
    assert from_config(None) is None and from_config("") is None


def test_an_mtp_head_with_public_measurements_has_its_own_default():
    """Nemotron-3 Super's MTP on a GB10 accepts 0.757/0.503/0.323 (mean 2.58); Qwen3.6's
    0.886/0.778 (2.66): the family's own head, not the median of all MTP heads."""
    nemotron = from_config({"method": "mtp", "num_speculative_tokens": 3}, model_type="nemotron_h")
    assert nemotron.mean_acceptance_length == pytest.approx(2.58, abs=0.05)
    qwen = from_config({"method": "mtp", "num_speculative_tokens": 2}, model_type="qwen3_5_moe")
    assert qwen.mean_acceptance_length == pytest.approx(2.66, abs=0.03)
    generic = from_config({"method": "mtp", "num_speculative_tokens": 2}, model_type="llama")
    assert generic.mean_acceptance_length not in (qwen.mean_acceptance_length,)
    # Without num_speculative_tokens an MTP method drafts once per MTP layer, as vLLM does.
    assert from_config({"method": "qwen3_5_mtp"}, mtp_layers=1).num_tokens == 1
    assert from_config({"method": "suffix"}).num_tokens == 24


def test_a_recipe_states_its_acceptance_with_vllms_synthetic_rejection_sampler():
    rates = from_config({"method": "mtp", "num_speculative_tokens": 3,
                         "rejection_sample_method": "synthetic",
                         "synthetic_acceptance_rates": [0.9, 0.6, 0.3]})  # fmt: skip
    assert rates.stated and rates.rates == (0.9, 0.6, 0.3)
    assert rates.mean_acceptance_length == pytest.approx(2.8)
    assert rates.conditional == pytest.approx((0.9, 2 / 3, 0.5))
    length = from_config({"method": "eagle3", "model": "x/y", "num_speculative_tokens": 3,
                          "rejection_sample_method": "synthetic",
                          "synthetic_acceptance_length": 2.5})  # fmt: skip
    assert length.rates == (1.0, 0.5, 0.0) and length.mean_acceptance_length == 2.5


@pytest.mark.parametrize("config", [
    {"method": "mtp", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",
     "synthetic_acceptance_rates": [0.5, 0.6, 0.1]},
    {"method": "mtp", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",
     "synthetic_acceptance_rates": [0.5, 0.4]},
    {"method": "mtp", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",
     "synthetic_acceptance_length": 4.5},
    {"method": "mtp", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic"},
    {"method": "mtp", "num_speculative_tokens": 0},
    {"method": "eagle", "model": "x/y"},
    {},
    "[1, 2]",
    "{not json",
])  # fmt: skip
def test_a_config_vllm_refuses_is_refused_with_a_reason(config):
    with pytest.raises(SpeculationError) as caught:
        from_config(config if config != {} else {"model": None, "method": None})
    assert str(caught.value)


@pytest.mark.real_vllm
def test_the_conversions_and_checks_are_vllms_own():
    """vLLM 0.33's SpeculativeConfig and rejection sampler, run in its own venv: the same
    rates from a length, the same conditional rates, the same refusals."""
    cases = {"length": [[2.5, 3], [1.0, 2], [3.75, 4]],
             "conditional": [[0.9, 0.6, 0.3], [0.8, 0.0, 0.0], [1.0, 1.0]],
             "refuse": [[3, [0.5, 0.6, 0.1], None], [3, [0.5, 0.4], None], [3, None, 4.5]]}  # fmt: skip
    script = """
import json, sys
from vllm.config.speculative import SpeculativeConfig as S
from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates as u
cases = json.loads(sys.argv[1])
out = {"length": [S._acceptance_length_to_rates(*c) for c in cases["length"]],
       "conditional": [list(u(c)) for c in cases["conditional"]], "refuse": []}
for n, rates, length in cases["refuse"]:
    try:
        S._resolve_synthetic_acceptance_rates(n, rates, length)
        out["refuse"].append(None)
    except ValueError as exc:
        out["refuse"].append(str(exc))
print(json.dumps(out))
"""
    done = subprocess.run([str(VLLM_033_PYTHON), "-c", script, json.dumps(cases)],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    vllm = json.loads(done.stdout.strip().splitlines()[-1])
    for (length, n), theirs in zip(cases["length"], vllm["length"], strict=True):
        ours = from_config({"method": "mtp", "num_speculative_tokens": n,
                            "rejection_sample_method": "synthetic",
                            "synthetic_acceptance_length": length})  # fmt: skip
        assert list(ours.rates) == pytest.approx(theirs)
    for rates, theirs in zip(cases["conditional"], vllm["conditional"], strict=True):
        assert list(conditional_rates(rates)) == pytest.approx(theirs)
    for (n, rates, length), theirs in zip(cases["refuse"], vllm["refuse"], strict=True):
        config = {"method": "mtp", "num_speculative_tokens": n,
                  "rejection_sample_method": "synthetic"}  # fmt: skip
        if rates is not None:
            config["synthetic_acceptance_rates"] = rates
        else:
            config["synthetic_acceptance_length"] = length
        with pytest.raises(SpeculationError) as caught:
            from_config(config)
        assert theirs is not None and str(caught.value) == theirs


# A /metrics body in the format vLLM 0.32's CPU server printed for an n-gram run (names,
# types, help texts and labels as it wrote them; the model label shortened).
SPEC_BODY = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {p1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="2"}} {p2}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="999"}} 5.0
"""


def test_the_parser_reads_acceptance_as_vllm_logs_it():
    """18 drafts, 46 drafted, 43 accepted, 17/13/13 by position: vLLM's own log line for
    these counts said "Mean acceptance length: 3.39 … Per-position acceptance rate: 0.944,
    0.722, 0.722, Avg Draft acceptance rate: 93.5%"."""
    from vllm_adapter import metrics as scrape

    snap = scrape.parse(SPEC_BODY.format(drafts=18, draft_tokens=46, accepted=43, p0=17, p1=13,
                                         p2=13))  # fmt: skip
    assert round(snap.spec_mean_acceptance_length, 2) == 3.39
    assert round(snap.spec_acceptance_rate * 100, 1) == 93.5
    assert [round(r, 3) for r in snap.spec_per_position] == [0.944, 0.722, 0.722]
    # Over a window, from the counters' increases (a later scrape: 10 more drafts).
    deriver = scrape.Deriver(window_s=60)
    deriver.feed(0.0, snap)
    deriver.feed(1.0, scrape.parse(SPEC_BODY.format(drafts=28, draft_tokens=76, accepted=58,
                                                    p0=25, p1=18, p2=15)))  # fmt: skip
    sample = deriver.sample()
    assert sample["spec_acceptance_rate"] == pytest.approx(15 / 30)
    assert sample["spec_acceptance_length"] == pytest.approx(1 + 15 / 10)
