"""Disk admission on a real small filesystem (a 16 MiB tmpfs the test mounts): a download
that would not fit is refused with the numbers before a byte is fetched; one that fits
with the reserve goes ahead."""

from __future__ import annotations

from hf_adapter.plan import plan_download
from hf_adapter.transfer import download
from hubsim import store
from sparkdomain.weights import disk_refusal

MIB = 1024 * 1024


def test_the_numbers_of_a_refusal():
    assert disk_refusal(0, 0, "spark-1") is None  # nothing missing: nothing to refuse
    assert disk_refusal(5 * 10**9, 20 * 10**9, "spark-1") is None
    message = disk_refusal(71_200_000_000, 38_400_000_000, "spark-1")
    assert message.startswith("needs 71.2 GB, 38.4 GB free on spark-1")
    assert "delete cached models" in message
    # The reserve counts: 12 GB free is not enough for 5 GB when 10 GB must stay free.
    assert "keeping 10.0 GB free" in disk_refusal(5 * 10**9, 12 * 10**9, "spark-2")


def test_a_download_that_does_not_fit_is_refused_before_a_byte_is_fetched(hub, small_volume):
    store.publish(hub.root, "org/big", {"model.safetensors": 32 * MIB, "config.json": b"{}"})
    store.publish(hub.root, "org/small", {"model.safetensors": 2 * MIB, "config.json": b"{}"})
    hub_cache = small_volume / "hub"

    big = plan_download("org/big", "main", hub_cache=hub_cache, endpoint=hub.url, token=None)
    free = big.free_bytes()
    assert 15 * MIB < free <= 16 * MIB
    refusal = disk_refusal(big.missing_bytes, free, "spark-1", reserve_bytes=MIB)
    assert refusal is not None and refusal.startswith(f"needs {32 * MIB / 1e9:.1f} GB")
    assert not [r for r in hub.requests() if "/cdn/" in r["path"]]  # nothing fetched

    small = plan_download("org/small", "main", hub_cache=hub_cache, endpoint=hub.url, token=None)
    assert disk_refusal(small.missing_bytes, small.free_bytes(), "spark-1", MIB) is None
    download(small, token=None)
    assert small.free_bytes() < free - 2 * MIB + 64 * 1024
