"""One send budget per chat and per app (R4): Feishu allows 5 messages per second in a chat, shared by every
bot in it, and 50 per second per app. Every outbound call of the bridge takes one token from the chat's bucket
and one from the app's, both or neither, atomically. The send paths do not take it themselves: they pass a
`SendBudget` and `feishu_call` (feishu/outbound/client.py) takes it right before each request leaves (after the bot's
tenant token is fetched, and again before a resend after a rate-limit answer), so a request reaches Feishu
within its token's slot:

- with Redis (`REDIS_URL`), in one Lua script, so every worker on every node shares the same buckets;
- on the embedded default (no Redis), in the database, by a compare-and-swap on the bucket row's version.

`send_budget_acquire` is for final messages: it waits for tokens and never drops the send.
`send_budget_try` is for intermediate card updates: it never waits; on False the caller skips this update
and the next one carries the merged text.

The buckets refill at FEISHU_SEND_BUDGET_RATIO of Feishu's rate and hold one token (no burst): Feishu counts
requests in a window as they arrive, and arrival times jitter by a network round trip, so a bucket that
spent exactly 5 tokens per second would now and then land a sixth inside Feishu's window and earn a 429.
A 429 that still happens is waited out by `feishu_call` (x-ogw-ratelimit-reset).
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, OperationalError, transaction
from django.db.models import F

from agents.models import Bot
from core.metrics import send_budget_wait_record
from feishu.models import SendBudgetBucket

logger = logging.getLogger(__name__)

KEY_PREFIX = "amux:sendbudget:"
BUCKET_CAPACITY = 1.0
# Refill arithmetic in floats lands a hair under a whole token (0.2 s x 5/s = 0.9999999999999999).
TOKEN_EPSILON = 1e-9
# A bucket untouched this long is full again; Redis forgets it then.
BUCKET_IDLE_SECONDS = 60
DB_SWAP_ATTEMPTS = 20
DB_LOCKED_PAUSE_SECONDS = 0.005
# A final send waits at most this long for tokens, then goes anyway: delayed, never dropped (a 429 that
# may follow is waited out by feishu_call).
MAX_ACQUIRE_WAIT_SECONDS = 120.0

# Both buckets in one script: refill, check, spend both or neither. Redis' own clock (TIME) keeps every
# node on one time. Returns the seconds to wait as a string ("0" = taken): Lua numbers become integers.
_TAKE_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local capacity = tonumber(ARGV[1])
local idle = tonumber(ARGV[2])
local wait = 0
local tokens = {}
for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 + i])
  local saved = redis.call('HMGET', KEYS[i], 'tokens', 'at')
  local level = tonumber(saved[1]) or capacity
  local at = tonumber(saved[2]) or now
  level = math.min(capacity, level + math.max(0, now - at) * rate)
  tokens[i] = level
  if level < 1 - tonumber(ARGV[3 + #KEYS]) then wait = math.max(wait, (1 - level) / rate) end
end
if wait > 0 then return tostring(wait) end
for i = 1, #KEYS do
  redis.call('HSET', KEYS[i], 'tokens', tostring(math.max(0, tokens[i] - 1)), 'at', tostring(now))
  redis.call('EXPIRE', KEYS[i], idle)
end
return '0'
"""


@dataclass(frozen=True)
class Bucket:
    key: str
    rate: float  # tokens per second


def budget_buckets(*, chat_id: str, app_id: str) -> list[Bucket]:
    """The chat's bucket (shared by every bot of the hub) and the app's; a call without a chat takes only the app's."""
    ratio = settings.FEISHU_SEND_BUDGET_RATIO
    buckets = [Bucket(key=f"app:{app_id}", rate=settings.FEISHU_APP_SENDS_PER_SECOND * ratio)]
    if chat_id:
        buckets.insert(0, Bucket(key=f"chat:{chat_id}", rate=settings.FEISHU_CHAT_SENDS_PER_SECOND * ratio))
    return buckets


def bucket_take(
    *, tokens: list[float], refilled_at: list[float], rates: list[float], now: float
) -> tuple[float, list[float]]:
    """The rule, without storage: refill each bucket to `now`, then take one token from each, or say how long
    to wait. Returns (wait_seconds, new_levels); new_levels are meaningful only when wait_seconds == 0."""
    levels = [
        min(BUCKET_CAPACITY, level + max(0.0, now - at) * rate)
        for level, at, rate in zip(tokens, refilled_at, rates, strict=True)
    ]
    waits = [(1 - level) / rate for level, rate in zip(levels, rates, strict=True) if level < 1 - TOKEN_EPSILON]
    if waits:
        return max(waits), levels
    return 0.0, [max(0.0, level - 1) for level in levels]


def send_budget_try(*, chat_id: str, app_id: str) -> bool:
    """Take one send from the chat's and the app's budget if both have it now; never waits."""
    return _take(budget_buckets(chat_id=chat_id, app_id=app_id)) == 0


def send_budget_acquire(*, chat_id: str, app_id: str, sleep: Callable[[float], None] | None = None) -> float:
    """Wait until the chat's and the app's budget allow one send, take it; returns the seconds waited."""
    sleep = sleep or time.sleep
    buckets = budget_buckets(chat_id=chat_id, app_id=app_id)
    started, slept = time.monotonic(), False
    while True:
        wait = _take(buckets)
        waited = time.monotonic() - started
        if wait == 0:
            if slept:  # only a send that had to wait is counted
                send_budget_wait_record(waited)
            return waited
        if waited >= MAX_ACQUIRE_WAIT_SECONDS:
            logger.warning("send budget wait exceeded, sending anyway", extra={"chat_id": chat_id, "app_id": app_id})
            send_budget_wait_record(waited)
            return waited
        slept = True
        sleep(min(wait, MAX_ACQUIRE_WAIT_SECONDS - waited))


@dataclass(frozen=True)
class SendBudget:
    """Which send budget a call takes (R4): the chat's and the app's; chat_id "" takes only the app's (a
    CardKit card create, which posts nothing in a chat).

    `first_taken`: the first request's send is already paid for (`send_budget_try` for an intermediate card
    update, which is skipped rather than delayed; a card close that follows the final update on its send);
    a resend after a rate-limit answer still takes its own."""

    chat_id: str
    first_taken: bool = False

    def take(self, *, bot: Bot, sleep: Callable[[float], None], resend: bool) -> None:
        if self.first_taken and not resend:
            return
        send_budget_acquire(chat_id=self.chat_id, app_id=bot.feishu_app_id, sleep=sleep)


def _take(buckets: list[Bucket]) -> float:
    if settings.REDIS_URL:
        return _redis_take(buckets)
    return _database_take(buckets)


_redis_clients: dict[str, Any] = {}
REDIS_TIMEOUT_SECONDS = 2.0  # a hung Redis must not hold a reply longer than this


def _redis_take(buckets: list[Bucket]) -> float:
    import redis  # the redis client is loaded only when a Redis budget is configured

    client = _redis_clients.get(settings.REDIS_URL)
    if client is None:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=REDIS_TIMEOUT_SECONDS, socket_timeout=REDIS_TIMEOUT_SECONDS
        )
        _redis_clients[settings.REDIS_URL] = client
    script = client.register_script(_TAKE_SCRIPT)  # EVALSHA, falling back to EVAL once per server
    try:
        result = script(
            keys=[KEY_PREFIX + bucket.key for bucket in buckets],
            args=[BUCKET_CAPACITY, BUCKET_IDLE_SECONDS, *(bucket.rate for bucket in buckets), TOKEN_EPSILON],
        )
    except redis.RedisError as error:
        # Redis is away (a restart, a failover): the budget cannot be kept, but a reply must not fail for it. Send
        # now; Feishu's own limit answers 429/99991400 if it is hit, and the client backs off on those.
        logger.warning("send budget unavailable, sending without it", extra={"error_type": type(error).__name__})
        return 0.0
    return float(result)


def _database_take(buckets: list[Bucket]) -> float:
    keys = [bucket.key for bucket in buckets]
    for _attempt in range(DB_SWAP_ATTEMPTS):
        try:
            wait = _database_take_once(buckets, keys=keys)
        except OperationalError as error:
            # SQLite answers a concurrent writer with "locked" (at once in shared-cache mode, where the busy
            # timeout does not apply): for a bucket that is the same as losing the swap.
            if "locked" not in str(error):
                raise
            time.sleep(DB_LOCKED_PAUSE_SECONDS)
            continue
        if wait is not None:
            return wait
    return 1.0 / max(bucket.rate for bucket in buckets)  # heavy contention: the caller waits one interval


def _database_take_once(buckets: list[Bucket], *, keys: list[str]) -> float | None:
    """One compare-and-swap round: the wait (0 = taken), or None when another worker spent first.

    The clock is read after the rows, just before the swap: the refill is stamped with the moment the token is
    spent, not with the moment this round began. A read that stalls (a worker's first query opens its
    connection; a busy machine deschedules the thread) would otherwise stamp the token up to a second early,
    and the next worker, refilling from that stamp, would send right behind this one (R4: a sixth inside
    Feishu's second)."""
    rows = _bucket_rows(keys=keys)
    now = time.time()
    wait, levels = bucket_take(
        tokens=[row.tokens for row in rows],
        refilled_at=[row.refilled_at for row in rows],
        rates=[bucket.rate for bucket in buckets],
        now=now,
    )
    if wait > 0:
        return wait
    with transaction.atomic():
        swapped = all(
            SendBudgetBucket.objects.filter(pk=row.pk, version=row.version).update(
                tokens=level, refilled_at=now, version=F("version") + 1
            )
            == 1
            for row, level in zip(rows, levels, strict=True)
        )
        if swapped:
            return 0.0
        transaction.set_rollback(True)  # another worker spent first: read again and retry
    return None


def _bucket_rows(*, keys: list[str]) -> list[SendBudgetBucket]:
    rows = {row.key: row for row in SendBudgetBucket.objects.filter(key__in=keys)}
    for key in keys:
        if key not in rows:
            try:
                with transaction.atomic():
                    rows[key] = SendBudgetBucket.objects.create(
                        key=key, tokens=BUCKET_CAPACITY, refilled_at=time.time()
                    )
            except IntegrityError:  # another worker created it first
                rows[key] = SendBudgetBucket.objects.get(key=key)
    return [rows[key] for key in keys]
