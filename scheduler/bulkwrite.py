"""Set-based writes: give many rows each their own values in one statement.

The scheduling cycle writes thousands of rows whose new values differ row by
row (a pending job's reason and message, the job an attempt is preempted
for). ``update_each`` writes them with one ``UPDATE ... FROM
jsonb_to_recordset(...)`` per batch on PostgreSQL, the database the cluster
runs on: the batch travels as one JSON document, which the standard library
encodes in C, where a parameter per column made the driver quote every
element in Python (0.5 s of a 5,000-node cycle's 47,000 pending reasons).
``insert_rows`` inserts new rows the same way. On any other
database (the SQLite of a one-machine setup) it falls back to one
``filter(pk__in=...).update(...)`` per distinct tuple of values: the same
rows end with the same values, in more statements.

Contract: only rows whose primary key is in ``rows`` *and* that match every
``where`` equality at the time of the write are changed; the return value is
the number of rows changed. Values must be plain column values (str, int,
float, bool, aware datetime, None); foreign keys are given as ids under the
field's name (``allocated_to``).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.db import connection, models
from django.db.models.expressions import RawSQL

#: Rows per statement on PostgreSQL: bounds one statement's parameters and row locks.
BATCH = 5000


def id_set(ids: Iterable[int]) -> list[int] | RawSQL:
    """``ids`` as the value of an ``__in`` filter on integer keys: on PostgreSQL one array parameter
    (``SELECT unnest(%s::bigint[])``), elsewhere the list. With a placeholder per id, Django built a
    parameter and psycopg converted a placeholder for each of the 10,000 ids a large cycle locks and
    writes, about a tenth of its apply step."""
    ids = list(ids)
    if connection.vendor != "postgresql":
        return ids
    return RawSQL("SELECT unnest(%s::bigint[])", (ids,))


def update_each(model: type[models.Model], fields: Sequence[str], rows: Mapping[int, Sequence[Any]],
                where: Mapping[str, Any] | None = None, *, set_based: bool | None = None) -> int:
    """Set ``fields`` of the row with primary key ``pk`` to ``rows[pk]`` (a value per field),
    for the rows that also match ``where``; returns the rows changed (see the module doc).

    ``set_based`` forces one path (tests compare both); by default the set-based
    statement is used on PostgreSQL.
    """
    if not rows:
        return 0
    where = dict(where or {})
    for pk, values in rows.items():
        if len(values) != len(fields):
            raise ValueError(f"row {pk}: {len(values)} values for {len(fields)} fields {list(fields)}")
    if set_based is None:
        set_based = connection.vendor == "postgresql"
    if not set_based:
        return _grouped(model, fields, rows, where)
    changed = 0
    items = list(rows.items())
    for start in range(0, len(items), BATCH):
        changed += _json_update(model, fields, items[start:start + BATCH], where)
    return changed


def _grouped(model: type[models.Model], fields: Sequence[str], rows: Mapping[int, Sequence[Any]],
             where: Mapping[str, Any]) -> int:
    by_values: dict[tuple, list[int]] = defaultdict(list)
    for pk, values in rows.items():
        by_values[tuple(values)].append(pk)
    names = [model._meta.get_field(name).attname for name in fields]
    changed = 0
    for values, pks in by_values.items():
        changed += model.objects.filter(pk__in=pks, **where).update(**dict(zip(names, values, strict=True)))
    return changed


def _json_update(model: type[models.Model], fields: Sequence[str], items: list[tuple[int, Sequence[Any]]],
                 where: Mapping[str, Any]) -> int:
    """``UPDATE t SET f = v.f FROM jsonb_to_recordset(rows) AS v(...) WHERE t.pk = v.pk AND <where>``."""
    sql, params = _update_sql(model, fields, items, where)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def tuple_version(alias: str) -> str:
    """The SQL of a row's version as ``scheduler.kept_rows`` reads it for one table (``alias``): its
    tuple's ``xmin`` and ``ctid``, which every update of the row changes."""
    return f"{alias}.xmin::text || ',' || {alias}.ctid::text"


#: ``tuple_version`` of the row an ``update_each_at_version`` statement writes.
ROW_VERSION = tuple_version("t")


def update_each_at_version(model: type[models.Model], fields: Sequence[str], rows: Mapping[int, Sequence[Any]],
                           versions: Mapping[int, str], where: Mapping[str, Any] | None = None) -> dict[int, str]:
    """As ``update_each`` on PostgreSQL, for the rows of ``rows`` still at the version of ``versions``
    (``ROW_VERSION``, as read earlier): a row written since is left alone. Returns the new version
    of each row written, by primary key, so that whoever keeps rows by version (``scheduler.kept_rows``)
    can keep what it wrote without reading it again."""
    written: dict[int, str] = {}
    items = [(pk, [*rows[pk], versions[pk]]) for pk in rows if pk in versions]
    for start in range(0, len(items), BATCH):
        sql, params = _update_sql(model, fields, items[start:start + BATCH], where or {}, versioned=True)
        with connection.cursor() as cursor:
            cursor.execute(f"{sql} RETURNING t.{connection.ops.quote_name(model._meta.pk.column)}, {ROW_VERSION}",
                           params)
            written.update(cursor.fetchall())
    return written


def _update_sql(model: type[models.Model], fields: Sequence[str], items: list[tuple[int, Sequence[Any]]],
                where: Mapping[str, Any], versioned: bool = False) -> tuple[str, list[Any]]:
    """The statement of ``_json_update``; ``versioned``: each item's values end with the version the
    row must still have (``ROW_VERSION``), a condition rather than a column to set."""
    meta = model._meta
    quote = connection.ops.quote_name
    pk = meta.pk
    columns = [meta.get_field(name) for name in fields]
    names = ["pk"] + [f"v{i}" for i in range(len(columns))]
    assignments = ", ".join(f"{quote(f.column)} = v.{name}" for f, name in zip(columns, names[1:], strict=True))
    conditions = [f"t.{quote(pk.column)} = v.pk"] + ([f"{ROW_VERSION} = v.version"] if versioned else [])
    params: list[Any] = [_json_rows(names + (["version"] if versioned else []), ([p, *values] for p, values in items))]
    for name, value in where.items():
        column = f"t.{quote(meta.get_field(name).column)}"
        if value is None:
            conditions.append(f"{column} IS NULL")
        else:
            conditions.append(f"{column} = %s")
            params.append(value)
    record = ", ".join([f"{name} {_column_type(f)}" for name, f in zip(names, [pk, *columns], strict=True)]
                       + (["version text"] if versioned else []))
    sql = (f"UPDATE {quote(meta.db_table)} AS t SET {assignments} "
           f"FROM jsonb_to_recordset(%s::jsonb) AS v({record}) WHERE {' AND '.join(conditions)}")
    return sql, params


def insert_rows(model: type[models.Model], fields: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[int]:
    """Insert one row per entry of ``rows`` (a value per field of ``fields``, foreign keys as ids
    under the field's name); returns the new primary keys in the order of ``rows``.

    Unlike ``bulk_create`` it sends no signals and fills no defaults: every column
    without a database default must be in ``fields``. On PostgreSQL each batch is
    one ``INSERT ... SELECT FROM jsonb_to_recordset(...)``; elsewhere ``bulk_create``.
    """
    if not rows:
        return []
    for number, values in enumerate(rows):
        if len(values) != len(fields):
            raise ValueError(f"row {number}: {len(values)} values for {len(fields)} fields {list(fields)}")
    if connection.vendor != "postgresql":
        names = [model._meta.get_field(name).attname for name in fields]
        made = model.objects.bulk_create([model(**dict(zip(names, values, strict=True))) for values in rows])
        return [m.pk for m in made]
    ids: list[int] = []
    for start in range(0, len(rows), BATCH):
        ids += _json_insert(model, fields, rows[start:start + BATCH])
    return ids


def insert_objects(objects: Sequence[models.Model]) -> None:
    """Insert unsaved model instances of one model, every concrete column as the instance holds it
    (defaults were filled when each was made), and give each its primary key; as ``bulk_create``
    without its per-value preparation (``insert_rows``)."""
    if not objects:
        return
    model = type(objects[0])
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    ids = insert_rows(model, [f.name for f in fields], [[getattr(o, f.attname) for f in fields] for o in objects])
    for obj, pk in zip(objects, ids, strict=True):
        obj.pk = pk
        obj._state.adding = False
        obj._state.db = connection.alias


def _json_insert(model: type[models.Model], fields: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[int]:
    meta = model._meta
    quote = connection.ops.quote_name
    columns = [meta.get_field(name) for name in fields]
    names = ["n"] + [f"v{i}" for i in range(len(columns))]
    record = ", ".join(["n integer"] + [f"{name} {_column_type(f)}" for name, f in zip(names[1:], columns,
                                                                                         strict=True)])
    sql = (f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in columns)}) "
           f"SELECT {', '.join(names[1:])} FROM jsonb_to_recordset(%s::jsonb) AS v({record}) ORDER BY n "
           f"RETURNING {quote(meta.pk.column)}")
    with connection.cursor() as cursor:
        cursor.execute(sql, [_json_rows(names, ([n, *values] for n, values in enumerate(rows)))])
        # PostgreSQL returns the rows of an INSERT ... SELECT ... ORDER BY in that order (as Django's
        # bulk_create relies on for its RETURNING): the keys line up with ``rows``.
        return [pk for (pk,) in cursor.fetchall()]


def _json_rows(names: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """The rows as one JSON array of objects keyed by ``names`` (datetimes in ISO 8601; an infinite
    or NaN float as the text PostgreSQL reads it, since JSON has no such number)."""
    objects = [dict(zip(names, values, strict=True)) for values in rows]
    try:
        return json.dumps(objects, default=_json_value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        if all(math.isfinite(v) for row in objects for v in row.values() if isinstance(v, float)):
            raise  # not a float's doing (a naive datetime): the error names it
        objects = [{k: _finite(v) for k, v in row.items()} for row in objects]
        return json.dumps(objects, default=_json_value, separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the columns hold aware times")
        return value.isoformat()
    if isinstance(value, date | Decimal | UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not a plain column value")


def _column_type(field: models.Field) -> str:
    """The type a column's new values are read as from the JSON document."""
    if field.is_relation:
        return field.target_field.rel_db_type(connection)
    kind = field.db_type(connection)
    if kind is None:
        raise ValueError(f"{field.name}: no column type")
    return "bigint" if kind in ("serial", "bigserial") else kind
