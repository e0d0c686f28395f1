"""An image pull's progress, summed over its layers from the Docker API's pull events."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PullProgress:
    """Where an image pull stands, summed over its layers."""

    layers: int
    layers_done: int
    bytes_done: int
    bytes_total: int
    status: str

    @property
    def percent(self) -> float:
        if self.bytes_total:
            return min(100.0, 100.0 * self.bytes_done / self.bytes_total)
        return 100.0 * self.layers_done / self.layers if self.layers else 0.0


@dataclass
class _PullState:
    total: dict[str, int] = field(default_factory=dict)
    done: dict[str, int] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    seen: list[str] = field(default_factory=list)

    def feed(self, event: dict) -> str:
        layer = event.get("id", "")
        status = event.get("status", "")
        if not layer or layer.startswith(("sha256:", "latest")) or ":" in layer:
            return status
        first = ("Pulling fs layer", "Waiting", "Downloading", "Already exists")
        if layer not in self.seen and status.startswith(first):
            self.seen.append(layer)
        detail = event.get("progressDetail") or {}
        if status == "Downloading" and detail.get("total"):
            self.total[layer] = int(detail["total"])
            self.done[layer] = int(detail.get("current", 0))
        elif status in ("Download complete", "Verifying Checksum"):
            if layer in self.total:
                self.done[layer] = self.total[layer]
        elif status in ("Pull complete", "Already exists"):
            self.finished.add(layer)
            if layer in self.total:
                self.done[layer] = self.total[layer]
        return status

    def progress(self, status: str) -> PullProgress:
        return PullProgress(
            layers=len(self.seen),
            layers_done=len(self.finished),
            bytes_done=sum(self.done.values()),
            bytes_total=sum(self.total.values()),
            status=status,
        )
