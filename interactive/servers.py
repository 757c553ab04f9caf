"""The command each session kind runs as its job's process (it reads cluster/session_contract.py's variables).

JupyterLab takes its token from ``JUPYTER_TOKEN`` (set from the secret inside
the shell, so the secret is in no process's command line) and listens on the
agent's port under the portal's URL prefix; ``allow_remote_access`` because
requests come from the portal's host, authenticated by the token; ``allow_root``
only matters in single-user mode, where jobs run as the agent's user (confined jobs never run as root). The
terminal is ``gpusched.terminal``. Both must be installed where the job runs:
in its image, or on the node (``pip install 'gpusched[sessions]'``, see
docs/sessions.md).
"""

from __future__ import annotations

from interactive.models import SessionKind

# JupyterLab's announcements plugin asks every new user whether to fetch Jupyter's news from the
# internet, whatever news_url says; a page config on a config path of the session's own (searched
# before the site's own, after the user's ~/.jupyter) turns that plugin off. Where no temporary
# directory can be made the lab still starts, with the prompt.
LAB_PAGE_CONFIG = '{"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": true}}'
OWN_CONFIG_PATH = (
    'lab_config=$(mktemp -d 2>/dev/null) && mkdir "$lab_config/labconfig"'
    f" && printf '%s\\n' '{LAB_PAGE_CONFIG}' > \"$lab_config/labconfig/page_config.json\""
    ' && export JUPYTER_CONFIG_PATH="$lab_config${JUPYTER_CONFIG_PATH:+:$JUPYTER_CONFIG_PATH}"; '
)
JUPYTER = (
    OWN_CONFIG_PATH + 'JUPYTER_TOKEN="$GPUSCHED_SESSION_SECRET" exec jupyter lab --no-browser'
    ' --ip="$GPUSCHED_SESSION_HOST" --port="$GPUSCHED_SESSION_PORT" --ServerApp.port_retries=0'
    ' --ServerApp.base_url="$GPUSCHED_SESSION_BASE_URL" --ServerApp.root_dir="$PWD"'
    ' --ServerApp.allow_remote_access=True --ServerApp.allow_root=True --LabApp.news_url=None'
    ' --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate --LabApp.extension_manager=readonly'
)
TERMINAL = "exec python3 -m gpusched.terminal"

COMMANDS = {SessionKind.JUPYTER: JUPYTER, SessionKind.TERMINAL: TERMINAL}


def server_command(kind: str) -> str:
    """The job command of a session of ``kind``; KeyError for an unknown kind."""
    return COMMANDS[SessionKind(kind)]
