"""Dependency texts parse to clauses, evaluate against job outcomes as Slurm's do, and cycles are found."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.dependencies import (
    MAX_DEPENDENCY_JOBS,
    Dependency,
    DependencyError,
    DependencyKind,
    Outcome,
    Status,
    awaited,
    find_cycle,
    job_ids,
    never_message,
    parse,
    render,
    status,
    waiting_message,
)

OK, NOT, WAIT = Outcome.OK, Outcome.NOT_OK, Outcome.WAITING


def test_parse_comma_joined_clauses_with_colon_joined_ids():
    clauses = parse(" afterok:12:13 , AfterAny:14,afternotok:3_2")
    assert clauses == (
        Dependency(DependencyKind.AFTEROK, ("12", "13")),
        Dependency(DependencyKind.AFTERANY, ("14",)),
        Dependency(DependencyKind.AFTERNOTOK, ("3_2",)),
    )
    assert render(clauses) == "afterok:12:13,afterany:14,afternotok:3_2"
    assert parse(render(clauses)) == clauses
    assert job_ids(clauses) == {"12", "13", "14", "3_2"}


def test_blank_is_no_dependency_and_repeated_ids_count_once():
    assert parse("") == () and parse("   ") == ()
    assert parse("afterok:5:5") == (Dependency(DependencyKind.AFTEROK, ("5",)),)


@pytest.mark.parametrize("text, fragment", [
    ("after:1", "unknown dependency type"),
    ("singleton", "unknown dependency type"),
    ("afterok", "needs job ids"),
    ("afterok:", "needs job ids"),
    ("afterok:1::2", "needs job ids"),
    ("afterok:1,", "unknown dependency type"),
    ("afterok:1;rm -rf /", "is not one"),
    ("afterok:<script>", "is not one"),
    ("afterok:" + "9" * 65, "is not one"),
    ("afterok:１２", "is not one"),
    ("afterok:" + ":".join(str(i) for i in range(MAX_DEPENDENCY_JOBS + 1)), f"at most {MAX_DEPENDENCY_JOBS}"),
])
def test_hostile_or_malformed_text_is_refused_with_a_reason(text, fragment):
    with pytest.raises(DependencyError, match=fragment):
        parse(text)


@pytest.mark.parametrize("text, outcomes, expected", [
    ("afterok:1:2", {"1": OK, "2": OK}, Status.SATISFIED),
    ("afterok:1:2", {"1": OK, "2": WAIT}, Status.WAITING),
    ("afterok:1:2", {"1": NOT, "2": WAIT}, Status.NEVER),
    ("afternotok:1", {"1": NOT}, Status.SATISFIED),
    ("afternotok:1", {"1": OK}, Status.NEVER),
    ("afternotok:1", {"1": WAIT}, Status.WAITING),
    ("afterany:1:2", {"1": OK, "2": NOT}, Status.SATISFIED),
    ("afterany:1", {"1": WAIT}, Status.WAITING),
    ("afterany:1", {}, Status.SATISFIED),  # a job no longer known has ended
    ("afterok:1", {}, Status.NEVER),
    ("afterok:1,afterany:2", {"1": OK, "2": WAIT}, Status.WAITING),
    ("afterok:1,afterany:2", {"1": NOT, "2": WAIT}, Status.NEVER),
    ("", {}, Status.SATISFIED),
])
def test_status_needs_every_clause(text, outcomes, expected):
    assert status(parse(text), outcomes) is expected


def test_messages_name_the_jobs_awaited_and_the_clause_that_failed():
    clauses = parse("afterok:2:10,afterany:3")
    assert waiting_message(clauses, {"2": WAIT, "10": WAIT, "3": OK}) == "waiting for jobs 2, 10 to end"
    assert waiting_message(clauses, {"2": OK, "10": OK, "3": WAIT}) == "waiting for job 3 to end"
    assert never_message(clauses, {"2": NOT, "10": OK, "3": OK}) == "afterok:2:10 can no longer be satisfied"


def test_find_cycle_reports_the_loop():
    assert find_cycle({"a": ["b"], "b": ["c"], "c": []}) is None
    cycle = find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]})
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert find_cycle({"x": ["x"]}) == ["x", "x"]
    assert find_cycle({"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}) is None  # a diamond is no cycle


def test_find_cycle_handles_a_chain_deeper_than_the_recursion_limit():
    chain = {str(i): [str(i + 1)] for i in range(5000)}
    assert find_cycle(chain) is None
    chain["5000"] = ["0"]
    assert len(find_cycle(chain)) == 5002


@settings(deadline=None)  # a shared machine may be slow; the test asserts outcomes, not time
@given(st.integers(2, 12).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30))))
def test_only_edges_back_in_time_can_close_a_cycle(case):
    n, pairs = case
    dag: dict[str, list[str]] = {str(i): [] for i in range(n)}
    for a, b in pairs:
        if a > b:
            dag[str(a)].append(str(b))  # a job waits only for earlier ones: acyclic
    assert find_cycle(dag) is None
    a, b = max(pairs, default=(1, 0))
    if a > b:
        dag[str(a)].append(str(b))
        dag[str(b)].append(str(a))  # and now the earlier one waits for the later one
        cycle = find_cycle(dag)
        assert cycle is not None and cycle[0] == cycle[-1]
        assert all(cycle[k + 1] in dag[cycle[k]] for k in range(len(cycle) - 1))


def test_awaited_cuts_each_clause_to_the_jobs_that_have_not_ended():
    clauses = parse("afterok:1:2,afterany:3")
    assert awaited(clauses, {"1": OK, "2": WAIT, "3": WAIT}) == (
        Dependency(DependencyKind.AFTEROK, ("2",)), Dependency(DependencyKind.AFTERANY, ("3",)))
    assert awaited(clauses, {"1": OK, "2": WAIT, "3": NOT}) == (Dependency(DependencyKind.AFTEROK, ("2",)),)
    # A forecast assumes success: an afternotok still waiting is never lifted there.
    assert awaited(parse("afterok:1,afternotok:2"), {"1": WAIT, "2": WAIT}) is None
    assert awaited(parse("afternotok:2"), {"2": NOT}) == ()
