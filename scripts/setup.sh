#!/usr/bin/env bash
# Create the virtual environment .venv (if missing) and install the project in
# it with its test and sessions extras (pip install -e '.[test,sessions]'). Reinstalls only when
# pyproject.toml changed since the last successful install.
# Python: $PYTHON if set, else the first of python3.11, python3.12, python3.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

pick_python() {
    local candidate
    for candidate in ${PYTHON:-} python3.11 python3.12 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 13))'; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if [ ! -x "$VENV/bin/python" ]; then
    python=$(pick_python) || die "Python 3.11 or 3.12 is needed (Debian/Ubuntu: apt-get install python3 python3-venv)"
    say "Creating $VENV with $python"
    "$python" -m venv "$VENV" || die "could not create $VENV (Debian/Ubuntu: apt-get install python3-venv)"
fi

stamp="$VENV/.gpusched-installed"
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] ||
    ! "$VENV/bin/python" -c 'import importlib.metadata as m; m.version("gpusched")' 2>/dev/null; then
    say "Installing the project into $VENV (pip install -e '.[test,sessions]')"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test,sessions]'
    echo "$want" >"$stamp"
fi
