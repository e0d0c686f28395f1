"""One set of memory rules: what the wizard recommends, the planner calls "fits", admission
admits and the host agent's guard watches must agree (issue #16, point 2).

The wrong number was the guard's old 8 GiB warn line: a stock Spark at the recommended
0.90 keeps 128 − 6 − 0.90 × 121.7 GiB ≈ 4.39 GB free by design, so every such run warned.
"""

from __future__ import annotations

import importlib
from decimal import Decimal

import pytest
from django.apps import apps as django_apps

from apps.guard.watchdog import OK, Watchdog
from apps.hosts.models import Host
from sparkdomain import planner, spark
from sparkdomain.meminfo import parse_meminfo
from sparkdomain.planner import Architecture, Flags, HostSpec, Verdict, plan
from sparkdomain.presets import RECIPES
from sparkdomain.spark import GB, GIB
from sparksim.memory import MemoryModel, meminfo_text

# The 35B preset the wizard's decision table recommends 0.90 for.
QWEN = next(r for r in RECIPES if r["slug"] == "qwen3-5-35b-max-single-user")


def qwen_plan(util: float = 0.90, host: HostSpec | None = None) -> planner.Plan:
    arch = Architecture(**{k: QWEN[k] for k in QWEN if k in Architecture.__dataclass_fields__})
    flags = Flags(util, QWEN["max_model_len"], QWEN["max_num_seqs"])
    return plan(arch, flags, host)


def test_the_numbers_behind_the_lines():
    """Recomputed from the Spark's facts: 0.90 leaves 4.39 GB (4.09 GiB) free; the warn line
    (4 GB) sits under it and above the act line (3 GB, the top of the seed's 2–3 GB band);
    0.90 stays the largest value that keeps the warn line free."""
    pool = 0.90 * spark.CUDA_VISIBLE_GIB * GIB
    free = spark.PHYSICAL_MEMORY_GB * GB - spark.OS_RESERVE_GB * GB - pool
    assert pool / GB == pytest.approx(117.607, abs=1e-3)
    assert free / GB == pytest.approx(4.393, abs=1e-3) and free / GIB == pytest.approx(
        4.09, abs=0.01
    )
    assert spark.WATCHDOG_ACT_GB * GB < spark.WATCHDOG_WARN_GB * GB < free < 8 * GIB
    usable = spark.PHYSICAL_MEMORY_GB - spark.OS_RESERVE_GB - spark.WATCHDOG_WARN_GB
    assert usable * GB / (spark.CUDA_VISIBLE_GIB * GIB) == pytest.approx(0.903, abs=1e-3)
    assert planner.largest_safe_utilization(HostSpec()) == Decimal("0.90")


@pytest.mark.django_db
def test_a_recipe_the_wizard_recommends_raises_no_warning_on_the_stock_host():
    host = Host.objects.create(name="stock")  # every memory field at its default
    result = qwen_plan(host=host.spec())
    assert result.recommended_utilization == Decimal("0.90")
    assert result.verdict is Verdict.FITS
    assert result.headroom_bytes / GB == pytest.approx(4.39, abs=0.01)
    assert not [w for w in result.warnings if w.code in {"freeze-risk", "below-warn-line"}]

    # The simulated Spark's meminfo once that run is ready (its footprint is the whole pool),
    # read the way the host agent reads it and fed to the guard with the host's own lines.
    memory = MemoryModel()
    memory.set_footprint(int(result.pool_bytes))
    reading = parse_meminfo(meminfo_text(memory, 0.0))
    assert reading.available_bytes / GB == pytest.approx(4.39, abs=0.01)
    guard = Watchdog(warn_bytes=host.watchdog_warn_bytes, act_bytes=host.watchdog_act_bytes)
    decisions = [guard.observe(reading.available_bytes, float(t)) for t in range(20)]
    assert {d.level for d in decisions} == {OK}, decisions[-1].message

    # The old line would have warned on exactly this reading.
    old = Watchdog(warn_bytes=8 * GIB, act_bytes=3 * GIB)
    assert [old.observe(reading.available_bytes, float(t)) for t in range(3)][-1].level == "warn"


def test_fits_needs_the_headroom_to_reach_the_warn_line():
    # A bigger OS reserve: 0.90 leaves 3.39 GB — above the act line, below the warn line.
    host = HostSpec(os_reserve_gb=7.0)
    result = qwen_plan(0.90, host)
    assert 3 * GB < result.headroom_bytes < 4 * GB
    assert result.verdict is Verdict.TIGHT  # never "fits" when every run would warn
    warning = next(w for w in result.warnings if w.code == "below-warn-line")
    assert "4 GB warn line" in warning.message and "at most 0.89" in warning.message
    # The largest safe value keeps the warn line free, and is then a fit.
    assert planner.largest_safe_utilization(host) == Decimal("0.89")
    assert qwen_plan(0.89, host).verdict is Verdict.FITS
    # Below the act line it does not fit at all.
    assert qwen_plan(0.90, HostSpec(os_reserve_gb=8.0)).verdict is Verdict.DOES_NOT_FIT


@pytest.mark.django_db
def test_the_planner_uses_the_hosts_own_lines():
    host = Host.objects.create(name="careful", watchdog_warn_gb=6.0, watchdog_act_gb=4.0)
    spec = host.spec()
    assert (spec.warn_margin_gb, spec.freeze_margin_gb) == (6.0, 4.0)
    # (128 − 6 − 6) / 130.67 = 0.887
    assert planner.largest_safe_utilization(spec) == Decimal("0.88")
    assert qwen_plan(0.90, spec).verdict is Verdict.TIGHT
    assert host.watchdog_warn_bytes == 6 * GB and host.watchdog_act_gib == pytest.approx(
        3.725, abs=1e-3
    )


@pytest.mark.django_db
def test_the_migration_moves_old_defaults_and_keeps_custom_lines():
    """The data step of hosts 0006: before it runs the columns still hold GiB values."""
    migration = importlib.import_module("apps.hosts.migrations.0006_memory_guard_lines_in_gb")
    stock = Host.objects.create(name="old-default", watchdog_warn_gb=8.0, watchdog_act_gb=3.0)
    custom = Host.objects.create(name="custom", watchdog_warn_gb=10.0, watchdog_act_gb=4.0)
    migration.to_gb(django_apps, None)
    stock.refresh_from_db()
    custom.refresh_from_db()
    assert (stock.watchdog_warn_gb, stock.watchdog_act_gb) == (4.0, 3.0)
    # The same bytes as the admin's lines, now in GB.
    assert custom.watchdog_warn_gb == pytest.approx(10.737, abs=1e-3)
    assert custom.watchdog_act_gb == pytest.approx(4.295, abs=1e-3)
    migration.to_gib(django_apps, None)  # and back
    stock.refresh_from_db()
    custom.refresh_from_db()
    assert (stock.watchdog_warn_gb, stock.watchdog_act_gb) == (8.0, 3.0)
    assert (custom.watchdog_warn_gb, custom.watchdog_act_gb) == pytest.approx((10.0, 4.0))


def test_new_hosts_get_the_new_lines():
    host = Host(name="fresh")
    assert (host.watchdog_warn_gb, host.watchdog_act_gb) == (4.0, 3.0)
