"""/history pagination cost: our keyset cursor versus DRF's LimitOffsetPagination, first page vs a deep page.

One chat thread holds 1,000,000 messages on PostgreSQL (bulk-inserted with one INSERT ... SELECT
generate_series into its own database `amux_bench_history`, kept between runs and reused when complete), or
100,000 on SQLite (a temporary file, removed afterwards). Both pagers run through a real DRF view
(RequestFactory on the view class): ours is agents.apis.threads.ThreadHistoryApi; the offset one is a
ListAPIView over the same selector query and serializer. The deep page starts 90% of the way down the thread.
Target (V5): deep/first <= 1.5 for ours.
"""

import os
import statistics
import tempfile
import time
from pathlib import Path

import django

POSTGRES_DATABASE = "amux_bench_history"
POSTGRES_MESSAGES = 1_000_000
SQLITE_MESSAGES = 100_000
PAGE_SIZE = 50
REPEATS = 7
TARGET_RATIO = 1.5


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "amuxweb.settings.test")
    django.setup()


def _use_own_database() -> tuple[str, int, dict, object]:
    """Point the default connection at the bench's own database; returns (vendor, size, old settings, cleanup)."""
    from django.db import connection

    original = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "postgresql":
        import psycopg

        admin_url = f"postgresql://{original['USER']}@{original['HOST'] or '127.0.0.1'}:{original['PORT'] or 5432}"
        with psycopg.connect(f"{admin_url}/postgres", autocommit=True) as admin:
            exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [POSTGRES_DATABASE]).fetchone()
            if not exists:
                admin.execute(f'CREATE DATABASE "{POSTGRES_DATABASE}"')
        connection.settings_dict["NAME"] = POSTGRES_DATABASE
        return "postgresql", POSTGRES_MESSAGES, original, None
    path = Path(tempfile.mkdtemp(prefix="bench_history_")) / "bench.sqlite3"
    connection.settings_dict["NAME"] = str(path)
    return "sqlite", SQLITE_MESSAGES, original, path


def _restore_database(original: dict, sqlite_path: Path | None) -> None:
    from django.db import connection

    connection.close()
    connection.settings_dict.clear()
    connection.settings_dict.update(original)
    if sqlite_path is not None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{sqlite_path}{suffix}").unlink(missing_ok=True)
        sqlite_path.parent.rmdir()


def _prepare_thread(*, vendor: str, size: int):
    """The bench thread with `size` chat messages (mask 3, as the matrix gives), created once."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection, transaction

    from agents.models import Bot, LLMModel, Message, Provider, Thread
    from agents.services.threads import thread_create

    call_command("migrate", verbosity=0, interactive=False)
    thread = Thread.objects.filter(title="bench history").first()
    if thread is not None and Message.objects.filter(thread=thread).count() == size:
        return thread
    Message.objects.all().delete()
    Thread.objects.all().delete()
    provider, _ = Provider.objects.get_or_create(name="bench-local", defaults={"kind": Provider.Kind.LOCAL_RULES})
    model, _ = LLMModel.objects.get_or_create(provider=provider, name="local-echo")
    owner, _ = get_user_model().objects.get_or_create(username="bench-owner")
    bot, _ = Bot.objects.get_or_create(
        slug="bench-history", defaults={"name": "Bench", "owner": owner, "primary_model": model}
    )
    thread = thread_create(bot=bot, runtime_mode="chat", channel="rest", title="bench history")
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute(
                """
                INSERT INTO agents_message
                    (thread_id, kind, visibility_mask, content, prompt, author, external_message_id, usage, created_at)
                SELECT %s, CASE WHEN g %% 2 = 1 THEN 'user_message' ELSE 'agent_reply' END, 3,
                       'bench message ' || g, '', '', '', '{}'::jsonb, now()
                FROM generate_series(1, %s) AS g
                """,
                [thread.pk, size],
            )
        else:
            cursor.execute(
                """
                WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < %s)
                INSERT INTO agents_message
                    (thread_id, kind, visibility_mask, content, prompt, author, external_message_id, usage, created_at)
                SELECT %s, CASE WHEN n %% 2 = 1 THEN 'user_message' ELSE 'agent_reply' END, 3,
                       'bench message ' || n, '', '', '', '{}', datetime('now')
                FROM g
                """,
                [size, thread.pk],
            )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"inserted {size:,} messages in {time.perf_counter() - started:.1f}s")
    return thread


def _offset_view():
    from rest_framework.generics import ListAPIView
    from rest_framework.pagination import LimitOffsetPagination

    from agents.apis.threads import MessageOutputSerializer
    from agents.selectors import _messages_with_bit, thread_get
    from agents.visibility import UI_HISTORY

    class OffsetPagination(LimitOffsetPagination):
        default_limit = PAGE_SIZE
        max_limit = 200

    class OffsetHistoryApi(ListAPIView):
        """The same query and serializer as /history, paged the way DRF does by default (COUNT + OFFSET)."""

        serializer_class = MessageOutputSerializer
        pagination_class = OffsetPagination

        def get_queryset(self):
            thread = thread_get(user=self.request.user, thread_id=self.kwargs["thread_id"])
            return _messages_with_bit(thread=thread, bit=UI_HISTORY).order_by("-id")

    return OffsetHistoryApi.as_view()


def _time_ms(view, request_factory, user, *, path: str, thread_id: int, expected_ids: list[int]) -> float:
    from rest_framework.test import force_authenticate

    samples = []
    for attempt in range(REPEATS + 1):
        request = request_factory.get(path)
        force_authenticate(request, user=user)
        started = time.perf_counter()
        response = view(request, thread_id=thread_id)
        response.render()
        elapsed = (time.perf_counter() - started) * 1000
        assert response.status_code == 200, response.content[:200]
        assert [row["id"] for row in response.data["results"]] == expected_ids
        if attempt:  # the first request only warms caches
            samples.append(elapsed)
    return statistics.median(samples)


def run() -> None:
    _setup()
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIRequestFactory

    from agents.apis.threads import ThreadHistoryApi
    from agents.models import Message
    from agents.selectors import history_cursor_encode

    vendor, size, original, sqlite_path = _use_own_database()
    try:
        thread = _prepare_thread(vendor=vendor, size=size)
        staff, _ = get_user_model().objects.get_or_create(username="bench-staff", defaults={"is_staff": True})
        newest = Message.objects.filter(thread=thread).order_by("-id").values_list("id", flat=True).first()
        deep_offset = size * 9 // 10
        first_ids = list(range(newest, newest - PAGE_SIZE, -1))
        deep_ids = list(range(newest - deep_offset, newest - deep_offset - PAGE_SIZE, -1))
        factory = APIRequestFactory(SERVER_NAME="localhost")
        base = f"/api/v1/threads/{thread.pk}/history/"
        keyset_view, offset_view = ThreadHistoryApi.as_view(), _offset_view()
        cursor = history_cursor_encode(before_id=newest - deep_offset + 1)

        def timed(view, path: str, expected: list[int]) -> float:
            return _time_ms(view, factory, staff, path=path, thread_id=thread.pk, expected_ids=expected)

        results = [
            (
                "keyset cursor (ours)",
                timed(keyset_view, f"{base}?page_size={PAGE_SIZE}", first_ids),
                timed(keyset_view, f"{base}?page_size={PAGE_SIZE}&cursor={cursor}", deep_ids),
            ),
            (
                "DRF LimitOffset",
                timed(offset_view, f"{base}?limit={PAGE_SIZE}", first_ids),
                timed(offset_view, f"{base}?limit={PAGE_SIZE}&offset={deep_offset}", deep_ids),
            ),
        ]
    finally:
        _restore_database(original, sqlite_path)

    print(f"database: {vendor}, one chat thread of {size:,} messages, page size {PAGE_SIZE}, median of {REPEATS}")
    if vendor != "postgresql":
        print("(SQLite: 100,000 messages; the issue's 1,000,000-message target is measured on PostgreSQL)")
    print(f"deep page = the page starting at message {deep_offset:,} from the newest")
    print(f"{'pager':<22} {'first ms':>10} {'deep ms':>10} {'deep/first':>11}")
    for name, first_ms, deep_ms in results:
        print(f"{name:<22} {first_ms:>10.2f} {deep_ms:>10.2f} {deep_ms / first_ms:>11.2f}")
    ours = results[0][2] / results[0][1]
    print(f"target deep/first <= {TARGET_RATIO} for ours: {'met' if ours <= TARGET_RATIO else 'NOT met'} ({ours:.2f})")
