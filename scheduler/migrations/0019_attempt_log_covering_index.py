"""An attempt's log rows indexed with their line counts, and one index on attempt fewer.

On PostgreSQL the new index is built before the old ones go, and concurrently (``atomic = False``),
so an upgrade on a large log table neither blocks the agents' log writes nor leaves reads without an
index. Other databases (SQLite, for a try-out) build and drop them the ordinary way, without the
line counts in the index.

The index answers a log's total and a page's first row without reading the rows only where vacuum
has marked their pages all-visible. PostgreSQL vacuums a table after inserts of a fifth of its rows,
which on a large log table leaves a running job's rows, the ones ``gpusched logs --follow`` reads,
unvacuumed for hours; this table is vacuumed after every 10,000 inserted rows instead (a vacuum of an
append-only table visits only the pages added since the last one).
"""

import django.db.models.deletion
from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


def _postgresql(schema_editor) -> bool:
    return schema_editor.connection.vendor == "postgresql"


class ConcurrentlyOnPostgreSQL:
    """An index operation run concurrently on PostgreSQL and as its ordinary ``plain`` one elsewhere."""

    plain: type

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        run = super().database_forwards if _postgresql(schema_editor) else self._plain_forwards
        return run(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        run = super().database_backwards if _postgresql(schema_editor) else self._plain_backwards
        return run(app_label, schema_editor, from_state, to_state)

    def _plain_forwards(self, *args):
        return self.plain.database_forwards(self, *args)

    def _plain_backwards(self, *args):
        return self.plain.database_backwards(self, *args)


class AddIndexConcurrentlyOnPostgreSQL(ConcurrentlyOnPostgreSQL, AddIndexConcurrently):
    plain = migrations.AddIndex


class RemoveIndexConcurrentlyOnPostgreSQL(ConcurrentlyOnPostgreSQL, RemoveIndexConcurrently):
    plain = migrations.RemoveIndex


VACUUM_OFTEN = ("ALTER TABLE scheduler_attemptlog SET (autovacuum_vacuum_insert_threshold = 10000, "
                "autovacuum_vacuum_insert_scale_factor = 0)")
VACUUM_AS_DEFAULT = ("ALTER TABLE scheduler_attemptlog RESET (autovacuum_vacuum_insert_threshold, "
                     "autovacuum_vacuum_insert_scale_factor)")


def vacuum_often(apps, schema_editor) -> None:
    if _postgresql(schema_editor):
        schema_editor.execute(VACUUM_OFTEN)


def vacuum_as_default(apps, schema_editor) -> None:
    if _postgresql(schema_editor):
        schema_editor.execute(VACUUM_AS_DEFAULT)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('scheduler', '0018_attempt_log_order_index'),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='attemptlog',
            index=models.Index(fields=['attempt', 'id'], include=('line_count',), name='attemptlog_attempt_lines'),
        ),
        RemoveIndexConcurrentlyOnPostgreSQL(
            model_name='attemptlog',
            name='attemptlog_attempt_id_order',
        ),
        migrations.RunPython(vacuum_often, vacuum_as_default),
        migrations.AlterField(
            model_name='attemptlog',
            name='attempt',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                    related_name='log_chunks', to='scheduler.attempt'),
        ),
    ]
