"""A real OpenLDAP server (Debian's ``slapd``) for tests, on a free port with a throwaway config.

The directory (suffix ``dc=example,dc=org``, mdb backend) is filled with
``ldapadd`` from :data:`ENTRIES`: two people with passwords and three
``groupOfNames`` groups (``staff``, ``vision`` and ``everyone``). The search
account is the root DN. Nothing outside the temporary folder is touched.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SUFFIX = "dc=example,dc=org"
ROOT_DN = f"cn=admin,{SUFFIX}"
ROOT_PASSWORD = "directory-root-secret"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
PASSWORDS = {"dora": "dora-directory-pw", "ivan": "ivan-directory-pw"}
SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")

_CONFIG = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {dir}/slapd.pid
database mdb
maxsize 16777216
suffix "{suffix}"
rootdn "{root_dn}"
rootpw {root_pw}
directory {dir}/data
access to attrs=userPassword by anonymous auth by * none
access to * by * read
"""


def _person(uid: str, given: str, surname: str) -> str:
    return (f"dn: uid={uid},{PEOPLE}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {given} {surname}\n"
            f"givenName: {given}\nsn: {surname}\nmail: {uid}@example.org\nuserPassword: {PASSWORDS[uid]}\n")


def _group(name: str, *uids: str) -> str:
    members = "".join(f"member: uid={u},{PEOPLE}\n" for u in uids)
    return f"dn: cn={name},{GROUPS}\nobjectClass: groupOfNames\ncn: {name}\n{members}"


#: dora is staff and in vision; ivan is in neither; both are in everyone.
ENTRIES = "\n".join([
    f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n",
    f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n",
    f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups\n",
    _person("dora", "Dora", "Directory"),
    _person("ivan", "Ivan", "Inside"),
    _group("staff", "dora"),
    _group("vision", "dora"),
    _group("everyone", "dora", "ivan"),
])


def missing_tools() -> str | None:
    """What is missing to run the server, or None."""
    for tool in ("slapd", "ldapadd"):
        if _which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install slapd ldap-utils)"
    if not Path("/usr/lib/ldap/back_mdb.so").exists() or not Path("/etc/ldap/schema/core.schema").exists():
        return "slapd's mdb module or schemas are missing (Debian: apt-get install slapd)"
    return None


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path=os.pathsep.join(SBIN))


def free_port() -> int:
    """A TCP port nothing listens on now (also what a test uses as a directory that is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Slapd:
    """A running slapd; :meth:`stop` ends it."""

    uri: str
    process: subprocess.Popen

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start(workdir: Path) -> Slapd:
    """Start slapd under ``workdir`` and load :data:`ENTRIES`; raises RuntimeError with its output."""
    (workdir / "data").mkdir(parents=True)
    conf = workdir / "slapd.conf"
    conf.write_text(_CONFIG.format(dir=workdir, suffix=SUFFIX, root_dn=ROOT_DN, root_pw=ROOT_PASSWORD))
    port = free_port()
    uri = f"ldap://127.0.0.1:{port}"
    log = (workdir / "slapd.log").open("w")
    # -d keeps slapd in the foreground (so the test owns the process) and logs to stderr.
    process = subprocess.Popen([_which("slapd"), "-f", str(conf), "-h", uri, "-d", "256"],
                               stdout=log, stderr=subprocess.STDOUT)
    server = Slapd(uri, process)
    try:
        _wait_listening(port, process, workdir / "slapd.log")
        (workdir / "entries.ldif").write_text(ENTRIES)
        done = subprocess.run([_which("ldapadd"), "-x", "-H", uri, "-D", ROOT_DN, "-w", ROOT_PASSWORD,
                               "-f", str(workdir / "entries.ldif")], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"ldapadd failed ({done.returncode}): {done.stderr.strip()}")
    except BaseException:
        server.stop()
        raise
    return server


def _wait_listening(port: int, process: subprocess.Popen, log: Path) -> None:
    """Until slapd accepts connections (it exits with its reason on a bad config)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"slapd exited with {process.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"slapd did not listen on port {port} within 20 s: {log.read_text()[-2000:]}")
