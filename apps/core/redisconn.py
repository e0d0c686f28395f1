"""The panel's own door to Redis (no Django: callers pass the URL).

Celery's broker and the Channels layer reach Redis through their own libraries, set up in
settings; everything the panel itself asks Redis (live versions and shared hashes in
``apps/core/live.py``, the health check in ``apps/core/selectors.py``, ``make run``'s wait
for Redis in ``tools/devrun.py``) goes through here.
"""

from __future__ import annotations

import threading

import redis

RedisError = redis.RedisError

_clients: dict[tuple[str, float], redis.Redis] = {}
_clients_lock = threading.Lock()


def shared_client(url: str, *, timeout: float) -> redis.Redis:
    """One pooled client per URL (and timeout) for the life of the process; answers are
    decoded to str."""
    with _clients_lock:
        client = _clients.get((url, timeout))
        if client is None:
            client = redis.Redis.from_url(
                url, socket_connect_timeout=timeout, socket_timeout=timeout, decode_responses=True
            )
            _clients[(url, timeout)] = client
    return client


def ping(url: str, *, timeout: float = 0.5) -> str | None:
    """None when Redis at ``url`` answers a PING within ``timeout``, else why not. A fresh
    connection each time (a health check must not be answered by a pooled socket)."""
    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        client.ping()
        return None
    except redis.RedisError as exc:
        return str(exc)
    finally:
        client.close()


_async_clients: dict[tuple[int, str], object] = {}


def async_client(url: str, *, timeout: float = 2.0):
    """One asyncio client per event loop and URL (a client is bound to the loop that first
    uses it); answers are bytes. The gateway's hot path asks Redis through it."""
    import asyncio

    import redis.asyncio

    key = (id(asyncio.get_running_loop()), url)
    client = _async_clients.get(key)
    if client is None:
        client = _async_clients[key] = redis.asyncio.Redis.from_url(
            url, socket_connect_timeout=timeout, socket_timeout=timeout, max_connections=512
        )
    return client
