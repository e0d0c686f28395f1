"""How a delivery is signed: `X-SparkPanel-Signature: sha256=<hex>`, the HMAC-SHA256 of
`"<timestamp>.<body>"` keyed with the webhook's secret. `verify_signature` is what a
receiver does.

The secret is generated here (256 random bits) and stored encrypted (EncryptedTextField,
apps/api/crypto.py), unlike API tokens, which are hashed: the panel needs it in clear to
sign every delivery. It is shown to its owner once, when created, and never written to logs
or to the delivery log.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def body_bytes(payload: dict) -> bytes:
    """The exact bytes sent and signed: compact JSON, sorted keys, ASCII only."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def _as_bytes(value: str | bytes | int) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def sign(secret: str, timestamp: str | int, body: str | bytes) -> str:
    """`sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`, keyed with the secret."""
    message = _as_bytes(timestamp) + b"." + _as_bytes(body)
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify_signature(secret: str, timestamp: str | int, body: str | bytes, signature: str) -> bool:
    """What a receiver does with a delivery: True if `signature` (the
    X-SparkPanel-Signature header) is the HMAC of `timestamp` (X-SparkPanel-Timestamp)
    and the raw request `body`, in constant time. Sign the raw bytes as received, never a
    re-serialised JSON; also reject old timestamps (say, over 5 minutes) against replays."""
    if not secret or not signature:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), signature.strip())
