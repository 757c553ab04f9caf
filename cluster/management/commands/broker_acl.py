"""Create, print or revoke the per-node Redis users of the agents (``cluster.broker_acl``)."""

from __future__ import annotations

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from cluster import broker_acl, broker_users


class Command(BaseCommand):
    help = ("Give each NODE's agent a Redis user of its own that reaches only its command queue and appends "
            "reports (Redis 7 or later). --apply creates the users on the broker, --url prints the broker URL "
            "to give that node's agent, --acl-file prints lines for Redis's aclfile, --revoke deletes the users "
            "and the nodes' queued commands. "
            "While GPUSCHED_AGENT_SECRET_FALLBACKS is set (a rotation), users also take their old passwords; "
            "--url prints the new one. --check says which connected agents are on their own user.")

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("nodes", nargs="*", metavar="NODE", help="node names, as the agents' --name")
        parser.add_argument("--all", action="store_true", help="every node the database knows, besides NODEs")
        action = parser.add_mutually_exclusive_group(required=True)
        action.add_argument("--apply", action="store_true", help="create or replace the users on the broker")
        action.add_argument("--url", action="store_true", help="print each node's broker URL")
        action.add_argument("--acl-file", action="store_true", help="print each user as an aclfile line")
        action.add_argument("--check", action="store_true",
                            help="say, for each node, whether its connected agent is on its own user or a shared one")
        action.add_argument("--revoke", action="store_true",
                            help="delete the users, and the commands still queued for their nodes, from the broker")
        parser.add_argument("--broker-url", default="",
                            help="the broker as the agents reach it, for --url (default: CELERY_BROKER_URL)")

    def handle(self, *args: object, **options: object) -> None:
        secret = settings.AGENT_SECRET
        try:
            nodes = self._nodes(list(options["nodes"]), bool(options["all"]))
            if options["url"]:
                base = str(options["broker_url"] or settings.CELERY_BROKER_URL)
                for node in nodes:
                    self.stdout.write(broker_acl.node_url(base, secret, node))
            elif options["check"]:
                self._check(nodes)
            elif options["acl_file"]:
                for node in nodes:
                    self.stdout.write(broker_acl.acl_file_line(secret, node, fallbacks=settings.AGENT_SECRET_FALLBACKS))
            else:
                self._change_broker(nodes, secret, revoke=bool(options["revoke"]))
        except broker_acl.BrokerAclError as exc:
            raise CommandError(str(exc)) from exc

    def _nodes(self, named: list[str], every: bool) -> list[str]:
        if every:
            from cluster.models import Node

            named += [name for name in Node.objects.order_by("name").values_list("name", flat=True)
                      if name not in named]
        if not named:
            raise CommandError("nodes: name at least one NODE, or give --all")
        for node in named:
            broker_acl.user_name(node)  # refuses a name no user can be made for, naming it
        return named

    def _check(self, nodes: list[str]) -> None:
        """One line per node: its agent's connections and the Redis users they are logged in as."""
        client = broker_users.admin_client()
        try:
            connected = broker_acl.agent_users(client.client_list())
        except redis.RedisError as exc:
            raise CommandError(f"cannot list the broker's clients: {exc}") from exc
        finally:
            client.close()
        for node in nodes:
            users = connected.get(node, set())
            if not users:
                state = "not connected"
            elif users == {broker_acl.user_name(node)}:
                state = "on its own user"
            else:
                state = f"on a shared user ({', '.join(sorted(users - {broker_acl.user_name(node)}))}): give it its own"
            self.stdout.write(f"{node}: {state}")

    def _change_broker(self, nodes: list[str], secret: str, revoke: bool) -> None:
        client = broker_users.admin_client()
        try:
            for node in nodes:
                if revoke:  # the user, and the commands still queued for the node (its jobs' environment)
                    client.execute_command("ACL", "DELUSER", broker_acl.user_name(node))
                    removed = client.delete(*broker_acl.own_keys(node))
                    broker_users.forget([node])
                    self.stdout.write(f"revoked {broker_acl.user_name(node)}; removed {removed} key(s) of its queue")
                else:
                    client.execute_command("ACL", "SETUSER", *broker_acl.setuser_args(
                        secret, node, fallbacks=settings.AGENT_SECRET_FALLBACKS))
                    broker_users.record([node])  # the safety tick creates it again should Redis lose it
                    self.stdout.write(f"applied {broker_acl.user_name(node)}")
            self._persist(client)
        except redis.ResponseError as exc:
            raise CommandError(f"the broker refused the ACL change ({exc}); per-node users need Redis 7 or "
                               "later and a connection allowed to run ACL") from exc
        except redis.RedisError as exc:
            raise CommandError(f"cannot reach the broker: {exc}") from exc
        finally:
            client.close()

    def _persist(self, client: redis.Redis) -> None:
        """Save the users to Redis's aclfile when it has one; otherwise say that they last only until
        Redis restarts (and how to keep them)."""
        try:
            client.execute_command("ACL", "SAVE")
        except redis.ResponseError:
            self.stderr.write("the broker has no aclfile: Redis forgets these users when it restarts, and the "
                              "safety tick creates them again (within seconds, while a worker and beat run); "
                              "put the lines of --acl-file in its aclfile to keep them across restarts anyway")
            return
        self.stdout.write("saved to the broker's aclfile")
