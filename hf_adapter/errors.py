"""The hub's refusals, as a user can act on them.

`HubError.kind` is stable (for the run page, the API and tests); `message` says what
happened with the numbers; `advice` says what to do. A token is never part of either.
"""

from __future__ import annotations

import errno

import httpx2
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

# Worth another try after a pause: the network or the hub, not the request.
RETRYABLE = frozenset({"network", "hub_http", "busy"})


class HubError(Exception):
    def __init__(self, kind: str, message: str, advice: str = "") -> None:
        super().__init__(message)
        self.kind, self.message, self.advice = kind, message, advice

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE

    def __str__(self) -> str:
        return f"{self.message} {self.advice}".strip()


def translate(exc: BaseException, repo_id: str, revision: str, endpoint: str) -> HubError:
    """huggingface_hub's and the network's exceptions, in the panel's words."""
    page = f"{endpoint.rstrip('/')}/{repo_id}"
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return HubError(
            "disk_full",
            f"The Spark's disk filled up while downloading {repo_id}.",
            "Delete cached models (the host's page lists them) and start again: what was "
            "fetched is kept and resumed.",
        )
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, GatedRepoError) and status == 401:
        return HubError(
            "gated_no_token",
            f"{repo_id} is a gated model and no Hugging Face token is configured.",
            "Set HF_TOKEN in the Spark worker's environment (.env) to the token of an account "
            f"that accepted the licence on {page}.",
        )
    if isinstance(exc, GatedRepoError):
        return HubError(
            "gated",
            f"{repo_id} is a gated model and the configured token has no access to it "
            f"(HTTP {status}).",
            f"Accept the licence on the model's page ({page}) with the account whose token is "
            "configured, then start again.",
        )
    if isinstance(exc, RevisionNotFoundError):
        return HubError(
            "revision_not_found",
            f"{repo_id} has no revision {revision!r}.",
            f"Check the recipe's revision against the branches and commits on {page}.",
        )
    if isinstance(exc, EntryNotFoundError):
        return HubError(
            "file_not_found",
            f"A file of {repo_id} that the hub listed is gone.",
            "The repository changed while downloading: start again.",
        )
    if isinstance(exc, RepositoryNotFoundError):
        return HubError(
            "repo_not_found",
            f"{repo_id} was not found on {endpoint} (or it is private and the configured "
            "token cannot see it).",
            "Check the recipe's model id; for a private model, configure a token with access.",
        )
    if isinstance(exc, OfflineModeIsEnabled):
        return HubError(
            "offline",
            "HF_HUB_OFFLINE is set in the worker's environment.",
            "Unset it for the worker (the panel sets it for vLLM's containers only).",
        )
    if isinstance(exc, HfHubHTTPError):
        return HubError(
            "hub_http",
            f"The hub answered HTTP {status} for {repo_id}.",
            "The hub may be down or rate-limiting: try again later.",
        )
    if isinstance(exc, httpx2.HTTPError | OSError):
        return HubError(
            "network",
            f"Could not reach {endpoint}: {type(exc).__name__}: {exc}",
            "Check the Spark's network and proxy settings; a partial download is kept and resumed.",
        )
    return HubError("hub_error", f"{type(exc).__name__}: {exc}")
