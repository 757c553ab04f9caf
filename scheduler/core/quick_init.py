"""A quicker constructor for the core's frozen, slotted dataclasses.

The constructor that ``dataclasses`` generates for a frozen class stores every field through
``object.__setattr__`` (the class forbids plain assignment), about three times the cost of a
plain store. The core builds such values by the tens of thousands per cycle at 5,000 nodes
(a ``JobSpec`` per pending and running job, a decision per job), so the classes that are built
most get :func:`quick_init`'s constructor instead.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import TypeVar

T = TypeVar("T", bound=type)


def quick_init(cls: T) -> T:
    """Give ``cls`` (a frozen dataclass with ``slots=True``, no ``default_factory`` and no
    ``__post_init__``) an ``__init__`` that stores each field through its slot's descriptor: the
    same parameters, defaults and stored values as the generated one; instances stay frozen,
    equal, hashable and picklable as before."""
    params = fields(cls)
    if any(f.default_factory is not MISSING for f in params) or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: quick_init handles neither default_factory nor __post_init__")
    names = [f.name for f in params]
    scope = {f"_set_{f.name}": cls.__dict__[f.name].__set__ for f in params}
    scope.update({f"_default_{f.name}": f.default for f in params if f.default is not MISSING})
    signature = ", ".join(n if f"_default_{n}" not in scope else f"{n}=_default_{n}" for n in names)
    body = "".join(f"    _set_{n}(self, {n})\n" for n in names)
    code: dict[str, object] = {}
    exec(f"def __init__(self, {signature}):\n{body}", scope, code)  # as dataclasses builds its own
    init = code["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"  # type: ignore[attr-defined]
    cls.__init__ = init  # type: ignore[misc]
    return cls
