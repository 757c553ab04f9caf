"""What a node remembers of the launches it saw: newer attempts only, and no repeat of a launch of a job it has
forgotten (the floor under signed times), across a restart."""

from __future__ import annotations

from cluster.agent.launch_memory import LaunchMemory


def test_only_a_newer_attempt_of_a_remembered_job_is_new() -> None:
    memory = LaunchMemory()
    memory.remember("7", 2, 100.0)
    assert memory.refusal("7", 2, 150.0) == "attempt 2 was already seen here"
    assert memory.refusal("7", 1, 150.0) is not None
    assert memory.refusal("7", 3, 150.0) is None and memory.refusal("8", 1, 50.0) is None


def test_a_forgotten_jobs_launch_repeated_is_refused_and_one_re_signed_later_is_not() -> None:
    memory = LaunchMemory(limit=2)
    for job, at in (("a", 100.0), ("b", 200.0), ("c", 300.0)):
        memory.remember(job, 1, at)
    assert list(memory.newest) == ["b", "c"] and memory.floor == 100.0
    assert "a repeat" in memory.refusal("a", 1, 100.0)  # replayed from the broker, or a slow queue
    assert "a repeat" in memory.refusal("z", 1, 99.0)
    assert memory.refusal("a", 1, 350.0) is None  # the tick re-sent it, signed anew
    assert memory.refusal("a", 1, None) is None  # unsigned (a development stack): no time to compare


def test_the_memory_and_its_floor_survive_a_restart_and_an_older_agents_state_still_reads() -> None:
    memory = LaunchMemory(limit=1)
    memory.remember("a", 1, 100.0)
    memory.remember("b", 3, 200.0)
    again = LaunchMemory(limit=1)
    again.restore(memory.to_state())
    assert (again.newest, again.signed, again.floor) == ({"b": 3}, {"b": 200.0}, 100.0)
    older = LaunchMemory()
    older.restore({"newest": {"a": 2, 5: 1}})  # before signed times were kept
    assert older.newest == {"a": 2, "5": 1} and older.floor is None and older.refusal("a", 2, 1.0) is not None


def test_clearing_forgets_the_jobs_but_keeps_the_floor() -> None:
    memory = LaunchMemory(limit=1)
    memory.remember("a", 1, 100.0)
    memory.remember("b", 1, 200.0)
    memory.clear()
    assert memory.newest == {} and memory.signed == {} and memory.floor == 100.0
