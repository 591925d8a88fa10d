"""Writing one thread event (and its context item) exactly once: the collector's storage step (issue 11).

Every write is idempotent on the (bridge_id, message_id, event_type) unique constraint: an INSERT ... ON CONFLICT
DO NOTHING, the row read only when it was there already, so a redelivered Feishu event or a re-run task never
records twice. An item is written only with a new event (in the same statement on PostgreSQL, the same
transaction on SQLite), so no event has two items and no item exists without its event.
"""

from __future__ import annotations

from django.db import connection, transaction

from core.columns import column_name
from threadcontext.models import ThreadContextItem, ThreadEvent


def token_estimate(text: str) -> int:
    # No tokenizer (the seed budgets in characters); a rough 4-chars-per-token figure for the item row.
    return (len(text) + 3) // 4


def _insert_columns(instance: ThreadEvent | ThreadContextItem) -> tuple[list[str], list]:
    """(quoted columns, database values) of an unsaved row, as Model.save() would insert them (auto_now_add too)."""
    fields = [field for field in instance._meta.concrete_fields if not field.primary_key]
    quote = connection.ops.quote_name
    return (
        [quote(column_name(field)) for field in fields],
        [field.get_db_prep_save(field.pre_save(instance, add=True), connection) for field in fields],
    )


def _event_insert_unless_recorded(*, event: ThreadEvent, item: ThreadContextItem | None) -> ThreadEvent | None:
    """INSERT the event unless (bridge_id, message_id, event_type) is recorded already: the stored row, or None.

    ON CONFLICT DO NOTHING instead of an INSERT that fails: no savepoint to roll back to (issue 11: two round
    trips fewer per message on PostgreSQL). On PostgreSQL the item rides in the same statement (a data-modifying
    CTE inserts it from the new event's row, so it exists exactly when the event was new); SQLite has no DML in
    a CTE, and the caller inserts it next, in the same transaction.
    """
    quote = connection.ops.quote_name
    event_table = quote(ThreadEvent._meta.db_table)
    columns, params = _insert_columns(event)
    conflict = "ON CONFLICT (bridge_id, message_id, event_type) DO NOTHING"
    returning = ", ".join(quote(column_name(field)) for field in ThreadEvent._meta.concrete_fields)
    insert = f"INSERT INTO {event_table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) {conflict}"
    if item is None or connection.vendor != "postgresql":
        rows = list(ThreadEvent.objects.raw(f"{insert} RETURNING {returning}", params))
        return rows[0] if rows else None
    item.event_id = 0  # a placeholder: the statement takes the id from the new event's row
    item_columns, item_params = _insert_columns(item)
    event_id_column = quote("event_id")
    index = item_columns.index(event_id_column)
    del item_params[index]
    values = [("new_event.id" if column == event_id_column else "%s") for column in item_columns]
    sql = (
        f"WITH new_event AS ({insert} RETURNING {returning}),"
        f" new_item AS (INSERT INTO {quote(ThreadContextItem._meta.db_table)} ({', '.join(item_columns)})"
        f" SELECT {', '.join(values)} FROM new_event)"
        f" SELECT {returning} FROM new_event"
    )
    rows = list(ThreadEvent.objects.raw(sql, params + item_params))
    return rows[0] if rows else None


def thread_event_insert_once(
    *,
    bridge_id: str,
    message_id: str,
    event_type: str,
    defaults: dict,
    item: dict | None,
) -> tuple[ThreadEvent, bool]:
    """Insert on the unique (bridge_id, message_id, event_type), read the row only when it exists already; the item
    is written with a new event only.

    Insert first (issue 11): a new message, the common case, costs one statement on PostgreSQL (the event and its
    item together) and two on SQLite, where get_or_create read first and a duplicate needed a savepoint.
    """
    event = ThreadEvent(bridge_id=bridge_id, message_id=message_id, event_type=event_type, **defaults)
    new_item = None
    if item is not None:
        new_item = ThreadContextItem(
            chat_id=event.chat_id,
            root_msg_id=event.root_msg_id,
            bridge_id=event.bridge_id,
            message_id=event.message_id,
            token_estimate=token_estimate(item["text"]),
            **item,
        )
    if connection.vendor == "postgresql":  # one statement: atomic without a transaction of its own
        stored = _event_insert_unless_recorded(event=event, item=new_item)
    else:
        # No savepoint inside the caller's transaction (two statements fewer; issue 28): nothing here is caught and
        # rolled back on its own, an error ends the caller's transaction as well.
        with transaction.atomic(savepoint=False):
            stored = _event_insert_unless_recorded(event=event, item=new_item)
            if stored is not None and new_item is not None:
                new_item.event = stored
                new_item.save(force_insert=True)
    if stored is None:
        return ThreadEvent.objects.get(bridge_id=bridge_id, message_id=message_id, event_type=event_type), False
    return stored, True
