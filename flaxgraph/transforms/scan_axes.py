"""The ``Carry`` marker and the checks of ``scan``'s ``in_axes``/``out_axes``, before any trace.

Source: Flax NNX 0.12 ``nnx.scan`` (``Carry``; its checks, whose error phrases are kept).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from flaxgraph.transforms.lift_types import StateAxes


class _CarryMarker:
    """The ``Carry`` marker of ``scan``'s ``in_axes``/``out_axes``."""

    _instance: _CarryMarker | None = None

    def __new__(cls) -> _CarryMarker:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "Carry"

    def __reduce__(self) -> Any:
        return (_CarryMarker, ())


Carry: object = _CarryMarker()
"""Marks the carried argument/output (or sub-state, inside ``StateAxes``) of ``scan``."""


def _entries(axes: object) -> list[tuple[str, Any]]:
    """The top-level entries of ``axes`` with their paths (``[1]``), or ``axes`` itself."""
    if isinstance(axes, (tuple, list)):
        return [(f"[{i}]", a) for i, a in enumerate(axes)]
    return [("", axes)]


def _nested_carry(axes: object, path: str = "") -> str | None:
    """The path of a ``Carry`` nested below the top level of ``axes`` (None if none)."""
    if isinstance(axes, (tuple, list)):
        for i, a in enumerate(axes):
            if isinstance(a, (tuple, list, dict)) and (found := _nested_carry(a, f"{path}[{i}]")):
                return found
            if path and a is Carry:
                return f"{path}[{i}]"
    elif isinstance(axes, dict):
        for k, a in axes.items():
            if a is Carry:
                return f"{path}[{k!r}]"
            if found := _nested_carry(a, f"{path}[{k!r}]"):
                return found
    return None


def _carry_count(axes: object, name: str) -> int:
    nested = _nested_carry(axes)
    if nested is not None:
        raise ValueError(
            f"Carry must be a top-level argument, it cannot be nested: {name}{nested} is "
            f"nnx.Carry (got {name}={axes!r}).\nFix: mark the whole argument (or output) as "
            f"nnx.Carry in {name}; to carry part of an object use "
            "nnx.StateAxes({filter: nnx.Carry}) as its entry."
        )
    count = sum(1 for _, a in _entries(axes) if a is Carry)
    if count > 1:
        paths = [f"{name}{p}" for p, a in _entries(axes) if a is Carry]
        raise ValueError(
            f"Found multiple Carry definitions in {name}: {', '.join(paths)} (got "
            f"{name}={axes!r}); scan has one carry.\nFix: put the carried values in one "
            "argument (a tuple or an object) and mark only it as nnx.Carry."
        )
    return count


def validate_scan_axes(in_axes: object, out_axes: object) -> None:
    """Checks ``scan``'s ``in_axes`` and ``out_axes`` on their own.

    Raises:
      ValueError: ``Carry`` is nested or given twice, only one of the two has it, or
        ``out_axes`` broadcasts or carries (inside ``StateAxes``) an output.
    """
    in_count = _carry_count(in_axes, "in_axes")
    out_count = _carry_count(out_axes, "out_axes")
    if in_count != out_count:
        raise ValueError(
            "If one of in_axes or out_axes has Carry, the other must also have Carry. "
            f"Got in_axes={in_axes!r} and out_axes={out_axes!r}: the carry "
            f"{'goes in but never comes out' if in_count else 'comes out but never goes in'}."
            "\nFix: mark the carried argument in in_axes and the new carry in out_axes "
            "(e.g. in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0)), or neither."
        )
    for path, axis in _entries(out_axes):
        where = f"out_axes{path}"
        if axis is None:
            raise ValueError(
                f"Cannot broadcast output state. Got out_axes=None at: {where}; every "
                "step returns its own output, so scan stacks it.\nFix: give an int axis "
                "(e.g. 0) to stack it, or return it through the carry (nnx.Carry)."
            )
        if isinstance(axis, StateAxes):
            for filter_, value in axis.items():
                if value is None or value is Carry:
                    verb = "broadcast" if value is None else "carry"
                    raise ValueError(
                        f"Cannot {verb} output state. Got StateAxes({{{filter_!r}: "
                        f"{value!r}}}) at: {where}.\nFix: give the output's sub-states an "
                        "int axis in out_axes; carried and broadcast sub-states are "
                        "declared in in_axes (StateAxes there) and written back to the "
                        "argument."
                    )


def check_argument_count(in_axes: object, n_args: int) -> None:
    """Raises ``ValueError`` if ``in_axes=Carry`` and the call has not exactly one argument."""
    if in_axes is Carry and n_args != 1:
        raise ValueError(
            "When in_axes=Carry, the function must take exactly one argument, got "
            f"{n_args} arguments.\nFix: pass the carried values as one argument (a tuple "
            "or an object), or give one entry per argument, e.g. in_axes=(nnx.Carry, 0)."
        )


def resolve_positions(
    f: Callable[..., Any], in_axes: object, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Binds keyword arguments to their positions when ``in_axes`` has entries for them."""
    if not isinstance(in_axes, (tuple, list)) or len(in_axes) <= len(args):
        return args, kwargs
    try:
        bound = inspect.signature(f).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return args, kwargs  # the call itself reports the mismatch
    bound.apply_defaults()
    return tuple(bound.args), dict(bound.kwargs)
