"""scheduler/pending_reasons.py: reasons written only where they changed; many of them written by a
thread of their own while the apply step writes the rest (``write_pends_beside``)."""

from __future__ import annotations

import threading

import pytest
from django.db import transaction
from django.utils import timezone

from scheduler import apply, loop, pending_reasons, snapshot
from scheduler.core.decisions import Pend, Reason, Start
from scheduler.core.model import Placement
from scheduler.models import Job, JobState
from tests.support.live_helpers import make_node, make_user, submit


def _reasons(jobs: list[Job]) -> list[tuple[str, str]]:
    return [tuple(r) for r in Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk")
            .values_list("pending_reason", "pending_message")]


@pytest.fixture
def writer_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the threads that ran ``write_pends``."""
    names: list[str] = []
    original = pending_reasons.write_pends

    def recording(pends):  # noqa: ANN001, ANN202
        names.append(threading.current_thread().name)
        return original(pends)

    monkeypatch.setattr(pending_reasons, "write_pends", recording)
    return names


@pytest.mark.django_db
def test_few_reasons_are_written_in_the_caller_s_transaction_when_it_finishes(writer_threads) -> None:
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(3)]
    with transaction.atomic():
        finish = pending_reasons.write_pends_beside({j.pk: ("Resources", f"waits {i}") for i, j in enumerate(jobs)})
        assert writer_threads == [] and _reasons(jobs) == [("", "")] * 3  # nothing written before finish
        assert finish() == 3
    assert writer_threads == [threading.current_thread().name]
    assert _reasons(jobs) == [("Resources", "waits 0"), ("Resources", "waits 1"), ("Resources", "waits 2")]


@pytest.mark.django_db
def test_inside_an_enclosing_transaction_many_reasons_stay_in_it(writer_threads, monkeypatch) -> None:  # noqa: ANN001
    # A test's transaction (or any caller's) may hold rows another connection cannot see yet.
    monkeypatch.setattr(pending_reasons, "BESIDE_FROM", 2)
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(3)]
    with transaction.atomic():
        assert pending_reasons.write_pends_beside({j.pk: ("Resources", "waits") for j in jobs})() == 3
    assert writer_threads == [threading.current_thread().name]


@pytest.mark.django_db(transaction=True)
def test_many_reasons_are_written_beside_the_cycle_s_starts(writer_threads, monkeypatch, sent) -> None:  # noqa: ANN001
    monkeypatch.setattr(pending_reasons, "BESIDE_FROM", 2)
    alice = make_user("alice")
    make_node("n1", 1)
    started, *waiting = [submit(alice, f"j{i}") for i in range(4)]
    cycle = snapshot.build(timezone.now())
    Job.objects.filter(pk=waiting[-1].pk).update(state=JobState.CANCELLED)  # left PENDING after the read
    decisions = [Start(str(started.pk), Placement.of({"n1": 1}))] + [
        Pend(str(j.pk), Reason.RESOURCES, f"no GPU for {j.name}") for j in waiting]
    with transaction.atomic():
        applied = apply.apply_decisions(decisions, cycle)
    assert writer_threads == ["pending-reasons"]
    assert applied.started == [started.pk] and applied.pend_updates == 2  # the cancelled job is left alone
    assert _reasons(waiting) == [("Resources", "no GPU for j1"), ("Resources", "no GPU for j2"), ("", "")]
    started.refresh_from_db()
    assert started.state == JobState.STARTING


@pytest.mark.django_db(transaction=True)
def test_what_stops_the_writer_thread_reaches_the_caller(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(pending_reasons, "BESIDE_FROM", 1)

    def broken(pends):  # noqa: ANN001, ANN202
        raise RuntimeError("writer failed")

    monkeypatch.setattr(pending_reasons, "write_pends", broken)
    with transaction.atomic():
        finish = pending_reasons.write_pends_beside({1: ("Resources", "waits")})
        with pytest.raises(RuntimeError, match="writer failed"):
            finish()


@pytest.mark.django_db(transaction=True)
def test_a_cycle_through_the_loop_writes_its_reasons_beside(writer_threads, monkeypatch, sent) -> None:  # noqa: ANN001
    monkeypatch.setattr(pending_reasons, "BESIDE_FROM", 2)
    alice = make_user("alice")
    make_node("n1", 1)
    jobs = [submit(alice, f"j{i}") for i in range(4)]
    report = loop.run_cycle()
    assert len(report.applied.started) == 1 and report.applied.pend_updates == 3
    assert writer_threads == ["pending-reasons"]
    assert sum(1 for reason, _ in _reasons(jobs) if reason) == 3


def test_the_expected_end_of_a_wait_is_written_as_a_time_after_the_message_cut_to_length() -> None:
    from scheduler.models import MESSAGE_LENGTH

    at = 1_796_000_000.2  # 2026-11-30 00:53:20.2 UTC: shown rounded up, never earlier than it is
    assert pending_reasons.clock_text(at) == "2026-11-30 00:53:21 UTC"
    plain = Pend("1", Reason.RESOURCES, "x" * (MESSAGE_LENGTH + 10))
    assert pending_reasons.stored_message(plain, at) == "x" * MESSAGE_LENGTH
    waiting = Pend("1", Reason.WAITING_FOR_PREEMPTION, "w" * (MESSAGE_LENGTH + 10), expected_at=at)
    before, after = (pending_reasons.stored_message(waiting, now) for now in (at - 30, at))
    assert before.endswith("w; expected by 2026-11-30 00:53:21 UTC") and len(before) == MESSAGE_LENGTH
    assert after.endswith("w; expected any moment (grace period over)") and len(after) == MESSAGE_LENGTH
    same_wait_later = pending_reasons.stored_message(waiting, at - 5)
    assert same_wait_later == before  # no countdown: the row is not rewritten while the job waits


@pytest.mark.django_db(transaction=True)
def test_reasons_written_in_batches_each_committed_are_announced_once(monkeypatch) -> None:  # noqa: ANN001
    from scheduler import announce

    monkeypatch.setattr(pending_reasons, "PEND_BATCH", 2)
    announced: list[list[int]] = []
    monkeypatch.setattr(announce, "jobs_changed", lambda ids: announced.append(sorted(ids)))
    alice = make_user("alice")
    jobs = [submit(alice, f"j{i}") for i in range(5)]
    assert pending_reasons.write_pends({j.pk: ("Resources", "waits") for j in jobs}) == 5  # three batches
    assert announced == [sorted(j.pk for j in jobs)]
    assert _reasons(jobs) == [("Resources", "waits")] * 5


@pytest.mark.django_db
def test_a_te_job_is_told_the_end_of_its_victims_grace_from_their_notice_as_stamped(sent) -> None:  # noqa: ANN001
    """The policy counts the grace from the cycle's instant; the notices are stamped later, when
    written, and the next cycle counts from them: the first message already says what it will."""
    from datetime import timedelta

    from scheduler.core.policy import make_policy
    from scheduler.models import Attempt

    make_node("n1", 1)
    alice = make_user("alice")
    victim = submit(alice, "be", grace_period=60)
    with transaction.atomic():
        first = snapshot.build(timezone.now())
        apply.apply_decisions(make_policy("fitgpp").decide(first.snapshot, first.now.timestamp()), first)
    te = submit(alice, "te", job_class="TE")
    cycle = snapshot.build(timezone.now())
    decisions = make_policy("fitgpp").decide(cycle.snapshot, cycle.now.timestamp())
    stamped = cycle.now + timedelta(seconds=5)  # a large cycle's snapshot and policy take seconds
    with transaction.atomic():
        assert apply.apply_decisions(decisions, cycle, at=stamped).preempted == [victim.pk]
    assert Attempt.objects.get(job=victim).notice_at == stamped
    te.refresh_from_db()
    assert te.pending_message == (f"waiting for preempted job {victim.pk} to vacate n1; "
                                  f"expected by {pending_reasons.clock_text(stamped.timestamp() + 60)}")
