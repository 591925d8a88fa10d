"""INSERT ... ON CONFLICT DO NOTHING RETURNING for one row: idempotent creation without a savepoint (issue 28).

`Model.objects.create` inside a transaction needs a savepoint around it to survive the unique constraint's
IntegrityError (SAVEPOINT, INSERT, RELEASE: three statements); an insert that skips a conflicting row and returns
the new row's id does the same in one. PostgreSQL and SQLite >= 3.35 both support it.
"""

from django.db import connection
from django.db.models import Model

from core.columns import column_name


def insert_unless_exists(*, instance: Model, conflict_fields: tuple[str, ...]) -> bool:
    """INSERT `instance` (unsaved) unless a row with the same `conflict_fields` (a unique constraint's) exists.

    True when inserted (the instance then has its pk and is saved, as after `save()`); False on a conflict, with
    nothing written. Values go through each field's pre_save (auto_now_add) and adapter, as `save()` sends them.
    No post_save signal is sent (nothing in the hub listens for the models this is used for)."""
    meta = instance._meta
    quote = connection.ops.quote_name
    fields = [field for field in meta.concrete_fields if not field.primary_key]
    columns = ", ".join(quote(column_name(field)) for field in fields)
    params = [field.get_db_prep_save(field.pre_save(instance, add=True), connection) for field in fields]
    conflict = ", ".join(quote(column_name(meta.get_field(name))) for name in conflict_fields)  # type: ignore[arg-type]
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"
        f" ON CONFLICT ({conflict}) DO NOTHING RETURNING {quote(column_name(meta.pk))}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return False
    instance.pk = row[0]
    instance._state.adding = False
    instance._state.db = connection.alias
    return True
