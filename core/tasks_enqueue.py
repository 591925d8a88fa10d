"""The one way a service hands a task to the broker (a leaf module: every app's services may import it).

A broker outage is logged, not raised: the row the task works on is stored first, and a sweeper retries.
"""

import logging
from typing import Any

from kombu.exceptions import OperationalError as KombuOperationalError

logger = logging.getLogger(__name__)


def task_enqueue(*, task: Any, args: list, what: str, eta=None) -> bool:
    """Queue `task(*args)`; False (logged with ids only) when the broker cannot take it."""
    try:
        # retry=False: with Redis down, fail at once instead of holding a webhook's answer.
        if eta is None:
            task.apply_async(args=args, retry=False)
        else:
            task.apply_async(args=args, eta=eta, retry=False)
    except Exception as error:
        if not broker_error(error):
            raise
        logger.warning(
            "task not enqueued (broker unavailable); the sweeper will pick it up",
            extra={
                "what": what,
                "task_args": [arg for arg in args if isinstance(arg, int)],
                "error": type(error).__name__,
            },
        )
        return False
    return True


def broker_error(error: Exception) -> bool:
    """Whether `error` says the broker could not take a message (kombu's, the socket's or the Redis client's)."""
    if isinstance(error, (KombuOperationalError, OSError)):
        return True
    # Lazy: `redis.exceptions` runs redis/__init__, which imports redis.asyncio (~0.15 s of CPU) in every process
    # that merely imports a service. A RedisError can only come from a Redis client kombu has already built, so
    # the module is loaded by the time this runs.
    from redis.exceptions import RedisError

    return isinstance(error, RedisError)
