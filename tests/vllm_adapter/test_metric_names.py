"""vllm_adapter.metric_names: the one table of vLLM metric families, checked against the
contracts generated from real vLLM's source (vllm_adapter/contracts/vllm-<v>.json), and
the three users of the table (the host agent's parser, the benchmark harness's server
cross-check, sparksim's /metrics) taking their names from it."""

from __future__ import annotations

from dataclasses import fields

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vllm_adapter import contract, metric_names
from vllm_adapter import metrics as scrape
from vllm_adapter.metric_names import (
    BENCHMARKS,
    COUNTER,
    FAMILIES,
    GAUGE,
    HISTOGRAM,
    LABELNAMES,
    TELEMETRY,
    Family,
    check,
)

VERSIONS = contract.available_versions()
NEWEST = contract.latest_version()


def test_there_are_contracts_to_check_against():
    assert NEWEST in VERSIONS and len(VERSIONS) >= 2, VERSIONS
    assert contract.load(NEWEST).metrics, "the newest contract lists no metrics"


def test_every_current_name_type_and_help_text_is_in_the_newest_contract():
    assert check(contract.load(NEWEST).metrics, newest=True) == []


@pytest.mark.parametrize("version", [v for v in VERSIONS if v != NEWEST])
def test_every_family_can_be_read_from_each_older_supported_version(version):
    assert check(contract.load(version).metrics, newest=False) == []


def test_the_check_fails_for_what_vllm_does_not_have():
    """The check is not vacuous: a name the newest contract lacks, a wrong type, an alias
    that is still current, a wrong help text: each is reported."""
    metrics = contract.load(NEWEST).metrics
    made_up = Family("x", "vllm:made_up_metric", GAUGE, "Nothing.", read_by=(TELEMETRY,))
    wrong_type = Family("x", "vllm:num_requests_running", COUNTER,
                        "Number of requests in model execution batches.")  # fmt: skip
    stale_alias = Family("x", "vllm:num_requests_running", GAUGE,
                         "Number of requests in model execution batches.",
                         aliases=("vllm:num_requests_waiting",))  # fmt: skip
    wrong_help = Family("x", "vllm:num_requests_running", GAUGE, "Something else.")
    for family, words in [
        (made_up, "not in the contract"),
        (wrong_type, "a gauge in vLLM, a counter here"),
        (stale_alias, "still has it"),
        (wrong_help, "help text"),
    ]:
        problems = check(metrics, newest=True, families=[family])
        assert len(problems) == 1 and words in problems[0], (family, problems)
    # Only an older alias present: fine for an older version, not for the newest.
    renamed = Family("x", "vllm:made_up_metric", GAUGE, "Nothing.",
                     aliases=("vllm:num_requests_running",))  # fmt: skip
    assert check(metrics, newest=False, families=[renamed]) == []
    assert check(metrics, newest=True, families=[renamed])
    # A counter vLLM's source names with "_total" (prometheus_client strips it).
    total = next(
        m for m in metrics.values() if m["type"] == COUNTER and m["name"].endswith("_total")
    )
    base = Family("x", total["name"].removesuffix("_total"), COUNTER, total["documentation"])
    assert check(metrics, newest=True, families=[base]) == []
    # An unscanned family is checked where a contract lists it, and only there.
    unscanned = Family("x", "vllm:num_requests_running", COUNTER, "", unscanned="why")
    assert check(metrics, newest=True, families=[unscanned])
    assert check({}, newest=True, families=[unscanned]) == []


def test_the_table_itself():
    keys = [f.key for f in FAMILIES]
    assert len(keys) == len(set(keys))
    for f in FAMILIES:
        assert f.type in (GAUGE, COUNTER, HISTOGRAM), f
        assert all(n.startswith("vllm:") for n in f.names), f
        assert not (f.type == COUNTER and f.name.endswith("_total")), f  # stored without it
        assert set(f.read_by) <= {TELEMETRY, BENCHMARKS}, f
    # Every family the panel reads is in the contracts (none is read only as "unscanned").
    assert not [f for f in FAMILIES if f.read_by and f.unscanned]


def test_the_telemetry_parser_reads_the_table():
    snapshot_fields = {f.name for f in fields(scrape.Snapshot)}
    read = metric_names.read_by(TELEMETRY)
    assert set(read) <= snapshot_fields
    assert read == {**scrape._GAUGES, **scrape._COUNTERS, **scrape._HISTOGRAMS}
    assert scrape._GAUGES["kv_usage"] == ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


def test_the_harness_cross_check_reads_the_table():
    from apps.benchmarks import harness

    assert metric_names.read_by(BENCHMARKS) == {
        **harness.HISTOGRAMS,
        **harness.COUNTERS,
        **harness.GAUGES,
    }
    assert set(harness.HISTOGRAMS) == {"ttft", "itl", "e2e", "prefill", "decode", "queue"}
    assert set(harness.COUNTERS) == {"prompt_tokens", "generation_tokens", "preemptions",
                                     "prefix_queries", "prefix_hits", "spec_drafts",
                                     "spec_draft_tokens", "spec_accepted"}  # fmt: skip
    assert set(harness.GAUGES) == {"running", "waiting", "kv_usage"}


def test_a_server_without_speculative_decoding_has_none_of_its_families():
    from sparksim.metrics import VllmMetrics

    sim = VllmMetrics(model_name="m", max_model_len=1024, cache_config={"block_size": "16"})
    parsed = {f.name for f in text_string_to_metric_families(sim.render().decode())}
    speculative = {f.name for f in FAMILIES if f.speculative}
    assert len(speculative) == 4 and not parsed & speculative
    assert {f.name for f in FAMILIES if not f.speculative} <= parsed


def test_sparksim_emits_every_family_of_the_table_with_its_type_labels_and_help():
    from sparksim.metrics import VllmMetrics

    sim = VllmMetrics(model_name="m", max_model_len=1024, cache_config={"block_size": "16"},
                      num_speculative_tokens=2)  # fmt: skip
    sim.observe_draft(2, 1)
    parsed = {f.name: f for f in text_string_to_metric_families(sim.render().decode())}
    # The 0.0.4 text format has no "created" type: x_created reads as a family of its own.
    created = {name for name in parsed if name.endswith("_created")}
    emitted = {name: f for name, f in parsed.items() if name not in created}
    assert set(emitted) == {f.name for f in FAMILIES}
    assert created == {
        s
        for f in FAMILIES
        if f.type != GAUGE
        for s in metric_names.sample_names(f)
        if s.endswith("_created")
    }
    for f in FAMILIES:
        family = emitted[f.name]
        assert family.type == f.type and family.documentation == f.documentation, f.key
        labels = set().union(*(s.labels for s in family.samples)) - {"le"}
        if f.key == "cache_config":  # CacheConfig.metrics_info() plus engine, no model_name
            assert labels == {"block_size", "engine"}
        else:
            assert labels == {*LABELNAMES, *f.labels}, f.key
        names = {s.name for s in family.samples}
        assert names <= set(metric_names.sample_names(f)), (f.key, names)
