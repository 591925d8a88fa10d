"""The intake's publish, off the request and in batches: a per-process publisher thread (issue 11).

The webhook and the long connection commit their InboundEvent first; then `task_relay` only appends the task to
this process's queue and returns. A daemon thread (started lazily, once per process: after gunicorn's fork, never
in the preloading master) wakes when something is queued, waits COLLECT_SECONDS for the rest of a burst, and
pushes the whole batch to Redis in one pipeline over one connection.

Why not `apply_async` in that thread: Celery and kombu spend 1-1.5 ms of CPU per message (routing, option
merging, protocol-2 assembly, serialisation, a redis-py client per publish), in the same process and on the
same cores as the requests, so moving it to a thread alone saves nothing. Instead each process captures, once
per task, the message Celery's own `apply_async` builds (published to kombu's in-memory transport, nothing leaves
the process), checks that it can rebuild that message exactly from its parts, and then renders each event's
message from it with a fresh task id, its args and a delivery tag: ~0.1 ms per message. What a worker receives is
byte-for-byte the message `apply_async` would have pushed (same queue key, headers, properties, body encoding).

Nothing is lost: the row is durable before the 200. A batch Redis refuses (down, read-only), an event dropped
because the queue is full, or a process that dies before its thread published leaves the row `pending`, and the
beat sweeper (`inbound_events_sweep`, FEISHU_SWEEP_PENDING_AFTER_SECONDS) enqueues it. A normal exit (gunicorn's
graceful stop, max-requests, the end of `feishu_connect`) publishes what is queued first (atexit, bounded).
No event is published twice in the normal path: each handed-over task is pushed at most once.

Inline `task_enqueue` instead (exactly today's path) wherever the shortcut would not be exact: Celery eager (the
test suite), a broker other than Redis (the embedded SQLite broker of `make run`), a call from inside a running
task (Celery would set its parent and root ids), publish signals with receivers, or `task_send_sent_event`.
"""

import atexit
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from celery import signals
from celery.utils import uuid
from celery.utils.saferepr import saferepr
from kombu import Connection
from kombu.utils.json import dumps

from core.tasks_enqueue import broker_error, task_enqueue

if TYPE_CHECKING:
    from kombu.transport.virtual import Channel as VirtualChannel

logger = logging.getLogger(__name__)

# How long the thread waits after the first queued task for the rest of a burst: a bound on the added latency
# (stored -> in the broker), and what makes batches of more than one under load.
COLLECT_SECONDS = 0.002
# Queued and not yet published; beyond it a task is dropped (logged) and its row left to the sweeper, so a hung
# broker can never grow a web process without bound.
MAX_QUEUED = 10_000
# At a normal exit, how long the process waits for its queued tasks to be published.
EXIT_FLUSH_SECONDS = 2.0

_PROBE_TASK_ID = "00000000-0000-4000-8000-000000000000"


@dataclass(frozen=True)
class MessageTemplate:
    """One task's message as Celery builds it, with the per-message parts (id, args, delivery tag) taken out."""

    exchange: str
    routing_key: str
    headers: dict[str, Any]
    properties: dict[str, Any]
    content_type: str
    content_encoding: str
    embed: dict[str, Any]  # the third element of protocol 2's body: callbacks, errbacks, chain, chord
    argsrepr_maxsize: int
    argsrepr_maxlevels: int


def message_render(
    template: MessageTemplate, *, args: list, task_id: str, reply_to: str, delivery_tag: str, encode_body
) -> dict[str, Any]:
    """The message for `args` as kombu's virtual channel hands it to the Redis transport (pure).

    `reply_to` is the calling thread's Celery oid (`app.thread_oid`, what apply_async puts there);
    `encode_body(text) -> (body, body_encoding)` is the channel's own body encoding (base64 by default).
    """
    body, body_encoding = encode_body(dumps((args, {}, template.embed)))
    headers = {
        **template.headers,
        "id": task_id,
        "root_id": task_id,  # no parent: relayed calls are never made from inside a task
        # As Celery's as_task_v2: no args at all are shown as "()" (it turns a falsy args into a tuple).
        "argsrepr": saferepr(args or (), template.argsrepr_maxsize, maxlevels=template.argsrepr_maxlevels),
    }
    properties = {
        **template.properties,
        "correlation_id": task_id,
        "reply_to": reply_to,
        "body_encoding": body_encoding,
        "delivery_tag": delivery_tag,
    }
    return {
        "body": body,
        "content-encoding": template.content_encoding,
        "content-type": template.content_type,
        "headers": headers,
        "properties": properties,
    }


def message_template_capture(task: Any, *, args: list) -> MessageTemplate | None:
    """Capture the message `task.apply_async(args)` builds in this process and thread; None when it cannot be rebuilt.

    `args`: a real call's (Celery checks them against the task's signature); only their place in the message is
    kept.

    Published through Celery's own code to kombu's in-memory transport, whose `_put` is replaced on this one
    channel so the message stays here. The template is only used when rendering the probe's own id and args from
    it gives back exactly the captured message.
    """
    captured: list[tuple[str, dict]] = []
    with Connection("memory://") as memory:
        channel = cast("VirtualChannel", memory.default_channel)  # memory:// is one of kombu's virtual transports
        # Replaced on this one channel object on purpose (the type checker flags any assignment to a method).
        channel._put = lambda queue, message, **_: captured.append((queue, message))  # type: ignore[method-assign]
        task.apply_async(args=args, task_id=_PROBE_TASK_ID, producer=memory.Producer(channel), retry=False)
        if len(captured) != 1:
            return None
        _, message = captured[0]
        properties = dict(message["properties"])
        delivery_info = properties["delivery_info"]
        app = task.app
        template = MessageTemplate(
            exchange=delivery_info["exchange"],
            routing_key=delivery_info["routing_key"],
            headers=dict(message["headers"]),
            properties=properties,
            content_type=message["content-type"],
            content_encoding=message["content-encoding"],
            embed=_decoded_body(channel, message)[2],
            argsrepr_maxsize=app.amqp.argsrepr_maxsize,
            argsrepr_maxlevels=app.conf.task_repr_maxlevels,
        )
        rendered = message_render(
            template,
            args=args,
            task_id=_PROBE_TASK_ID,
            reply_to=app.thread_oid,
            delivery_tag=properties["delivery_tag"],
            encode_body=lambda text: channel.encode_body(text, channel.body_encoding),
        )
    return template if rendered == message else None


def _decoded_body(channel, message: dict) -> list:
    return json.loads(channel.decode_body(message["body"], message["properties"]["body_encoding"]))


def relay_applies(task: Any) -> bool:
    """Whether `task` may be published by the relay here (else inline `task_enqueue`, today's exact path).

    Read on every call (the test suite flips eagerness per test; each read of Celery's settings costs ~25 us);
    only what kind of broker a URL is, is remembered.
    """
    app = task.app
    if app.conf.task_always_eager or app.current_worker_task is not None:
        return False
    if signals.before_task_publish.receivers or signals.after_task_publish.receivers:
        return False
    conf = app.conf
    key = (conf.broker_url, conf.broker_transport)
    redis_broker = _redis_brokers.get(key)
    if redis_broker is None:
        redis_broker = _redis_brokers[key] = Connection(key[0], transport=key[1]).transport.driver_type == "redis"
    return redis_broker and not conf.task_send_sent_event


# (broker URL, transport) -> whether kombu drives it as Redis (a Connection is only built once per broker).
_redis_brokers: dict[tuple[str, str | None], bool] = {}


def task_relay(*, task: Any, args: list, what: str) -> None:
    """Publish `task(*args)` soon, off the caller's thread; its row must be committed and swept if never run."""
    if not relay_applies(task):
        task_enqueue(task=task, args=args, what=what)
        return
    _publisher().submit(task=task, args=args, what=what)


_current: "_Publisher | None" = None
_current_lock = threading.Lock()


def _publisher() -> "_Publisher":
    global _current
    publisher = _current
    if publisher is None or publisher.pid != os.getpid():
        with _current_lock:
            if _current is None or _current.pid != os.getpid():
                _current = _Publisher()
            publisher = _current
    return publisher


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads: it starts its own publisher (and lock) when it needs one."""
    global _current, _current_lock
    _current, _current_lock = None, threading.Lock()


def _flush_at_exit() -> None:
    if not relay_flush(timeout=EXIT_FLUSH_SECONDS):
        logger.warning("task relay: exiting with tasks unpublished; the sweeper will pick them up")


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(_flush_at_exit)


def relay_flush(*, timeout: float) -> bool:
    """Wait until everything handed to this process's relay so far was published (or given up); False on timeout."""
    publisher = _current
    return True if publisher is None or publisher.pid != os.getpid() else publisher.flush(timeout=timeout)


class _Publisher:
    """This process's queue and the one thread that publishes it (never shared across a fork)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._condition = threading.Condition()
        self._queued: list[tuple[Any, list, str, str]] = []  # task, args, what, the caller's reply_to
        self._submitted = 0
        self._finished = 0  # published, or given up to the sweeper
        self._templates: dict[str, MessageTemplate | None] = {}
        self._app: Any = None
        self._connection: Connection | None = None
        self._kombu_channel = None
        self._client: Any = None  # a redis-py client from kombu's private `_create_client` (untyped in its stubs)
        self._thread = threading.Thread(target=self._run, name="amux-task-relay", daemon=True)
        self._thread.start()

    def submit(self, *, task: Any, args: list, what: str) -> None:
        with self._condition:
            if len(self._queued) >= MAX_QUEUED:
                dropped = True
            else:
                dropped = False
                self._app = self._app or task.app
                self._queued.append((task, args, what, task.app.thread_oid))
                self._submitted += 1
                if len(self._queued) == 1:
                    self._condition.notify_all()
        if dropped:
            logger.warning(
                "task not relayed (relay queue full); the sweeper will pick it up",
                extra={"what": what, "task_args": [arg for arg in args if isinstance(arg, int)]},
            )

    def flush(self, *, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._condition:
            target = self._submitted
            while self._finished < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._condition.wait(remaining)
        return True

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._queued:
                    self._condition.wait()
            time.sleep(COLLECT_SECONDS)
            with self._condition:
                batch, self._queued = self._queued, []
            try:
                self._publish(batch)
            except Exception:  # a bug, not the broker: logged, and the rows wait for the sweeper
                logger.exception("task relay failed; the sweeper will pick the tasks up", extra={"count": len(batch)})
            with self._condition:
                self._finished += len(batch)
                self._condition.notify_all()

    def _publish(self, batch: list[tuple[Any, list, str, str]]) -> None:
        try:
            self._pipeline_push(batch)
        except Exception as error:
            if not broker_error(error):
                raise
            self._connection_reset()
            logger.warning(
                "tasks not relayed (broker unavailable); the sweeper will pick them up",
                extra={
                    "count": len(batch),
                    "what": sorted({item[2] for item in batch}),
                    "task_args": [arg for item in batch[:20] for arg in item[1] if isinstance(arg, int)],
                    "error": type(error).__name__,
                },
            )

    def _pipeline_push(self, batch: list[tuple[Any, list, str, str]]) -> None:
        """Render every message of the batch and push them all in one round trip (kombu's `_put`, batched)."""
        rendered: list[tuple[str, str]] = []
        for task, args, what, reply_to in batch:
            template = self._template(task, args=args)
            if template is None:  # Celery builds a message the relay cannot rebuild: its own path, from here
                task_enqueue(task=task, args=args, what=what)
                continue
            channel = self._channel()
            message = message_render(
                template,
                args=args,
                task_id=uuid(),
                reply_to=reply_to,
                delivery_tag=channel._next_delivery_tag(),
                encode_body=lambda text, channel=channel: channel.encode_body(text, channel.body_encoding),
            )
            priority = channel._get_message_priority(message, reverse=False)
            payload = dumps(message)
            for queue in channel._lookup(template.exchange, template.routing_key):
                rendered.append((channel._q_for_pri(queue, priority), payload))
        if rendered:
            pipeline = self._client.pipeline(transaction=False)
            for key, payload in rendered:
                pipeline.lpush(key, payload)
            pipeline.execute()

    def _template(self, task: Any, *, args: list) -> MessageTemplate | None:
        if task.name not in self._templates:
            template = message_template_capture(task, args=args)
            if template is None:
                logger.warning(
                    "task relay cannot rebuild this task's message; publishing it with apply_async",
                    extra={"task": task.name},
                )
            else:
                self._declare(task, template)
            self._templates[task.name] = template
        return self._templates[task.name]

    def _channel(self):
        """This thread's kombu Redis channel (its pool, key prefix, priorities) and one client on it, made lazily.

        `channel()`, not `default_channel`: the latter retries a refused connection for ~6 s before it gives up.
        """
        if self._kombu_channel is None:
            connection = self._app.connection_for_write()
            try:
                channel = connection.channel()
            except Exception:
                connection.release()
                raise
            self._connection, self._kombu_channel, self._client = connection, channel, channel._create_client()
        return self._kombu_channel

    def _declare(self, task: Any, template: MessageTemplate) -> None:
        """Declare the task's queue as Celery's producer does before its first publish (binding included)."""
        queue = task.app.amqp.queues.get(template.routing_key)
        if queue is not None:
            queue(self._channel()).declare()

    def _connection_reset(self) -> None:
        connection, self._connection, self._kombu_channel, self._client = self._connection, None, None, None
        if connection is not None:
            try:
                connection.release()
            except Exception:  # noqa: BLE001 - already broken; a new one is made for the next batch
                pass
