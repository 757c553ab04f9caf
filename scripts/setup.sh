#!/usr/bin/env bash
# Create the virtual environment .venv (if missing) and install the project in
# it with its test and sessions extras, and ldap when its headers are there (pip install -e
# '.[test,sessions,ldap]'). Reinstalls only when the extras or
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

# The ldap extra (LDAP login) builds python-ldap, which needs the OpenLDAP and SASL headers
# (Debian: libldap2-dev libsasl2-dev; scripts/test.sh installs them): added when they are present.
extras="test,sessions"
if [ -f /usr/include/ldap.h ] && [ -f /usr/include/sasl/sasl.h ]; then
    extras="$extras,ldap"
else
    say "note: no OpenLDAP/SASL headers (apt-get install libldap2-dev libsasl2-dev): LDAP login is not installed"
fi
stamp="$VENV/.gpusched-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) $extras"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] ||
    ! "$VENV/bin/python" -c 'import importlib.metadata as m; m.version("gpusched")' 2>/dev/null; then
    say "Installing the project into $VENV (pip install -e '.[$extras]')"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$extras]"
    echo "$want" >"$stamp"
fi

# jsonschema imports rfc3987-syntax when it is installed (a dependency of its format-nongpl extra,
# which jupyter-events asks for), and that module compiles an Earley grammar on import: 1.3 s of
# JupyterLab's 2.3 s start-up on a 2-core machine, paid by every notebook session. Nothing here
# validates the "iri" format it checks (jsonschema skips that check without it), so it is left out.
if "$VENV/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("rfc3987_syntax") is None)'; then
    say "Removing rfc3987-syntax from $VENV (it adds 1.3 s to every JupyterLab start; docs/sessions.md)"
    "$VENV/bin/python" -m pip uninstall --quiet --yes rfc3987-syntax
fi
