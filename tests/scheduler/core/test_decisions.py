"""Decisions are frozen values (that their quicker constructor builds exactly what the dataclass's
own would is checked with the other classes that use it, in test_quick_init.py)."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.core.decisions import Pend, Preempt, Reason, Reconfigure, Start
from scheduler.core.model import Placement

WHERE = Placement((("n1", 2),))


@pytest.mark.parametrize("cls", [Start, Reconfigure, Preempt, Pend])
def test_decisions_stay_frozen(cls):
    made = {Start: lambda: Start("j", WHERE), Reconfigure: lambda: Reconfigure("j", WHERE, "p"),
            Preempt: lambda: Preempt("v", "t"), Pend: lambda: Pend("p", Reason.RESOURCES)}[cls]()
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.job_id = "other"  # type: ignore[misc]


def test_wrong_arguments_are_refused_as_before():
    with pytest.raises(TypeError, match="reason"):
        Pend("p1")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Pend("p1", Reason.RESOURCES, "m", 1.0, "extra")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected"):
        Preempt("v1", "t", colour="red")  # type: ignore[call-arg]
