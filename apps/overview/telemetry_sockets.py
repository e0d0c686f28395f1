"""The telemetry sockets: /ws/telemetry/host/<name>/ and /ws/telemetry/run/<id>/ (they look
up the Host or the Run, so they live above both; the samples come from apps.telemetry's
groups, sent there by the host agent)."""

from __future__ import annotations

import json

from channels.db import database_sync_to_async

from apps.accounts.roles import VIEW_PANEL
from apps.core.consumers import PanelSocket
from apps.hosts.models import Host
from apps.runs.models import Run
from apps.telemetry.groups import host_group, run_group

CLOSE_NOT_FOUND = 4404


class TelemetryConsumer(PanelSocket):
    """Live samples of one host (/ws/telemetry/host/<name>/) or one run
    (/ws/telemetry/run/<id>/), as JSON, straight from the host agent."""

    async def connect(self) -> None:
        user = await self.authorise(VIEW_PANEL)
        if user is None:
            return
        kwargs = self.scope["url_route"]["kwargs"]
        group = await database_sync_to_async(self._group)(kwargs)
        if group is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        if await self.join(group):  # left again by PanelSocket on disconnect
            await self.accept()

    @staticmethod
    def _group(kwargs: dict) -> str | None:
        if "host" in kwargs:
            return (
                host_group(kwargs["host"])
                if Host.objects.filter(name=kwargs["host"]).exists()
                else None
            )
        return run_group(kwargs["run"]) if Run.objects.filter(pk=kwargs["run"]).exists() else None

    async def receive(self, text_data=None, bytes_data=None) -> None:
        return  # push-only

    async def telemetry_sample(self, event: dict) -> None:
        await self.send(text_data=json.dumps({"type": "sample", "sample": event["sample"]}))
