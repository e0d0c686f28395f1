"""An incident's "Lowest MemAvailable" on the host pages: a number when the watchdog had a
reading, else words that say what is missing — never a bare "GiB" (issue 43, item 8).

An agent- or worker-silence alert (apps/guard/tasks.py::check_hosts) carries no memory
curve at all; an "unknown" alert's curve holds only unreadable (null) points."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.telemetry.models import Incident

pytestmark = pytest.mark.django_db


def _incident(host, curve, message):
    return Incident.objects.create(
        host=host, kind=Incident.Kind.ALERT, at=timezone.now(), message=message,
        memory_curve=curve,
    )  # fmt: skip


def _lowest_cells(html: str) -> list[str]:
    """The last cell of each incident row (the incidents table's "Lowest MemAvailable")."""
    table = html[html.index("Lowest MemAvailable") :]
    table = table[: table.index("</table>")]
    return [
        re.sub(r"<[^>]+>|\s+", " ", row.rsplit("<td", 1)[1].split(">", 1)[1]).strip()
        for row in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)
    ]


@pytest.mark.parametrize("page", ["host-detail", "hosts"])
def test_every_incident_says_a_number_or_what_is_missing(client_as, member, sim_host, page):
    _incident(sim_host, [[0, 3 * 2**30], [1, None], [2, 5 * 2**30]], "low memory")
    _incident(sim_host, [], "the host agent on local-sim stopped reporting 120 s ago")
    _incident(sim_host, [[0, None], [1, None]], "MemAvailable is unknown for 2 polls")
    url = reverse(page, args=[sim_host.name]) if page == "host-detail" else reverse(page)
    html = client_as(member).get(url).content.decode()
    cells = _lowest_cells(html)
    assert len(cells) == 3, cells
    unknown, silent, low = cells  # newest first
    assert low == "3.00 GiB"
    assert silent == "none recorded: this incident carries no memory readings"
    assert unknown == "unknown: MemAvailable could not be read in that minute"
    assert not any(re.fullmatch(r"\s*GiB", cell) for cell in cells)
