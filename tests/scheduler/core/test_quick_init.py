"""scheduler.core.quick_init: the quicker constructor builds exactly what the dataclass's own would."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from scheduler.core.decisions import Pend, Preempt, Reason, Reconfigure, Start
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, Placement
from scheduler.core.quick_init import quick_init


def _twin(cls: type) -> type:
    """The same fields as ``cls``, with the constructor dataclasses generates."""
    spec = [(f.name, f.type, dataclasses.field(default=f.default, compare=f.compare))
            if f.default is not dataclasses.MISSING else (f.name, f.type) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(f"Twin{cls.__name__}", spec, frozen=True, slots=True)


WHERE = Placement((("n1", 2),))

CASES = [
    (Start, ("j1", WHERE), {}),
    (Start, ("j1", WHERE, Reason.GROWN, "m", "dp2", 4.0), {}),
    (Start, ("j1",), {"placement": WHERE, "cpus": 2.0, "plan": "tp2"}),
    (Reconfigure, ("j1", WHERE, "tp2"), {"for_job": "te9"}),
    (Preempt, ("v1", "te1"), {}),
    (Preempt, ("v1", None, Reason.PREEMPTED_FOR_TE, "m"), {}),
    (Pend, ("p1", Reason.RESOURCES), {}),
    (Pend, (), {"job_id": "p1", "reason": Reason.RESERVED, "message": "why", "expected_at": 12.5}),
    (JobSpec, ("j1", JobClass.BE, 2, 10.0), {}),
    (JobSpec, ("j1", JobClass.TE, 1, 0.0, 4.0, 8.0, 30.0, 5, "u", "t", 600.0), {"array_id": "7", "array_limit": 2}),
    (JobSpec, (), {"id": "j", "job_class": JobClass.BE, "num_gpus": 8, "submit_time": 1.0,
                   "excluded_nodes": frozenset({"n2"}), "allowed_plans": ("dp", "tp2"), "min_gpus": 4}),
    (NodeCapacity, ("n1", 8), {"cpus": 64.0}),
    (Placement, ((("n1", 2), ("n2", 1)),), {}),
]


@pytest.mark.parametrize("cls,args,kwargs", CASES)
def test_a_value_holds_what_the_dataclass_constructor_would(cls, args, kwargs):
    made, twin = cls(*args, **kwargs), _twin(cls)(*args, **kwargs)
    assert dataclasses.astuple(made) == dataclasses.astuple(twin)
    assert made == cls(*args, **kwargs) and hash(made) == hash(cls(*args, **kwargs))
    assert pickle.loads(pickle.dumps(made)) == made
    changed = dataclasses.replace(made, **{dataclasses.fields(cls)[0].name: "other"})
    assert dataclasses.astuple(changed)[1:] == dataclasses.astuple(made)[1:]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, dataclasses.fields(cls)[0].name, "other")


def test_wrong_arguments_are_refused_as_before():
    with pytest.raises(TypeError, match="submit_time"):
        JobSpec("j1", JobClass.BE, 1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected"):
        NodeCapacity("n1", 8, colour="red")  # type: ignore[call-arg]


def test_classes_it_cannot_build_are_refused():
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithFactory:
        items: list = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True)
    class WithPostInit:
        n: int

        def __post_init__(self) -> None:
            pass

    for cls in (WithFactory, WithPostInit):
        with pytest.raises(TypeError, match="quick_init"):
            quick_init(cls)
