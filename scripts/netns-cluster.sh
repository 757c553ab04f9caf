#!/usr/bin/env bash
# A multi-host deployment on this machine, made of Linux network namespaces
# (root and iproute2 needed): PostgreSQL and Redis on host "db", the portal,
# a Celery worker and beat on host "app", one node agent per host "node1"...,
# joined by a private bridge on 10.213.N.0/24. The same code is the pytest
# fixture netns_cluster (tests/support/netns_cluster.py); see docs/operations.md.
#
#   scripts/netns-cluster.sh up [--agents N] [--gpus G] [--dir DIR]
#                                   start it in the background; prints the
#                                   portal URL, an API token, the addresses
#   scripts/netns-cluster.sh down [--dir DIR]
#                                   stop every process and remove namespaces,
#                                   veths and bridge (any left by a crashed run
#                                   too, when nothing is recorded in DIR)
#
# Logs of every process: DIR (default var/netns-cluster). A process in a host:
#   ip netns exec gsmh<N>-node1 COMMAND
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ -x "$VENV/bin/python" ] || die "no virtual environment at $VENV: run scripts/setup.sh first"
[ "$(id -u)" = 0 ] || die "network namespaces need root"
command -v ip >/dev/null 2>&1 || die "iproute2 ('ip') is needed (Debian/Ubuntu: apt-get install iproute2)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$VENV/bin/python" -m tests.support.netns_cluster "$@"
