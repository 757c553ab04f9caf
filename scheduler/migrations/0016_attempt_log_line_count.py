"""Each stored log batch knows its line count, so a page of a long log is found without reading the
text before it (scheduler/attempt_log.py). Rows stored before are counted here, in one UPDATE."""

from django.db import migrations, models
from django.db.models import F, Value
from django.db.models.functions import Length, Replace


def count_stored_lines(apps, schema_editor):  # type: ignore[no-untyped-def]
    AttemptLog = apps.get_model("scheduler", "AttemptLog")
    AttemptLog.objects.update(line_count=Length("text") - Length(Replace(F("text"), Value("\n"), Value(""))) + 1)


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0015_adaptive_jobs'),
    ]

    operations = [
        migrations.AddField(
            model_name='attemptlog',
            name='line_count',
            field=models.PositiveIntegerField(default=0, help_text='Lines in text, set on save.'),
        ),
        migrations.RunPython(count_stored_lines, migrations.RunPython.noop),
    ]
