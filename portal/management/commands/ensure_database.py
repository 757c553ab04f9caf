"""Check that the configured database can be used before migrating; ``--create`` creates a missing
one (``portal.database_setup`` says why that is not the default). ``scripts/serve.sh migrate`` runs it."""

from __future__ import annotations

from argparse import ArgumentParser

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections

from portal import database_setup


class Command(BaseCommand):
    help = "Check that the database in DATABASE_URL can be used; with --create, create it when it is missing."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--create", action="store_true", help="create the PostgreSQL database if it does not exist")
        parser.add_argument("--database", default="default", help="the database alias (default: default)")

    def handle(self, *args: object, **options: object) -> None:
        connection = connections[str(options["database"])]
        state = database_setup.check(connection)
        if state.ok:
            return
        if not state.missing:
            raise CommandError(state.problem)
        if not options["create"]:
            raise CommandError(
                f"{state.problem}: create it ({database_setup.create_command(connection)}), "
                "or set GPUSCHED_CREATE_DATABASE=1 for scripts/serve.sh migrate to create it"
            )
        try:
            database_setup.create(connection)
        except DatabaseError as error:
            raise CommandError(
                f"{state.problem} and could not be created: {database_setup.one_line(error)}; "
                f"create it as a user who may ({database_setup.create_command(connection)})"
            ) from error
        connection.close()
        self.stdout.write(f"Created the {database_setup.where(connection)}, which did not exist")
