"""The last line of defence: whatever a database row says, nothing starts with a
--gpu-memory-utilization above 0.90 (or without one)."""

import pytest
from django.db import connection

from apps.hosts.engines import engine_for
from apps.runs import runner
from apps.runs.models import Run, RunState
from apps.runs.services import RunRefused, run_start

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_corrupted_run_vector_is_refused_by_the_engine_and_nothing_starts(
    engine_host, qwen, operator
):
    run = run_start(recipe=qwen, host=engine_host, user=operator)
    argv = list(run.argv)
    argv[argv.index("--gpu-memory-utilization") + 1] = "0.95"
    Run.objects.filter(pk=run.pk).update(argv=argv)  # as if the row were tampered with
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert run.failure_reason.startswith("refused to start")
    assert "0.9" in run.failure_reason
    assert engine_for(engine_host).list_managed() == []


def test_a_corrupted_recipe_row_cannot_be_started(sim_host, qwen, operator):
    # The database's CHECK constraint stops this; switch it off to simulate a corrupted row.
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA ignore_check_constraints = ON")
        cursor.execute(
            "UPDATE recipes_recipe SET gpu_memory_utilization = '0.95' WHERE id = %s", [qwen.pk]
        )
        cursor.execute("PRAGMA ignore_check_constraints = OFF")
    qwen.refresh_from_db()
    assert float(qwen.gpu_memory_utilization) == 0.95
    with pytest.raises(RunRefused, match="cannot be started"):
        run_start(recipe=qwen, host=sim_host, user=operator)
    assert not Run.objects.exists()
