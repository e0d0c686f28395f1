"""One TLS context per process for the panel's short HTTP calls.

httpx builds a fresh ``ssl.SSLContext`` (loading certifi's bundle: tens of ms) for every
``httpx.get`` and every new ``httpx.Client``, even for a plain-HTTP URL. A worker that
asks a run's /version or /v1/models once per job paid that each time (a tenth of a
one-request benchmark job's worker time). Pass ``verify=client_context()`` instead: the
same verification (certifi's bundle, as httpx's default), built once.
"""

from __future__ import annotations

import functools
import ssl

import certifi


@functools.cache
def client_context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certifi.where())
