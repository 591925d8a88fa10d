"""What /metrics reports, computed from the database at scrape time (A10).

The database is the truth every process shares: a count read from it is the same whichever web process answers
the scrape, with no per-process state to lose on a restart. Windows are the last 24 hours (indexed time columns),
so a scrape costs a few grouped queries whatever the history. Only the send budget's waits leave no row; they
come from core.metrics' per-process counters, summed by prometheus-client's multi-process collector.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.db.models import Count
from kombu.exceptions import ChannelError
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agents.models import Bot, Turn
from console.dashboard.latency import turn_latencies
from feishu.models import FeishuConnection, InboundEvent, OutboundDelivery, WebhookRefusal
from probe.models import ProbeJudgement

logger = logging.getLogger(__name__)

WINDOW = timedelta(hours=24)
OPEN_INBOUND = (InboundEvent.Status.PENDING, InboundEvent.Status.PROCESSING)


def queue_depths() -> dict[str, int | None]:
    """Messages waiting in each Celery queue, asked of the broker (Redis or the embedded SQLite broker alike,
    through kombu's passive declare); None for every queue when the broker could not be reached."""
    depths: dict[str, int | None] = {}
    try:
        with current_app.connection_for_read() as connection:
            channel = connection.default_channel
            for queue in settings.CELERY_TASK_QUEUES:
                try:
                    declared = channel.queue_declare(queue=queue, passive=True)  # type: ignore[attr-defined]
                    depths[queue] = declared.message_count
                except ChannelError:  # never declared, or (Redis) its list is empty and so does not exist
                    depths[queue] = 0
    except Exception as error:  # a broker that is down must not take the whole scrape with it
        logger.warning("queue depth unavailable", extra={"error_type": type(error).__name__})
        return dict.fromkeys(settings.CELERY_TASK_QUEUES)
    return depths


class DatabaseCollector(Collector):
    """Every series read from the database, labelled by the bot's slug (the playground's stand-ins left out)."""

    def __init__(self, *, now: datetime) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        slugs = dict(Bot.objects.filter(is_sandbox=False).values_list("pk", "slug"))
        since = self.now - WINDOW
        yield from self._turns(slugs, since)
        yield self._grouped(
            "amux_gate_outcomes_24h",
            "Discuss-gate judgements of the last 24 hours, by outcome.",
            ProbeJudgement.objects.filter(created_at__gte=since),
            "outcome",
            slugs,
        )
        yield self._grouped(
            "amux_inbound_events_open",
            "Inbound Feishu events stored and not processed yet (pending or processing).",
            InboundEvent.objects.filter(status__in=OPEN_INBOUND),
            "status",
            slugs,
        )
        yield self._grouped(
            "amux_deliveries_24h",
            "Outbound deliveries created in the last 24 hours, by status (failed = Feishu refused every attempt).",
            OutboundDelivery.objects.filter(created_at__gte=since),
            "status",
            slugs,
        )
        yield from self._connections(slugs)
        yield self._refusals(slugs)
        yield self._queues()

    def _refusals(self, slugs: dict[int, str]) -> CounterMetricFamily:
        """D3: refused webhook requests since the hub began counting, per bot and reason (a bounded table: one row
        per bot and reason; requests to slugs that name no bot are one `bot=""` series per reason)."""
        family = CounterMetricFamily(
            "amux_webhook_refused",
            "Webhook requests refused (bad signature, stale, wrong token, undecryptable, malformed, unknown bot).",
            labels=["bot", "reason"],
        )
        for bot_id, reason, count in WebhookRefusal.objects.values_list("bot_id", "reason", "count").order_by("pk"):
            if bot_id is None or bot_id in slugs:
                family.add_metric([slugs.get(bot_id, "") if bot_id else "", reason], count)
        return family

    def _grouped(self, name: str, documentation: str, rows, label: str, slugs: dict[int, str]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, documentation, labels=["bot", label])
        for row in rows.values("bot_id", label).annotate(n=Count("pk")).order_by("bot_id", label):
            if row["bot_id"] in slugs:
                family.add_metric([slugs[row["bot_id"]], row[label]], row["n"])
        return family

    def _turns(self, slugs: dict[int, str], since: datetime) -> Iterator[Metric]:
        yield self._grouped(
            "amux_turns_24h",
            "Turns queued in the last 24 hours, by their status now.",
            Turn.objects.filter(queued_at__gte=since),
            "status",
            slugs,
        )
        latency = GaugeMetricFamily(
            "amux_turn_latency_seconds",
            "Turn latency (started to finished) over the last 24 hours, nearest-rank quantiles.",
            labels=["bot", "quantile"],
        )
        for bot_id, (p50, p95) in sorted(turn_latencies(since=since).items()):
            if bot_id not in slugs:
                continue
            for quantile, value in (("0.5", p50), ("0.95", p95)):
                if value is not None:
                    latency.add_metric([slugs[bot_id], quantile], value / 1000)
        yield latency

    def _connections(self, slugs: dict[int, str]) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            "amux_feishu_connection_state",
            "The long connection's state as its process last wrote it: 1 for the current state.",
            labels=["bot", "state"],
        )
        reconnects = GaugeMetricFamily(
            "amux_feishu_connection_reconnects",
            "Reconnections of the long connection since its process started.",
            labels=["bot"],
        )
        for connection in FeishuConnection.objects.order_by("bot_id"):
            if connection.bot_id not in slugs:
                continue
            for value in FeishuConnection.State.values:
                state.add_metric([slugs[connection.bot_id], value], 1 if connection.state == value else 0)
            reconnects.add_metric([slugs[connection.bot_id]], connection.reconnects)
        yield state
        yield reconnects

    def _queues(self) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "amux_queue_depth", "Tasks waiting in each Celery queue (asked of the broker).", labels=["queue"]
        )
        for queue, depth in queue_depths().items():
            if depth is not None:
                family.add_metric([queue], depth)
        return family
