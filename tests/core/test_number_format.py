"""Counts in one format on every page (issue 43: "8749963 tokens" beside "8,749,963")."""

from __future__ import annotations

import pytest
from django.template import Context, Template

from apps.runs.models import Run, RunState


@pytest.mark.parametrize(
    "value, shown",
    [(8749963, "8,749,963"), (999, "999"), (1068.0, "1,068"), (1068.25, "1,068.25"),
     (0.5, "0.5"), (None, "None"), ("12345", "12345"), (True, "True")],
)  # fmt: skip
def test_grouped_groups_counts_and_leaves_the_rest(value, shown):
    assert Template("{{ v|grouped }}").render(Context({"v": value})) == shown


@pytest.mark.django_db
def test_a_run_page_shows_vllms_kv_cache_and_concurrency_grouped(client_as, member, sim_host, qwen):
    run = Run.objects.create(recipe=qwen, host=sim_host, port=20004, image="x",
                             state=RunState.READY,
                             facts={"kv_cache_tokens": 8749963, "max_concurrency": 1068.29})  # fmt: skip
    html = client_as(member).get(run.get_absolute_url()).content.decode()
    assert "8,749,963 tokens" in html and "1,068.29× at full context" in html
    assert "8749963" not in html
