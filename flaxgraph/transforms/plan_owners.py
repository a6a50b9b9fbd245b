"""Who keeps a fast-path plan alive: the objects it was made for, not the transform.

See ``docs/design.md``, "The fast path" ("Who keeps a plan alive").
Source: Equinox's ``filter_jit`` cache, keyed weakly by the function.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from flaxgraph.graphlib.registry import NODE, REGISTRY, VARIABLE
from flaxgraph.pytreelib.objects import Pytree
from flaxgraph.transforms.plan import CheckKind, Plan
from flaxgraph.variablelib.variable import Variable

PER_OBJECT = 8  # the most plans one object holds (the most recent ones)


class _Slot(Protocol):
    """A slot's descriptor (``Pytree._obj_plans``, ``Variable._var_plans``)."""

    def __get__(self, obj: object, objtype: type | None = None) -> list[Plan]: ...

    def __set__(self, obj: object, value: list[Plan]) -> None: ...


_PYTREE_PLANS: _Slot = Pytree._obj_plans  # type: ignore[assignment]
_VARIABLE_PLANS: _Slot = Variable._var_plans  # type: ignore[attr-defined]


def roots(plan: Plan) -> Iterator[tuple[object, _Slot | None]]:
    """The objects ``plan`` checks by identity, once each, with their plan slot (``None``: none)."""
    seen: set[int] = set()
    for check in plan.arg_checks:
        value = check.expected
        if check.kind is CheckKind.IS and id(value) not in seen:
            kind = REGISTRY.kind_of(value)
            if kind is VARIABLE:
                seen.add(id(value))
                yield value, _VARIABLE_PLANS
            elif kind is NODE:
                seen.add(id(value))
                yield value, _PYTREE_PLANS if isinstance(value, Pytree) else None


def _held(slot: _Slot, obj: object) -> list[Plan] | None:
    try:
        return slot.__get__(obj)
    except AttributeError:  # unset: the object holds no plan yet
        return None


def can_own(plan: Plan) -> bool:
    """Whether every root of ``plan`` can hold it (and it has at least one)."""
    found = False
    for _, slot in roots(plan):
        if slot is None:
            return False
        found = True
    return found


def own(plan: Plan) -> None:
    """Makes every root of ``plan`` hold it; a root over ``PER_OBJECT`` plans drops its oldest."""
    for obj, slot in roots(plan):
        assert slot is not None  # (can_own)
        held = _held(slot, obj)
        if held is None:
            held = []
            slot.__set__(obj, held)
        if not any(p is plan for p in held):
            held.append(plan)
            if len(held) > PER_OBJECT:
                del held[0]


def disown(plan: Plan) -> None:
    """Makes the roots of ``plan`` let go of it (its cache dropped it)."""
    for obj, slot in roots(plan):
        held = _held(slot, obj) if slot is not None else None
        if held:
            held[:] = [p for p in held if p is not plan]
