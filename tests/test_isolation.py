"""The parallel suite's own plumbing (tests/isolation.py, XDIST_GROUPS in tests/conftest.py):
each worker's Redis database, every repeated node id run, and groups that name real files."""

from tests.conftest import ROOT, XDIST_GROUPS, distinct_ids, xdist_group
from tests.isolation import MAX_WORKERS, worker_redis_url


def test_each_worker_gets_its_own_redis_database_of_the_same_server():
    base = "redis://:pw@127.0.0.1:6390/0"
    urls = [worker_redis_url(base, i) for i in range(MAX_WORKERS)]
    assert urls == [f"redis://:pw@127.0.0.1:6390/{i + 1}" for i in range(MAX_WORKERS)]
    assert worker_redis_url("redis://127.0.0.1:6379", 2) == "redis://127.0.0.1:6379/3"


def test_repeated_node_ids_are_told_apart_and_the_rest_kept():
    ids = ["a.py::t", "a.py::t", "a.py::u", "a.py::t"]
    assert distinct_ids(ids) == ["a.py::t", "a.py::t#2", "a.py::u", "a.py::t#3"]
    assert len(set(distinct_ids(ids))) == len(ids)


def test_every_group_names_files_that_exist_and_a_repeat_keeps_its_group():
    for paths in XDIST_GROUPS.values():
        for path in paths:
            assert (ROOT / path).exists(), path
    assert xdist_group("tests/e2e/test_chat.py::test_x") == "browser"
    assert xdist_group("tests/runs/test_pair_runs.py::test_y#2") == "machine"
    assert xdist_group("tests/runs/test_run_lifecycle.py::test_z") is None
