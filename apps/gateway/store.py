"""What the gateway keeps in Redis, and the scripts that make its checks atomic.

One round trip admits a request (`admit`, a Lua script): the key's record, its
generation, its expiry, its model allowlist, the user's requests per minute (a sliding
60-second window: a sorted set of request ids by time), concurrent requests (a sorted set
of leases) and tokens per UTC day (a counter holding the tokens used plus those reserved
by requests in flight), and the same three for the key itself when it has limits of its
own; it returns the routes' version too. One more round trip at the end
(`release`) frees the lease, replaces the reservation by the tokens really used, and
queues the usage row. Redis runs each script alone, so concurrent clients can never both
take the last slot: the limits are exact at their edges.

Keys (all under ``gw:``): ``gw:key:<sha256>`` a key's record (JSON, a few minutes) or a
tombstone (``revoked``, ``unknown``), ``gw:key:chat-user-<id>`` a user's record for their
chat answers (apps/gateway/chat_budget.py); ``gw:gen`` renewed when limits or roles change (every
record is then re-read from the database); ``gw:routes`` renewed when a run changes state
or a recipe or alias changes; ``gw:rpm:<user>``, ``gw:conc:<user>``,
``gw:tpd:<user>:<day>`` (the user's, shared by their keys and the chat),
``gw:krpm:<key id>``, ``gw:kconc:<key id>``, ``gw:ktpd:<key id>:<day>`` (a key's own,
kept only while it has limits); ``gw:usage`` the usage rows not yet in the database.
Redis is reached through apps/core/redisconn.py.
"""

from __future__ import annotations

import json
import logging
import time
import uuid

from django.conf import settings

from apps.core import redisconn

log = logging.getLogger(__name__)

USAGE_QUEUE = "gw:usage"
GEN = "gw:gen"
ROUTES = "gw:routes"
REVOKED = "revoked"
UNKNOWN = "unknown"
TOMBSTONE_S = 7 * 86400
UNKNOWN_S = 30


def key_name(digest: str) -> str:
    return f"gw:key:{digest}"


ADMIT = """
local function refused(who, code)
  local day = math.floor(tonumber(redis.call('TIME')[1]) / 86400)
  local field = who .. '|' .. code
  redis.call('HINCRBY', 'gw:refused', field, 1)
  redis.call('HINCRBY', 'gw:refused:' .. day, field, 1)
  redis.call('EXPIRE', 'gw:refused:' .. day, 691200)
end
local rec = redis.call('GET', KEYS[1])
if not rec then return {'miss'} end
if rec == 'revoked' or rec == 'unknown' then
  refused('-', 'invalid_api_key')
  return {'bad', rec}
end
local r = cjson.decode(rec)
if tostring(r.g) ~= (redis.call('GET', KEYS[2]) or '0') then return {'stale'} end
local t = redis.call('TIME')
local sec = tonumber(t[1])
local now = sec * 1000 + math.floor(tonumber(t[2]) / 1000)
local version = redis.call('GET', KEYS[3]) or '0'
local who = tostring(r.u)
if r.x and now >= r.x then refused(who, 'key_expired'); return {'expired'} end
if not r.use then refused(who, 'no_role'); return {'role'} end
if ARGV[6] == '0' then
  return {'ok', tostring(r.u), tostring(r.k), -1, 0, 0, version, r.m and cjson.encode(r.m) or ''}
end
if r.m then
  local allowed = false
  for _, name in ipairs(r.m) do
    if name == ARGV[2] then allowed = true end
  end
  if not allowed then refused(who, 'model_not_allowed'); return {'model'} end
end
local u, k = tostring(r.u), tostring(r.k)
local day = math.floor(sec / 86400)
-- The account's counters (shared by all its keys and the chat), then the key's own: a
-- request must pass both. Each: {counter, limit or nil, whose}. Nothing is taken before
-- every check has passed, so a refusal leaves all the counters as they were.
local rpm = {{'gw:rpm:' .. u, r.rpm, 'account'}, {'gw:krpm:' .. k, r.krpm, 'key'}}
local conc = {{'gw:conc:' .. u, r.conc, 'account'}, {'gw:kconc:' .. k, r.kconc, 'key'}}
local tpd = {{'gw:tpd:' .. u .. ':' .. day, r.tpd, 'account'},
             {'gw:ktpd:' .. k .. ':' .. day, r.ktpd, 'key'}}
for _, c in ipairs(rpm) do
  if c[2] then
    redis.call('ZREMRANGEBYSCORE', c[1], '-inf', now - 60000)
    if redis.call('ZCARD', c[1]) >= c[2] then
      local oldest = redis.call('ZRANGE', c[1], 0, 0, 'WITHSCORES')
      refused(u, 'requests_per_minute')
      -- a limit of 0 has no oldest entry: a minute
      return {'rpm', oldest[2] and (tonumber(oldest[2]) + 60000 - now) or 60000, c[2], c[3]}
    end
  end
end
for _, c in ipairs(conc) do
  if c[2] then
    redis.call('ZREMRANGEBYSCORE', c[1], '-inf', now)
    if redis.call('ZCARD', c[1]) >= c[2] then
      refused(u, 'concurrent_requests')
      return {'conc', 1000, c[2], c[3]}
    end
  end
end
-- Tokens: the answer is capped to the smaller budget left, and the reservation (the
-- prompt's bound + the cap) is taken from every budget there is.
local prompt = tonumber(ARGV[3])
local cap = -1
for _, c in ipairs(tpd) do
  if c[2] then
    local left = c[2] - tonumber(redis.call('GET', c[1]) or '0') - prompt
    if left < 1 then
      refused(u, 'tokens_per_day')
      return {'tpd', ((day + 1) * 86400 - sec) * 1000, c[2], c[3]}
    end
    if cap < 0 or left < cap then cap = left end
  end
end
local reserved, kreserved = 0, 0
if cap >= 0 then
  local asked = tonumber(ARGV[4])
  if asked >= 0 and asked < cap then cap = asked end
  if r.tpd then reserved = prompt + cap end
  if r.ktpd then kreserved = prompt + cap end
  for _, c in ipairs(tpd) do
    if c[2] then
      redis.call('INCRBY', c[1], prompt + cap)
      redis.call('EXPIRE', c[1], 172800)
    end
  end
end
for _, c in ipairs(rpm) do
  if c[2] then
    redis.call('ZADD', c[1], now, ARGV[1])
    redis.call('PEXPIRE', c[1], 61000)
  end
end
local lease = tonumber(ARGV[5]) * 1000
for _, c in ipairs(conc) do
  if c[2] then
    redis.call('ZADD', c[1], now + lease, ARGV[1])
    redis.call('PEXPIRE', c[1], lease)
  end
end
return {'ok', u, k, cap, reserved, day, version, '', kreserved}
"""

# Refusals, counted where they happen (the admission script, or COUNT_REFUSAL): `gw:refused`
# holds "<user id or ->|<code>" -> count since the start (the Prometheus counter), and
# `gw:refused:<day>` the same for one UTC day (the Usage page; kept 8 days). Bounded: users
# × a dozen codes — one field a kind, never one row a request, whatever a client sends.
REFUSED = "gw:refused"
COUNT_REFUSAL = """
local day = math.floor(tonumber(redis.call('TIME')[1]) / 86400)
local field = ARGV[1] .. '|' .. ARGV[2]
redis.call('HINCRBY', 'gw:refused', field, 1)
redis.call('HINCRBY', 'gw:refused:' .. day, field, 1)
redis.call('EXPIRE', 'gw:refused:' .. day, 691200)
return 1
"""


def refusals(day: int | None = None) -> dict[tuple[str, str], int]:
    """{(user id or "-", code): count}: since the start, or of one UTC day (days since
    1970-01-01). Empty when Redis is unreachable."""
    name = REFUSED if day is None else f"{REFUSED}:{day}"
    try:
        raw = _sync().hgetall(name)
    except redisconn.RedisError as exc:
        log.warning("gateway refusal counters unreadable: %s", exc)
        return {}
    out: dict[tuple[str, str], int] = {}
    for field, count in raw.items():
        field = field.decode() if isinstance(field, bytes) else field
        who, _, code = field.partition("|")
        out[(who, code)] = int(count)
    return out


RELEASE = """
-- Settle one set of counters (the account's, then the key's when it has any): the lease
-- goes, the rpm entry too for a refund, the token reservation becomes the tokens used.
local function settle(conc, rpm, tpd, reserved)
  redis.call('ZREM', conc, ARGV[2])
  if ARGV[7] == '1' then redis.call('ZREM', rpm, ARGV[2]) end
  reserved = tonumber(reserved)
  if reserved > 0 then
    local delta = tonumber(ARGV[5]) - reserved
    if delta ~= 0 then redis.call('INCRBY', tpd, delta) end
  end
end
local u, k = ARGV[1], ARGV[9]
settle('gw:conc:' .. u, 'gw:rpm:' .. u, 'gw:tpd:' .. u .. ':' .. ARGV[3], ARGV[4])
if k and k ~= '' then
  settle('gw:kconc:' .. k, 'gw:krpm:' .. k, 'gw:ktpd:' .. k .. ':' .. ARGV[3], ARGV[10])
end
if ARGV[6] ~= '' then redis.call('RPUSH', KEYS[1], ARGV[6]) end
if ARGV[8] and ARGV[8] ~= '' then
  redis.call('SET', 'gw:used:' .. ARGV[8], redis.call('TIME')[1], 'EX', 604800)
end
return 1
"""

FILL = """
local old = redis.call('GET', KEYS[1])
if old == 'revoked' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""


def url() -> str:
    return settings.REDIS_URL


# --- from the panel's own (sync) code: keys, limits, routes ------------------------------


def _sync():
    return redisconn.shared_client(url(), timeout=2.0)


def bump(name: str) -> None:
    """Give `gw:gen` or `gw:routes` a new value (every gateway process notices at its next
    request). A fresh random value, not a counter: after a Redis restart a counter would
    start again at values a process has already seen. A Redis that is down is logged, not
    raised: the change itself is already saved."""
    try:
        _sync().set(name, uuid.uuid4().hex)
    except redisconn.RedisError as exc:
        log.warning("could not tell the gateway (%s): %s", name, exc)


def tombstone(digest: str) -> None:
    """A revoked key stops working at its next request, in every process."""
    _sync().set(key_name(digest), REVOKED, ex=TOMBSTONE_S)


def put_record(digest: str, record: dict) -> None:
    _sync().eval(FILL, 1, key_name(digest), json.dumps(record), settings.GATEWAY_KEY_CACHE_S)


def used_key(run_id: int) -> str:
    """When run `run_id` last served an inference request through the panel (unix time,
    set by RELEASE): the on-demand catalog's idle clock (apps/gateway/catalog.py)."""
    return f"gw:used:{run_id}"


def last_used(run_id: int) -> float | None:
    try:
        value = _sync().get(used_key(run_id))
    except redisconn.RedisError:
        return None
    try:
        return float(value) if value else None
    except ValueError:
        return None


def lock(name: str, ttl_s: int) -> str | None:
    """Take a short lock across panel processes: its token, or None when someone holds it."""
    token = uuid.uuid4().hex
    return token if _sync().set(name, token, nx=True, ex=ttl_s) else None


def unlock(name: str, token: str) -> None:
    """Give back a lock taken with `lock` (only one's own: an expired one may be another's)."""
    try:
        _sync().eval(UNLOCK, 1, name, token)
    except redisconn.RedisError as exc:
        log.warning("could not give back %s: %s", name, exc)


PENDING_LOAD_S = 600  # a load waiting for the stops it made (its task may be lost)


def pending_key(recipe_id: int) -> str:
    return f"gw:pending:{recipe_id}"


def set_pending_load(recipe_id: int, words: str) -> None:
    """A load that stopped runs to make room and starts once they have stopped (its task
    on the host's queue): requests meanwhile see it under way, and start nothing more."""
    _sync().set(pending_key(recipe_id), words, ex=PENDING_LOAD_S)


def pending_load(recipe_id: int) -> str | None:
    value = _sync().get(pending_key(recipe_id))
    return value.decode() if isinstance(value, bytes) else value


def clear_pending_load(recipe_id: int) -> None:
    _sync().delete(pending_key(recipe_id))


LOAD_QUEUE = "gw:loadq"
LOAD_QUEUE_ALIVE_S = 15  # a queued model whose held requests stopped asking leaves the line


def _alive_key(recipe_id: int) -> str:
    return f"{LOAD_QUEUE}:alive:{recipe_id}"


def queue_load(recipe_id: int) -> int:
    """Put an on-demand model in line for a Spark (kept at its place while its held
    requests keep asking) and return its place, 1 first."""
    r = _sync()
    with r.pipeline() as pipe:
        pipe.zadd(LOAD_QUEUE, {str(recipe_id): time.time()}, nx=True)
        pipe.set(_alive_key(recipe_id), "1", ex=LOAD_QUEUE_ALIVE_S)
        pipe.execute()
    line = load_line()
    return line.index(recipe_id) + 1 if recipe_id in line else len(line) + 1


def load_line() -> list[int]:
    """The models in line for a Spark, first first; those nobody waits for any more
    leave it."""
    r = _sync()
    members = [int(m) for m in r.zrange(LOAD_QUEUE, 0, -1)]
    if not members:
        return []
    alive = r.mget([_alive_key(m) for m in members])
    gone = [m for m, a in zip(members, alive, strict=True) if a is None]
    if gone:
        r.zrem(LOAD_QUEUE, *[str(m) for m in gone])
    return [m for m, a in zip(members, alive, strict=True) if a is not None]


def unqueue_load(recipe_id: int) -> None:
    """The model loads (or nobody waits for it): out of the line."""
    r = _sync()
    r.zrem(LOAD_QUEUE, str(recipe_id))
    r.delete(_alive_key(recipe_id))


UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def generation() -> str:
    return _sync().get(GEN) or "0"


def _counter(kind: str, user_id: int | None, key_id: int | None) -> str:
    """A user's counter (``gw:rpm:7``) or, given `key_id`, the key's own (``gw:krpm:3``)."""
    return f"gw:k{kind}:{key_id}" if key_id is not None else f"gw:{kind}:{user_id}"


def tokens_used_today(user_id: int | None = None, *, key_id: int | None = None) -> int | None:
    """Tokens counted today for a user (or a key) with a token limit (used + reserved in
    flight)."""
    client = _sync()
    seconds, _ = client.time()
    value = client.get(f"{_counter('tpd', user_id, key_id)}:{seconds // 86400}")
    return int(value) if value is not None else None


def in_flight(user_id: int | None = None, *, key_id: int | None = None) -> int:
    client = _sync()
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    return int(client.zcount(_counter("conc", user_id, key_id), now_ms, "+inf"))


def requests_last_minute(user_id: int | None = None, *, key_id: int | None = None) -> int:
    client = _sync()
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    return int(client.zcount(_counter("rpm", user_id, key_id), now_ms - 60000, "+inf"))


def usage_batch(limit: int) -> list[str]:
    return _sync().lrange(USAGE_QUEUE, 0, limit - 1)


def usage_trim(count: int) -> None:
    _sync().ltrim(USAGE_QUEUE, count, -1)


def usage_lock(timeout_s: float):
    return _sync().lock("gw:usage:lock", timeout=60, blocking_timeout=timeout_s)


# --- the hot path (asyncio) --------------------------------------------------------------


class AsyncStore:
    """The gateway's calls, on one pipelined connection per event loop
    (apps/core/redisconn.py::PipelinedRedis): concurrent requests share it."""

    def client(self):
        return redisconn.pipelined_client(url())

    async def admit(self, digest, request_id, model, prompt_bound, asked, *, count=True):
        args = [request_id, model, prompt_bound, asked, settings.GATEWAY_LEASE_S, int(count)]
        return await self.client().script(ADMIT, [key_name(digest), GEN, ROUTES], args)

    async def count_refusal(self, who: str, code: str) -> None:
        """Count a refusal made before the admission script (no key, a malformed one, a
        browser origin not allowed): the same counters the script keeps for its own."""
        await self.client().script(COUNT_REFUSAL, [], [who, code])

    async def routes_version(self) -> str:
        """The route table's version now (`gw:routes`), without a key: a browser's
        preflight carries none."""
        value = await self.client().call("GET", ROUTES)
        if isinstance(value, bytes):
            value = value.decode()
        return value or "0"

    async def release(self, user, request_id, day, reserved, used, row: dict | None, refund,
                      run: int | None = None, key=None, key_reserved: int = 0):  # fmt: skip
        """Free the request's slot, settle its tokens, queue its usage row and, when a run
        served it (`run`), mark that run used now (the on-demand idle clock). `key`: the
        key it came through, whose own counters are settled the same way."""
        payload = json.dumps(row, separators=(",", ":")) if row else ""
        args = [user, request_id, day, reserved, used, payload, int(refund), run or "",
                key or "", key_reserved]  # fmt: skip
        await self.client().script(RELEASE, [USAGE_QUEUE], args)

    async def fill(self, digest: str, record: dict | None, *, revoked: bool = False):
        if record is None:
            value, ttl = (REVOKED, TOMBSTONE_S) if revoked else (UNKNOWN, UNKNOWN_S)
            extra = [] if revoked else ["NX"]
            await self.client().call("SET", key_name(digest), value, "EX", ttl, *extra)
            return
        args = [json.dumps(record), settings.GATEWAY_KEY_CACHE_S]
        await self.client().script(FILL, [key_name(digest)], args)
