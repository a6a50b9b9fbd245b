"""Who keeps a fast-path plan alive: the objects it was made for, not the transform.

A plan (``plan.py``) holds the objects of one call (the model, its sub-modules and
Variables) so that a repeated call can read and check them without a graph walk. If
the transformed function held its plans, every model ever passed to it would stay
alive, arrays included, until newer plans pushed it out of the cache: ``del model``
would free nothing. So ownership goes the other way:

* the objects the plan checks by identity (a call's argument objects, its *roots*)
  each hold the plan, in a slot of their own (``Pytree._obj_plans``,
  ``Variable._var_plans``), which the graph, ``copy``, ``pickle`` and display never
  see;
* the function's ``PlanCache`` (``fastpath.py``) holds each plan through a
  ``weakref``, as Equinox's caches hold their keys.

A plan and its roots then form a reference cycle that nothing else reaches once the
user drops the roots: the garbage collector frees the model, the plan and every
array of the model together (at its next collection; ``gc.collect()`` runs one
now). A plan whose roots cannot hold it (an object of a registered node type
without such a slot) is held by the cache as before. An object holds at most
``PER_OBJECT`` plans, the most recent ones, so a model passed to a new ``nnx.jit``
on every step does not accumulate their compiled functions; the plans of the
functions it is used with again are made again once.

A plan made for several roots (``step(model, optimizer, batch)``) lives as long as
any of them holds it, and keeps the others alive that long: dropping the model
while keeping the optimizer frees the model when the optimizer goes, or when
``PER_OBJECT`` newer plans of the optimizer (or ``PlanCache.size`` newer plans of
the function) have replaced this one.

Source: ``docs/design.md``, "The fast path"; Equinox's ``filter_jit`` cache, keyed
weakly by the function.
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
    """The objects ``plan`` checks by identity (its call's argument objects), each
    once, with the slot in which each holds its plans (``None``: it has none)."""
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
    """Makes every root of ``plan`` hold it (see the module docstring); a root holding
    more than ``PER_OBJECT`` plans lets go of its oldest."""
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
