"""The server's identity row (``cluster.models.ServerIdentity``): an unmanaged table, so a flush keeps it."""

import uuid

from django.db import migrations, models

TABLE = "cluster_server_identity"


def create_row(apps, schema_editor):  # noqa: ANN001, ANN201
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {TABLE} (id, uuid) VALUES (1, %s)", [str(uuid.uuid4())])


class Migration(migrations.Migration):
    dependencies = [("cluster", "0005_gpu_policy_validators")]

    operations = [
        migrations.RunSQL(f"CREATE TABLE {TABLE} (id integer PRIMARY KEY, uuid varchar(36) NOT NULL)",
                          reverse_sql=f"DROP TABLE {TABLE}"),
        migrations.RunPython(create_row, migrations.RunPython.noop),
        migrations.CreateModel(
            name="ServerIdentity",
            fields=[
                ("id", models.IntegerField(primary_key=True)),
                ("uuid", models.CharField(max_length=36)),
            ],
            options={"managed": False, "db_table": TABLE},
        ),
    ]
