"""Statements the ORM cannot write, for the per-message hot paths (issue 28): each does in one round trip what
took two to four.

- `insert_unless_exists`: `Model.objects.create` inside a transaction needs a savepoint around it to survive the
  unique constraint's IntegrityError (SAVEPOINT, INSERT, RELEASE: three statements); an insert that skips a
  conflicting row and returns the new row's id does the same in one.
- `insert_with_update`: a row inserted and the row that points at it updated (a data-modifying CTE, PostgreSQL).
- `insert_or_refresh`: an upsert that refreshes one column.
- `update_returning`: an UPDATE that also reads one value (a subquery in RETURNING).
- `update_carrying`: an UPDATE that carries another table's UPDATE (a data-modifying CTE, PostgreSQL).
- `JSONKeysReplaced`: a JSON column with some keys replaced inside the UPDATE (no read, no lock first).
PostgreSQL and SQLite >= 3.35 support all but the CTE (SQLite falls back to two statements there).
"""

import json
from typing import cast

from django.db import NotSupportedError, connection, models
from django.db.models import F, Func, Model, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.sql import UpdateQuery

from core.columns import column_name, concrete_field


def _insert_statement(instance: Model) -> tuple[str, list]:
    """The INSERT `instance.save(force_insert=True)` would run, without RETURNING, as (sql, params): every concrete
    field but the pk, each value through its field's pre_save (auto_now_add) and adapter, as `save()` sends it."""
    meta = instance._meta
    quote = connection.ops.quote_name
    fields = [field for field in meta.concrete_fields if not field.primary_key]
    columns = ", ".join(quote(column_name(field)) for field in fields)
    params = [field.get_db_prep_save(field.pre_save(instance, add=True), connection) for field in fields]
    return f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})", params


def _saved(instance: Model, pk) -> None:
    """Mark `instance` as the row `pk` the database just inserted, as `save()` would."""
    instance.pk = pk
    instance._state.adding = False
    instance._state.db = connection.alias


def _conflict_columns(model: type[Model], names: tuple[str, ...]) -> str:
    return ", ".join(connection.ops.quote_name(column_name(concrete_field(model, name))) for name in names)


def _execute_carrying(cursor, *, sql: str, params: list, carried_write: tuple[str, list] | None) -> None:
    """Run `sql` with `carried_write` (another table's UPDATE, as (sql, params)) in the same statement on PostgreSQL,
    a data-modifying CTE, which runs exactly once whatever the main statement matches; SQLite has no DML in a WITH
    clause: there it runs just before, in the caller's transaction."""
    carried_sql, carried_params = carried_write or ("", [])
    if carried_sql and connection.vendor != "postgresql":
        cursor.execute(carried_sql, carried_params)
        carried_sql, carried_params = "", []
    if carried_sql:
        cursor.execute(f"WITH carried_write AS ({carried_sql}) {sql}", [*carried_params, *params])
    else:
        cursor.execute(sql, params)


def insert_unless_exists(*, instance: Model, conflict_fields: tuple[str, ...]) -> bool:
    """INSERT `instance` (unsaved) unless a row with the same `conflict_fields` (a unique constraint's) exists.

    True when inserted (the instance then has its pk and is saved, as after `save()`); False on a conflict, with
    nothing written. Values go through each field's pre_save (auto_now_add) and adapter, as `save()` sends them.
    No post_save signal is sent (nothing in the hub listens for the models this is used for)."""
    insert, params = _insert_statement(instance)
    conflict = _conflict_columns(type(instance), conflict_fields)
    pk_column = connection.ops.quote_name(column_name(instance._meta.pk))
    with connection.cursor() as cursor:
        cursor.execute(f"{insert} ON CONFLICT ({conflict}) DO NOTHING RETURNING {pk_column}", params)
        row = cursor.fetchone()
    if row is None:
        return False
    _saved(instance, row[0])
    return True


def insert_with_update(*, instance: Model, queryset: QuerySet, values: dict, reference: str) -> int:
    """INSERT `instance` (unsaved) and UPDATE `queryset` with `values` plus `reference` (a foreign key of the
    updated model) pointing at the new row; the number of rows updated. Call it inside a transaction: when the
    update matches nothing, the insert has happened all the same and the caller rolls it back.

    On PostgreSQL one statement, the insert a data-modifying CTE of the conditional UPDATE (issue 28: one round trip
    fewer for a turn's user_message and for its reply); SQLite has no DML in a WITH clause: two statements."""
    if connection.vendor != "postgresql":
        instance.save(force_insert=True)
        return queryset.update(**values, **{reference: instance})
    quote = connection.ops.quote_name
    insert, params = _insert_statement(instance)
    pk_column = quote(column_name(instance._meta.pk))
    update_sql, update_params = update_statement(
        queryset=queryset, values={**values, reference: RawSQL(f"SELECT {pk_column} FROM new_row", [])}
    )
    reference_column = quote(column_name(concrete_field(queryset.model, reference)))
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH new_row AS ({insert} RETURNING {pk_column}) {update_sql} RETURNING {reference_column}",
            [*params, *update_params],
        )
        rows = cursor.fetchall()
    if rows:
        _saved(instance, rows[0][0])
    return len(rows)


def insert_or_refresh(
    *, instance: Model, conflict_fields: tuple[str, ...], refreshed: str, carried_write: tuple[str, list] | None = None
) -> None:
    """INSERT `instance` (unsaved); when a row with the same `conflict_fields` exists, only its `refreshed` column
    takes the new value, and only when that value is not empty and differs. One statement either way (an upsert:
    PostgreSQL, SQLite >= 3.24), where reading the row first, then inserting it in a savepoint or updating it, took
    two to four (issue 28). The instance gets no pk (the callers need none). `carried_write`: another table's
    UPDATE in the same statement on PostgreSQL (see `update_carrying`), just before it on SQLite."""
    insert, params = _insert_statement(instance)
    table = connection.ops.quote_name(instance._meta.db_table)
    conflict = _conflict_columns(type(instance), conflict_fields)
    column = connection.ops.quote_name(column_name(concrete_field(type(instance), refreshed)))
    upsert = (
        f"{insert} ON CONFLICT ({conflict}) DO UPDATE SET {column} = excluded.{column}"
        f" WHERE excluded.{column} <> '' AND {table}.{column} <> excluded.{column}"
    )
    with connection.cursor() as cursor:
        _execute_carrying(cursor, sql=upsert, params=params, carried_write=carried_write)


def update_returning(*, queryset: QuerySet, values: dict, returning: QuerySet) -> list[tuple]:
    """UPDATE `queryset` with `values`, returning for each updated row the one value `returning` (a one-column
    query, correlated or not) reads: one statement where an UPDATE and a read took two. PostgreSQL and SQLite
    (>= 3.35) both take a subquery in RETURNING; it sees the database as the statement started (the updated rows
    as they were), so a caller excludes them when it must."""
    update_sql, update_params = update_statement(queryset=queryset, values=values)
    returning_sql, returning_params = returning.query.get_compiler(connection=connection).as_sql()
    with connection.cursor() as cursor:
        cursor.execute(f"{update_sql} RETURNING ({returning_sql})", [*update_params, *returning_params])
        return cursor.fetchall()


def update_statement(*, queryset: QuerySet, values: dict) -> tuple[str, list]:
    """The UPDATE `queryset.update(**values)` would run, as (sql, params): for a statement that carries it."""
    update = cast(UpdateQuery, queryset.query.chain(UpdateQuery))
    update.add_update_values(values)
    sql, params = update.get_compiler(connection=connection).as_sql()
    return sql, list(params)


def update_carrying(*, queryset: QuerySet, values: dict, carried_write: tuple[str, list] | None) -> int:
    """UPDATE `queryset` with `values`, with `carried_write` (an UPDATE of another table, as (sql, params)) in the
    same statement on PostgreSQL, just before it on SQLite (`_execute_carrying`). The rows updated."""
    if carried_write is None:
        return queryset.update(**values)
    update_sql, update_params = update_statement(queryset=queryset, values=values)
    with connection.cursor() as cursor:
        _execute_carrying(cursor, sql=update_sql, params=update_params, carried_write=carried_write)
        return cursor.rowcount


class JSONKeysReplaced(Func):
    """A JSON object column with some top-level keys replaced (or added), computed by the database inside the
    UPDATE: one statement, no lock and read first, and no concurrent writer's other keys lost."""

    output_field = models.JSONField()

    def __init__(self, column: str, values: dict) -> None:
        super().__init__(F(column))
        self.values = values

    def as_sql(self, compiler, connection, *args, **extra):  # *args: Func's function, template, ... (unused)
        raise NotSupportedError(f"JSONKeysReplaced has no {connection.vendor} form (PostgreSQL and SQLite only).")

    def as_postgresql(self, compiler, connection, **extra):
        column, params = compiler.compile(self.source_expressions[0])
        return f"(COALESCE({column}, '{{}}'::jsonb) || %s::jsonb)", (*params, json.dumps(self.values))

    def as_sqlite(self, compiler, connection, **extra):
        column, params = compiler.compile(self.source_expressions[0])
        paths = ", ".join("%s, json(%s)" for _ in self.values)
        arguments = [part for key, value in self.values.items() for part in (f'$."{key}"', json.dumps(value))]
        return f"json_set(COALESCE({column}, '{{}}'), {paths})", (*params, *arguments)
