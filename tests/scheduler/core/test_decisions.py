"""Decisions are frozen values; their quicker constructor builds exactly what
the dataclass's own would."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from scheduler.core.decisions import Pend, Preempt, Reason, Reconfigure, Start
from scheduler.core.model import Placement

WHERE = Placement((("n1", 2),))


def _twin(cls: type) -> type:
    """The same fields as ``cls``, with the constructor dataclasses generates."""
    spec = [(f.name, f.type, dataclasses.field(default=f.default)) if f.default is not dataclasses.MISSING
            else (f.name, f.type) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(f"Twin{cls.__name__}", spec, frozen=True, slots=True)


CASES = [
    (Start, ("j1", WHERE), {}),
    (Start, ("j1", WHERE, Reason.GROWN, "m", "dp2", 4.0), {}),
    (Start, ("j1",), {"placement": WHERE, "cpus": 2.0, "plan": "tp2"}),
    (Reconfigure, ("j1", WHERE, "tp2"), {"for_job": "te9"}),
    (Preempt, ("v1", "te1"), {}),
    (Preempt, ("v1", None, Reason.PREEMPTED_FOR_TE, "m"), {}),
    (Pend, ("p1", Reason.RESOURCES), {}),
    (Pend, (), {"job_id": "p1", "reason": Reason.RESERVED, "message": "why"}),
]


@pytest.mark.parametrize("cls,args,kwargs", CASES)
def test_a_decision_holds_what_the_dataclass_constructor_would(cls, args, kwargs):
    made, twin = cls(*args, **kwargs), _twin(cls)(*args, **kwargs)
    assert dataclasses.astuple(made) == dataclasses.astuple(twin)
    assert made == cls(*args, **kwargs) and hash(made) == hash(cls(*args, **kwargs))
    assert pickle.loads(pickle.dumps(made)) == made
    assert dataclasses.replace(made, message="changed").message == "changed"


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
