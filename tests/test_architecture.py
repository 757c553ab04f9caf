"""The house stays as built (docs/architecture.md): layers that only look down, no import cycles, small modules,
one writer of ``Job.state``.

The import graph is read from the source with ``ast``, counting every import, at module level or inside a
function (a function-level import hides a cycle from Python, not from the design). No Django is needed.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Every top-level package of the project (a folder with ``__init__.py``), the tests aside: a new Django app is
#: held to the same rules the day it appears.
PACKAGES = tuple(sorted(p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name != "tests"))
LINE_LIMIT = 400

#: What the scheduling loop may use of cluster/: the node layer below it (definitions of nodes and GPUs, the
#: agent protocol and the session secret's sealing that a launch carries the key of, the broker and the
#: commands sent through it). The rest of cluster/ (agent reports, liveness, the tick) sits above the loop
#: and imports it.
CLUSTER_BELOW_THE_LOOP = frozenset({"cluster", "cluster.models", "cluster.protocol", "cluster.broker",
                                    "cluster.commands", "cluster.session_seal"})

#: Frameworks the pure core, the simulator and the node agent never import.
WEB_FRAMEWORKS = frozenset({"django", "celery", "channels", "rest_framework"})


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "migrations" in parts:
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imported_names(module: str, path: Path, tree: ast.AST) -> Iterator[str]:
    """Every dotted name an import statement of ``tree`` names (``from a import b`` names ``a`` and ``a.b``)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            yield target
            yield from (f"{target}.{alias.name}" for alias in node.names)


class House:
    """The project's modules, their sizes, the imports between them and the outside packages each imports."""

    def __init__(self) -> None:
        self.paths = _modules()
        self.trees = {m: ast.parse(p.read_text(encoding="utf-8")) for m, p in self.paths.items()}
        self.lines = {m: p.read_text(encoding="utf-8").count("\n") + 1 for m, p in self.paths.items()}
        self.imports: dict[str, set[str]] = defaultdict(set)
        self.outside: dict[str, set[str]] = defaultdict(set)
        for module, tree in self.trees.items():
            for name in _imported_names(module, self.paths[module], tree):
                self.outside[module].add(name.split(".")[0])
                while name and name not in self.paths:
                    name = name.rpartition(".")[0]
                if name and name != module:
                    self.imports[module].add(name)

    def cycles(self) -> list[frozenset[str]]:
        """Strongly connected sets of more than one module (Tarjan, iterative)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[frozenset[str]] = []
        counter = 0
        for start in self.paths:
            if start in index:
                continue
            work = [(start, iter(sorted(self.imports[start])))]
            index[start] = low[start] = counter
            counter += 1
            stack.append(start)
            on_stack.add(start)
            while work:
                node, children = work[-1]
                for child in children:
                    if child not in index:
                        index[child] = low[child] = counter
                        counter += 1
                        stack.append(child)
                        on_stack.add(child)
                        work.append((child, iter(sorted(self.imports[child]))))
                        break
                    if child in on_stack:
                        low[node] = min(low[node], index[child])
                else:
                    work.pop()
                    if work:
                        parent = work[-1][0]
                        low[parent] = min(low[parent], low[node])
                    if low[node] == index[node]:
                        members = set()
                        while True:
                            member = stack.pop()
                            on_stack.discard(member)
                            members.add(member)
                            if member == node:
                                break
                        if len(members) > 1:
                            found.append(frozenset(members))
        return found


@pytest.fixture(scope="module")
def house() -> House:
    return House()


def _in(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_no_import_cycles(house: House) -> None:
    cycles = [sorted(c) for c in house.cycles()]
    assert cycles == [], f"import cycles (counting imports inside functions): {cycles}"


def test_scheduler_and_cluster_never_import_the_web_face(house: House) -> None:
    upward = sorted((m, t) for m, targets in house.imports.items() for t in targets
                    if _in(m, "scheduler", "cluster") and _in(t, "portal"))
    assert upward == []


def test_only_the_web_face_imports_the_web_face(house: House) -> None:
    """Apps beside the scheduler (progress, notifications, audit, ...) reach the browser by announcing
    (scheduler.announce), as the loop does, never by importing portal."""
    upward = sorted((m, t) for m, targets in house.imports.items() for t in targets
                    if not _in(m, "portal") and _in(t, "portal"))
    assert upward == []


def test_the_job_side_package_needs_nothing_of_the_server(house: House) -> None:
    """gpusched/ runs inside jobs, in their image: the standard library and itself only."""
    wrong = sorted((m, t) for m, targets in house.imports.items() for t in targets
                   if _in(m, "gpusched") and not _in(t, "gpusched"))
    wrong += sorted((m, x) for m in house.paths if _in(m, "gpusched")
                    for x in house.outside[m] if x in WEB_FRAMEWORKS | set(PACKAGES) - {"gpusched"})
    assert wrong == []


def test_the_loop_uses_only_the_node_layer_of_cluster(house: House) -> None:
    wrong = sorted((m, t) for m, targets in house.imports.items() for t in targets
                   if _in(m, "scheduler") and _in(t, "cluster") and t not in CLUSTER_BELOW_THE_LOOP)
    assert wrong == [], "scheduler/ may import only " + ", ".join(sorted(CLUSTER_BELOW_THE_LOOP))


def test_the_node_layer_does_not_import_the_loop(house: House) -> None:
    wrong = sorted((m, t) for m in CLUSTER_BELOW_THE_LOOP for t in house.imports.get(m, ())
                   if not _in(t, *CLUSTER_BELOW_THE_LOOP))
    assert wrong == []


def test_core_and_simulator_stay_pure(house: House) -> None:
    impure = sorted((m, x) for m in house.paths if _in(m, "scheduler.core", "scheduler.sim")
                    for x in house.outside[m] if x in WEB_FRAMEWORKS | {"portal", "cluster"})
    impure += sorted((m, t) for m in house.paths if _in(m, "scheduler.core", "scheduler.sim")
                     for t in house.imports[m] if not _in(t, "scheduler.core", "scheduler.sim", "scheduler.perf"))
    assert impure == []


def test_the_node_agent_needs_no_server(house: House) -> None:
    """The agent runs on GPU nodes without Django or the server's code: only the protocol is shared
    (it reads and sends Celery messages as a client, so Celery itself is allowed), with the progress
    report's contract (cluster.progress_schema, pure: what a job may report, checked on both sides), the
    interactive sessions' contract (cluster.session_contract, stdlib only) and the sealing of their
    secrets (cluster.session_seal, with the cryptography package), the telemetry stream's
    (cluster.telemetry_stream, stdlib only: its key and entry format) and the per-node broker users'
    keys (cluster.broker_acl, stdlib only: which keys a node's consumer uses)."""
    wrong = sorted((m, x) for m in house.paths if _in(m, "cluster.agent")
                   for x in house.outside[m] if x in (WEB_FRAMEWORKS - {"celery"}) | {"portal", "scheduler"})
    wrong += sorted((m, t) for m in house.paths if _in(m, "cluster.agent")
                    for t in house.imports[m]
                    if not _in(t, "cluster.agent", "cluster.protocol", "cluster.progress_schema",
                               "cluster.protocol_versions", "cluster.message_signing", "cluster.session_contract", "cluster.session_seal",
                               "cluster.telemetry_stream", "cluster.broker_acl")
                    and t != "cluster")
    assert wrong == []


def test_modules_stay_small(house: House) -> None:
    large = sorted((m, n) for m, n in house.lines.items() if n > LINE_LIMIT)
    assert large == [], f"modules over {LINE_LIMIT} lines: split them along their sections"


def _writes_job_state(tree: ast.AST) -> list[int]:
    """Lines that write a job's state: ``<...Job.objects...>.update(state=...)`` or ``job.state = ...``."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("update", "bulk_update")
                and any(k.arg == "state" for k in node.keywords) and "Job.objects" in ast.unparse(node.func.value)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if (isinstance(target, ast.Attribute) and target.attr == "state"
                        and isinstance(target.value, ast.Name) and target.value.id == "job"):
                    lines.append(node.lineno)
    return sorted(lines)


def test_only_the_state_machine_writes_job_state(house: House) -> None:
    writers = sorted((m, line) for m, tree in house.trees.items() if m != "scheduler.transitions"
                     and not _in(m, "scheduler.core", "scheduler.sim") for line in _writes_job_state(tree))
    assert writers == [], "change a job's state through scheduler.transitions"


def test_the_state_check_finds_a_writer() -> None:
    """The check above can fail: it sees both forms of a write."""
    tree = ast.parse("Job.objects.filter(pk=1).update(state='RUNNING')\njob.state = 'PENDING'\n"
                     "Node.objects.filter(pk=1).update(state='UP')\n")
    assert _writes_job_state(tree) == [1, 2]


def test_the_graph_sees_imports_inside_functions() -> None:
    """A cycle hidden in a function-level import is still a cycle."""
    tree = ast.parse("def f():\n    from scheduler import loop\n    from . import snapshot\n")
    names = set(_imported_names("scheduler.triggers", ROOT / "scheduler" / "triggers.py", tree))
    assert {"scheduler.loop", "scheduler.snapshot"} <= names


def test_no_catch_all_module_names(house: House) -> None:
    vague = sorted(m for m in house.paths if m.rpartition(".")[2] in ("utils", "helpers", "common", "misc"))
    assert vague == []


# --- Tests mirror the tree ---------------------------------------------------------------------------------

#: Files with no behaviour of their own to test apart: package markers, app configs, settings, URL and
#: routing tables, entry points.
NO_BEHAVIOUR = frozenset({"__init__.py", "apps.py", "settings.py", "settings_test.py", "urls.py", "routing.py",
                          "asgi.py", "wsgi.py", "__main__.py"})

#: Modules without a test module at their mirrored path, and where they are tested instead.
TESTED_ELSEWHERE = {
    "cluster/management/commands/agent_token.py": "tests/adversarial/test_adv_access.py (agent tokens)",
    "cluster/management/commands/drain_node.py": "tests/cluster/test_drain.py",
    "cluster/models.py": "model declarations; every cluster test writes and reads them",
    "cluster/broker.py": "the Celery app; its logging hook: tests/cluster/test_task_log.py",
    "cluster/selectors.py": "nodes page and API: tests/portal/api/test_views_listing.py",
    "cluster/report_fields.py": "the reports' fields: tests/cluster/test_tasks.py (malformed reports, repeated exits)",
    "portal/access.py": "revocation: tests/adversarial/test_adv_access.py",
    "portal/admin.py": "admin declarations: tests/scheduler/test_admin.py",
    "portal/api/errors.py": "error bodies: tests/portal/api/test_views.py",
    "portal/api/pagination.py": "paging: tests/portal/api/test_views_listing.py",
    "portal/api/parsers.py": "request bodies: tests/portal/api/test_views.py, tests/adversarial/test_adv_fuzz.py",
    "portal/cli/progress.py": "gpusched show's Progress section: tests/portal/cli/test_commands.py",
    "portal/cli/logs.py": "tests/portal/cli/test_commands.py (real API), tests/portal/cli/test_client.py (paging)",
    "portal/context_processors.py": "template context: tests/portal/test_views.py",
    "portal/dashboard/forms.py": "tests/portal/dashboard/test_simulation.py",
    "portal/dashboard/job_page.py": "tests/portal/test_consumers.py, tests/scheduler/test_elastic.py",
    "portal/dashboard/metrics_state.py": "tests/portal/test_metrics.py, tests/portal/dashboard/test_views.py",
    "portal/dashboard/models.py": "model declarations: tests/portal/dashboard/test_simulation.py",
    "portal/dashboard/report.py": "downloads: tests/portal/dashboard/test_simulation.py",
    "portal/dashboard/staticfinders.py": "plotly.js served: tests/portal/dashboard/test_views.py",
    "portal/dashboard/tasks.py": "tests/portal/dashboard/test_simulation.py",
    "portal/forms.py": "the submission form: tests/portal/test_views.py",
    "portal/login.py": "tests/adversarial/test_adv_access.py (login rate limit)",
    "portal/login_throttle.py": "tests/adversarial/test_adv_access.py (login rate limit)",
    "portal/management/commands/clear_runtime_keys.py": "tests/portal/test_runtime_keys.py",
    "portal/management/commands/ensure_database.py": "tests/portal/test_database_setup.py (run as a process)",
    "portal/management/commands/revoke_access.py": "tests/adversarial/test_adv_access.py",
    "portal/models.py": "API tokens: tests/portal/api/test_authentication.py",
    "audit/services.py": "tests/audit/test_models.py (record, changed_fields), tests/audit/test_admin.py",
    "jobprogress/models.py": "model declarations: tests/jobprogress/test_services.py",
    "jobprogress/selectors.py": "tests/jobprogress/test_services.py (job_progress)",
    "notifications/forms.py": "webhook URLs refused by name: tests/notifications/test_views.py",
    "notifications/models.py": "model declarations: tests/notifications/test_services.py",
    "notifications/tasks.py": "dispatch and retries: tests/notifications/test_services.py, test_hooks.py",
    "scheduler/applied.py": "tests/scheduler/test_apply.py (skips and savepoints)",
    "scheduler/cancel_kills.py": "tests/scheduler/test_loop.py, tests/scheduler/test_apply_atomic.py",
    "scheduler/coordination.py": "the Redis client of tests/scheduler/test_loop_lock.py and test_triggers.py",
    "scheduler/identity_admin.py": "superusers change, staff look: tests/portal/test_portal_identity.py, test_portal_images.py",
    "scheduler/models.py": "model declarations; every scheduler test writes and reads them",
    "scheduler/selectors.py": "tests/scheduler/test_quotas_enforced.py, tests/portal/api/test_views_listing.py",
    "scheduler/starts_and_preemptions.py": "tests/scheduler/test_apply.py",
    "scheduler/tasks.py": "a Celery adapter over scheduler.loop: tests/e2e",
    "scheduler/core/elastic.py": "threads per plan: tests/scheduler/test_elastic.py, tests/scheduler/sim/test_morphling.py",
    "scheduler/core/model.py": "the snapshot's dataclasses; every core and simulator test builds them",
    "scheduler/core/perf/catalog.py": "the model catalogue: tests/scheduler/core/perf/test_fit.py, test_validate.py",
    "scheduler/core/policies/reconfig.py": "plan pools: tests/scheduler/core/policies/test_rubick.py, test_fixed_plan.py, "
                                           "test_fitgpp_shrink.py",
    "scheduler/core/policies/rubick_growth.py": "tests/scheduler/core/policies/test_rubick.py, test_rubick_properties.py",
    "scheduler/core/policies/rubick_reclaim.py": "tests/scheduler/core/policies/test_rubick.py, test_rubick_properties.py",
    "scheduler/sim/cluster.py": "cluster shapes: tests/scheduler/sim/test_cli.py (--cluster), test_engine.py",
    "scheduler/sim/jobs_csv.py": "tests/scheduler/sim/test_engine_fair_share.py (--jobs-csv)",
    "scheduler/sim/reconfig_metrics.py": "tests/scheduler/sim/test_morphling.py (the comparison's figures)",
    "scheduler/sim/report.py": "tests/scheduler/sim/test_cli.py (one self-contained HTML file)",
    "scheduler/sim/runner.py": "tests/scheduler/sim/test_engine_properties.py, test_sweep.py, test_cli.py",
    "scheduler/sim/table.py": "tests/scheduler/sim/test_cli.py (the side-by-side table)",
    "scheduler/sim/workloads/grace.py": "seeded grace periods: tests/scheduler/sim/workloads/test_philly.py",
    "scheduler/sim/workloads/types.py": "the workload's dataclasses; every simulator test builds them",
}


def _behaviour_modules() -> Iterator[str]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "/migrations/" in relative or path.name in NO_BEHAVIOUR:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(tree)):
                yield relative


def _mirrored_test(relative: str) -> Path:
    folder, _, name = relative.rpartition("/")
    return ROOT / "tests" / folder / f"test_{name}"


def test_every_module_with_behaviour_has_its_test_at_the_mirrored_path() -> None:
    missing = sorted(m for m in _behaviour_modules() if not _mirrored_test(m).is_file() and m not in TESTED_ELSEWHERE)
    assert missing == [], "add tests/<path>/test_<module>.py, or say in TESTED_ELSEWHERE where it is tested"


def test_the_exceptions_name_modules_without_a_mirrored_test() -> None:
    """An exception for a module that has its test now, or no longer exists, is removed."""
    stale = sorted(m for m in TESTED_ELSEWHERE if not (ROOT / m).is_file() or _mirrored_test(m).is_file())
    assert stale == []
