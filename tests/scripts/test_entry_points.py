"""The run command, the test command, CI, the Dockerfile and docker-compose.yml
must run the same things. They do so by construction (every component starts
through scripts/serve.sh); these tests keep it that way. No Docker engine is
needed: the files are read, not run.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["scripts/common.sh", "scripts/setup.sh", "scripts/serve.sh", "scripts/up.sh", "scripts/netns-cluster.sh",
           "scripts/test.sh", ".ci/run"]


def serve_components() -> set[str]:
    """The component names scripts/serve.sh accepts (its case labels)."""
    text = (ROOT / "scripts/serve.sh").read_text()
    case_body = text.split('case "$component" in', 1)[1].split("esac", 1)[0]
    return set(re.findall(r"^\s{4}([a-z-]+)\)", case_body, flags=re.MULTILINE))


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_serve_knows_every_component() -> None:
    assert serve_components() == {"migrate", "demo-users", "web", "worker", "beat", "agent"}


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_are_valid_bash(script: str) -> None:
    result = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("script", [s for s in SCRIPTS if not s.endswith("common.sh")])
def test_entry_scripts_are_executable(script: str) -> None:
    assert (ROOT / script).stat().st_mode & 0o111


def test_compose_has_the_required_services() -> None:
    services = compose()["services"]
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(services)
    agents = [name for name, s in services.items() if s.get("command", [None])[:2] == ["scripts/serve.sh", "agent"]]
    assert len(agents) == 2


def test_every_app_service_runs_a_serve_component() -> None:
    services = compose()["services"]
    app = {name: s for name, s in services.items() if "build" in s}
    assert set(app) >= {"setup", "web", "worker", "beat"}
    for name, service in app.items():
        command = service["command"]
        words = command[2].replace("&&", " ").split() if command[:2] == ["sh", "-c"] else command
        invoked = [words[i + 1] for i, w in enumerate(words) if w == "scripts/serve.sh"]
        assert invoked, f"{name} does not start through scripts/serve.sh"
        assert set(invoked) <= serve_components(), name


def test_run_command_starts_the_same_components() -> None:
    up = (ROOT / "scripts/up.sh").read_text()
    for component in ("migrate", "demo-users", "web", "worker", "beat", "agent"):
        assert re.search(rf'scripts/serve\.sh" {component}\b', up), component
    assert '"$ROOT/scripts/setup.sh"' in up


def test_dockerfile_installs_with_setup_and_serves_web() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "RUN scripts/setup.sh" in dockerfile
    assert 'CMD ["scripts/serve.sh", "web"]' in dockerfile


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", readme, flags=re.DOTALL)
    assert "scripts/up.sh\n" in blocks and "scripts/test.sh\n" in blocks
    ci = (ROOT / ".ci/run").read_text()
    assert re.search(r"^exec scripts/test\.sh$", ci, flags=re.MULTILINE)


def test_serve_refuses_an_unknown_component() -> None:
    result = subprocess.run([str(ROOT / "scripts/serve.sh"), "bogus"], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 1
    assert "usage: scripts/serve.sh {migrate|demo-users|web|worker|beat|agent NAME [GPUS]}" in result.stderr


def side_entries() -> list[str]:
    """The words of scripts/test.sh's SIDE_TESTS array, patterns unexpanded."""
    text = (ROOT / "scripts/test.sh").read_text()
    body = re.search(r"^SIDE_TESTS=\((.*?)\)", text, flags=re.MULTILINE | re.DOTALL)
    assert body, "scripts/test.sh defines no SIDE_TESTS array"
    return body.group(1).split()


def side_tests() -> list[str]:
    """The tests scripts/test.sh runs in its second process: SIDE_TESTS with its patterns expanded
    as bash expands them there (from the repository root), each pattern matching at least one file."""
    out = []
    for entry in side_entries():
        if "*" in entry:
            matched = sorted(str(path.relative_to(ROOT)) for path in ROOT.glob(entry))
            assert matched, f"{entry} in SIDE_TESTS matches no file"
            out += matched
        else:
            out.append(entry)
    return out


# What makes a test unfit to run in the second process: it creates POSIX users, job images, network
# namespaces or cgroups under names of its choosing, which exist once per machine, not per process.
MACHINE_WIDE = ("tests.cluster.agent.confined", "tests.support.netns", "useradd",
                "/sys/fs/cgroup", "ip netns", "mmdebstrap")


def test_the_tests_run_alongside_exist_and_touch_nothing_machine_wide() -> None:
    listed = side_tests()
    assert listed and len(set(listed)) == len(listed)
    for entry in listed:
        path = ROOT / entry
        assert path.exists(), f"{entry} is listed in SIDE_TESTS but does not exist"
        for source in [path] if path.is_file() else sorted(path.rglob("*.py")):
            if source == Path(__file__).resolve():
                continue  # this file names them
            text = source.read_text()
            found = [word for word in MACHINE_WIDE if word in text]
            assert not found, f"{source.relative_to(ROOT)} uses {found}: it must run in the first process"


def test_the_folders_with_machine_wide_tests_run_in_the_first_process() -> None:
    listed = set(side_tests())
    for folder in ("tests/adversarial", "tests/cluster", "tests/support", "tests/cluster/agent"):
        assert (ROOT / folder).is_dir() and folder not in listed, folder
        assert not any(entry.startswith(f"{folder}/") and (ROOT / entry).is_dir() for entry in listed), folder
    # Files of those folders may run alongside one by one; the agent's tests and the fault tests
    # (which time restarts and redeliveries) stay in the first process.
    assert not any(entry.startswith("tests/cluster/agent/") for entry in listed)
    for fault_tests in ("test_adv_faults.py", "test_adv_multihost.py", "test_adv_multihost_data.py",
                        "test_adv_backup.py", "test_adv_isolation.py"):
        assert f"tests/adversarial/{fault_tests}" not in listed


def test_the_first_process_leaves_out_the_files_listed_alongside() -> None:
    """run_split gives the first pytest an --ignore for each listed file inside one of its folders,
    so that no test runs twice (once in each process)."""
    script = (ROOT / "scripts/test.sh").read_text()
    assert re.search(r'case "\$side" in tests/\*/\*\) machine_tests\+=\("--ignore=\$side"\)', script)
    inside = [entry for entry in side_tests() if entry.count("/") >= 2]
    assert "tests/cluster/test_commands.py" in inside and "tests/adversarial/test_adv_hostile_input.py" in inside
