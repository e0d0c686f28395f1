"""What the gateway's admission script's "no" says (apps/gateway/store.py, ADMIT): one
text for the API's errors (apps/gateway/asgi.py) and for the chat's
(apps/gateway/chat_budget.py), so a limit reads the same wherever it stops someone."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    status: int  # the HTTP status the API answers with
    message: str
    type: str  # OpenAI's error type
    code: str
    retry_after_s: int | None = None


def refusal(verdict: str, answer: list, model: str) -> Refusal:
    """The refusal for an ADMIT answer that is not "ok" (nor "miss"/"stale")."""
    if verdict == "bad" or verdict == "expired":
        why = "has expired" if verdict == "expired" else "is invalid or has been revoked"
        return Refusal(401, f"The key {why}.", "authentication_error", "invalid_api_key")
    if verdict == "role":
        return Refusal(403, "Your account has no role that may use the models (ask an "
                       "admin).", "permission_error", "no_role")  # fmt: skip
    if verdict == "model":
        return Refusal(403, f"This key may not use the model '{model}'.", "permission_error",
                       "model_not_allowed")  # fmt: skip
    retry_s = max(1, math.ceil(int(answer[1]) / 1000))
    limit = answer[2]
    # Whose limit: the key's own (set by an admin on the Limits page), or the account's
    # ("your": shared by all the user's keys and the chat).
    whose = "this key's" if len(answer) > 3 and answer[3] == "key" else "your"
    if verdict == "rpm":
        message = f"Over {whose} limit of {limit} requests per minute; retry in {retry_s} s."
        code = "requests_per_minute"
    elif verdict == "conc":
        message = f"Over {whose} limit of {limit} requests at once; wait for one to finish."
        code = "concurrent_requests"
    else:
        budget = "Today's" if whose == "your" else "This key's daily"
        message = (f"{budget} {limit} tokens are used (prompt + answer); the budget "
                   f"renews at midnight UTC, in {retry_s // 60} min.")  # fmt: skip
        code = "tokens_per_day"
    return Refusal(429, message, "rate_limit_exceeded", code, retry_s)
