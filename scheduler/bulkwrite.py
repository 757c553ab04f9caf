"""Set-based writes: give many rows each their own values in one statement.

The scheduling cycle writes thousands of rows whose new values differ row by
row (a pending job's reason and message, the job an attempt is preempted
for). ``update_each`` writes them with one ``UPDATE ... FROM unnest(...)``
per batch on PostgreSQL, the database the cluster runs on. On any other
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

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, models

#: Rows per statement on PostgreSQL: bounds one statement's parameters and row locks.
BATCH = 5000


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
        changed += _unnest_update(model, fields, items[start:start + BATCH], where)
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


def _unnest_update(model: type[models.Model], fields: Sequence[str], items: list[tuple[int, Sequence[Any]]],
                   where: Mapping[str, Any]) -> int:
    """``UPDATE t SET f = v.f FROM unnest(pks, values...) AS v WHERE t.pk = v.pk AND <where>``."""
    meta = model._meta
    quote = connection.ops.quote_name
    pk = meta.pk
    columns = [meta.get_field(name) for name in fields]
    arrays = [_array_type(pk)] + [_array_type(f) for f in columns]
    names = ["pk"] + [f"v{i}" for i in range(len(columns))]
    assignments = ", ".join(f"{quote(f.column)} = v.{name}" for f, name in zip(columns, names[1:], strict=True))
    conditions = [f"t.{quote(pk.column)} = v.pk"]
    params: list[Any] = [[p for p, _ in items]]
    params += [[values[i] for _, values in items] for i in range(len(columns))]
    for name, value in where.items():
        column = f"t.{quote(meta.get_field(name).column)}"
        if value is None:
            conditions.append(f"{column} IS NULL")
        else:
            conditions.append(f"{column} = %s")
            params.append(value)
    unnest = ", ".join(f"%s::{kind}[]" for kind in arrays)
    sql = (f"UPDATE {quote(meta.db_table)} AS t SET {assignments} "
           f"FROM unnest({unnest}) AS v({', '.join(names)}) WHERE {' AND '.join(conditions)}")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def _array_type(field: models.Field) -> str:
    """The element type of the array a column's new values travel in."""
    if field.is_relation:
        return field.target_field.rel_db_type(connection)
    kind = field.db_type(connection)
    if kind is None:
        raise ValueError(f"{field.name}: no column type")
    return "bigint" if kind in ("serial", "bigserial") else kind
