"""Protocol versions, for rolling upgrades: which messages a process accepts.

Every command and report carries ``protocol_version`` (``PROTOCOL_FIELD``);
a message without it was sent before versions existed and is version 1. A
receiver accepts the version it speaks and the one before, so old and new
agents run side by side while nodes are upgraded one by one; any other version
is refused with a log line naming both, never misread. Raise
``protocol.PROTOCOL_VERSION`` when a change would be misread by a receiver of
the previous version (a field whose meaning changes; not a new optional field,
which receivers ignore).

Both sides import this module; it imports neither Django nor Celery.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster.protocol import PROTOCOL_VERSION, ProtocolError

PROTOCOL_FIELD = "protocol_version"
# Every command names the server's cluster (its database); an agent's reports name the one its memory
# belongs to, once it has been told one. Optional: cluster/server_identity.py.
CLUSTER_ID_FIELD = "cluster_id"
# Server -> agent, answering a register of a version the server refuses; kwargs: reason. An agent
# that does not know this command (version 1) logs it as an unknown command, which says as much.
AGENT_REFUSED = "agent.refused"

# Overrides the version this process speaks (compatibility tests only).
ENV_PROTOCOL_VERSION = "GPUSCHED_PROTOCOL_VERSION"


class UnsupportedVersion(ValueError):
    """A message of a protocol version this side does not accept."""


def spoken_version(environ: Mapping[str, str]) -> int:
    """The version this process speaks: PROTOCOL_VERSION unless ENV_PROTOCOL_VERSION says otherwise."""
    raw = environ.get(ENV_PROTOCOL_VERSION, "")
    if not raw:
        return PROTOCOL_VERSION
    if not (raw.isascii() and raw.isdigit()):
        raise ValueError(f"{ENV_PROTOCOL_VERSION} must be a whole number, got {raw!r}")
    return int(raw)


def message_version(kwargs: Mapping[str, Any]) -> int:
    """The protocol version a message was sent in (1 when it names none); ProtocolError if malformed."""
    value = kwargs.get(PROTOCOL_FIELD, 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(PROTOCOL_FIELD, f"must be a whole number, got {value!r}")
    return value


def check_version(version: int, own: int, sender: str) -> None:
    """Raise UnsupportedVersion unless a receiver speaking ``own`` accepts ``version`` (own - 1 or own)."""
    if version not in (own - 1, own):
        age = "too new" if version > own else "too old"
        raise UnsupportedVersion(f"{sender} speaks protocol version {version}, {age} for this side, which speaks "
                                 f"{own} and accepts {own - 1} and {own}")
