"""An attempt's log rows indexed with their line counts, and one index on attempt fewer.

The new index is built before the old ones go, and concurrently (``atomic = False``), so an upgrade
on a large log table neither blocks the agents' log writes nor leaves reads without an index.

The index answers a log's total and a page's first row without reading the rows only where vacuum
has marked their pages all-visible. PostgreSQL vacuums a table after inserts of a fifth of its rows,
which on a large log table leaves a running job's rows, the ones ``gpusched logs --follow`` reads,
unvacuumed for hours; this table is vacuumed after every 10,000 inserted rows instead (a vacuum of an
append-only table visits only the pages added since the last one).
"""

import django.db.models.deletion
from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('scheduler', '0018_attempt_log_order_index'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='attemptlog',
            index=models.Index(fields=['attempt', 'id'], include=('line_count',), name='attemptlog_attempt_lines'),
        ),
        RemoveIndexConcurrently(
            model_name='attemptlog',
            name='attemptlog_attempt_id_order',
        ),
        migrations.RunSQL(
            "ALTER TABLE scheduler_attemptlog SET (autovacuum_vacuum_insert_threshold = 10000, "
            "autovacuum_vacuum_insert_scale_factor = 0)",
            "ALTER TABLE scheduler_attemptlog RESET (autovacuum_vacuum_insert_threshold, "
            "autovacuum_vacuum_insert_scale_factor)",
        ),
        migrations.AlterField(
            model_name='attemptlog',
            name='attempt',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                    related_name='log_chunks', to='scheduler.attempt'),
        ),
    ]
