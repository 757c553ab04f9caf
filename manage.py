#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        # Load the settings now: Django's command runner keeps their error and most commands then fail
        # with "Models aren't loaded yet", which names neither the setting nor the fix.
        settings.INSTALLED_APPS  # noqa: B018
    except ImproperlyConfigured as exc:
        sys.exit(f"manage.py: the settings cannot be loaded: {exc}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
