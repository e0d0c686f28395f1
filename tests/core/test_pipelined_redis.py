"""The gateway's pipelined Redis client against a real Redis: replies in order under
concurrency, errors as exceptions, and a connection Redis drops is replaced at the next
command."""

from __future__ import annotations

import asyncio

import pytest
import redis

from apps.core.redisconn import PipelinedRedis, shared_client


def test_concurrent_commands_get_their_own_replies_and_errors_raise(redis_url):
    async def go():
        client = PipelinedRedis(redis_url)
        await client.call("DEL", "pipelined:test")
        answers = await asyncio.gather(*(client.call("INCR", "pipelined:test") for _ in range(300)))
        assert sorted(answers) == list(range(1, 301)) and answers == sorted(answers)
        assert await client.call("SET", "pipelined:s", "x" * 100_000) == "OK"
        assert await client.call("GET", "pipelined:s") == "x" * 100_000  # a reply in pieces
        assert await client.call("GET", "pipelined:missing") is None
        assert await client.script("return {1, 'two', {3}}", [], []) == [1, "two", [3]]
        with pytest.raises(redis.ResponseError):
            await client.call("INCR", "pipelined:s")  # not an integer
        assert await client.call("PING") == "PONG"  # the connection is still in order
        client.close()

    asyncio.run(go())


def test_a_dropped_connection_fails_in_flight_and_the_next_command_reconnects(redis_url):
    async def go():
        client = PipelinedRedis(redis_url)
        assert await client.call("CLIENT", "SETNAME", "pipelined-test") == "OK"
        waiting = asyncio.ensure_future(client.call("BLPOP", "pipelined:nothing", 1))
        await asyncio.sleep(0.1)
        sync = shared_client(redis_url, timeout=2)
        for entry in sync.client_list():
            if entry.get("name") == "pipelined-test":
                sync.client_kill(entry["addr"])
        with pytest.raises(redis.ConnectionError):
            await waiting  # in flight when Redis dropped the connection
        assert await client.call("PING") == "PONG"  # a fresh connection, same database
        client.close()

    asyncio.run(go())


def test_commands_issued_together_reach_redis_in_one_write(redis_url):
    """300 commands from one pass of the event loop wake Redis once or twice (Redis counts
    the reads it processes), not once per command."""

    def reads() -> int:
        return int(shared_client(redis_url, timeout=2).info("stats")["total_reads_processed"])

    async def go():
        client = PipelinedRedis(redis_url)
        await client.call("PING")  # connected
        before = reads()
        await asyncio.gather(*(client.call("INCR", "pipelined:burst") for _ in range(300)))
        return reads() - before - 1  # less the INFO read itself

    assert asyncio.run(go()) <= 3
