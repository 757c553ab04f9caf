"""Session secrets are stored sealed (``interactive.sealed``): the column widens and the rows already
there are sealed in place, read and written as raw SQL since the historical model would unseal them."""

from django.db import migrations

import interactive.sealed


def seal_stored_secrets(apps, schema_editor) -> None:  # noqa: ANN001
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT job_id, secret FROM interactive_sessionendpoint")
        rows = [(job_id, secret) for job_id, secret in cursor.fetchall()
                if secret and not secret.startswith(interactive.sealed.PREFIX)]
        for job_id, secret in rows:
            cursor.execute("UPDATE interactive_sessionendpoint SET secret = %s WHERE job_id = %s",
                           [interactive.sealed.seal(secret), job_id])


class Migration(migrations.Migration):

    dependencies = [
        ('interactive', '0001_initial'),
    ]

    operations = [
        migrations.AlterField(
            model_name='sessionendpoint',
            name='secret',
            field=interactive.sealed.SealedCharField(max_length=256),
        ),
        migrations.RunPython(seal_stored_secrets, migrations.RunPython.noop),
    ]
