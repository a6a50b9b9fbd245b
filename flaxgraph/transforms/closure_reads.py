"""A warning when a compiled function reads a Variable it captured by closure.

See the package README, "Closure reads".
Source: ``jax.jit`` closures (JAX's "Sharp bits").
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from flaxgraph.errors import MAX_LISTED
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.graphlib.paths import path_str
from flaxgraph.transforms.caller_warnings import warn_at_caller
from flaxgraph.variablelib.variable import Variable, is_variable


class ClosureReadWarning(UserWarning):
    """A compiled function read a Variable it captured by closure: its value is a constant.

    Issued by ``nnx.jit``, ``pmap`` and ``scan`` once per call site, naming the
    Variables by their path from the closure; not for Ref-backed Variables, nor under
    transforms that trace on every call. Fix: pass the object as an argument.

    Example::

      >>> import warnings, jax.numpy as jnp, flaxgraph as nnx
      >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
      >>> f = nnx.jit(lambda x: model(x))
      >>> with warnings.catch_warnings(record=True) as caught:
      ...   warnings.simplefilter('always')
      ...   y = f(jnp.ones((1, 2)))
      >>> print(str(caught[0].message).splitlines()[0])
      nnx.jit: the function read model.bias, model.kernel by closure (not as arguments): their current values are compiled in as constants, so later changes to them are not seen by this compiled function.
    """


def _captured(f: Callable[..., Any], depth: int = 3) -> list[tuple[str, Any]]:
    """``(name, value)`` of what ``f`` refers to by closure or as globals, ``depth`` levels down."""
    while True:
        inner = getattr(f, "func", None) or getattr(f, "__wrapped__", None)
        if inner is None or inner is f:
            break
        f = inner
    f = getattr(f, "__func__", f)
    try:
        found = inspect.getclosurevars(f)
    except (TypeError, ValueError):
        return []
    seen = [*found.nonlocals.items(), *found.globals.items()]
    if depth > 0:
        for _, value in list(seen):
            if inspect.isfunction(value) or isinstance(value, functools.partial):
                seen.extend(_captured(value, depth - 1))
    return seen


def _name(var: Variable[Any], roots: list[tuple[str, Any]]) -> str:
    """``var``'s path from the function's closure, or a description of it."""
    for name, value in roots:
        if value is var:
            return name
        if (
            is_variable(value)
            or isinstance(value, type)
            or inspect.ismodule(value)
            or inspect.isroutine(value)
        ):
            continue
        try:
            for path, leaf in iter_graph(value):
                if leaf is var:
                    return path_str(name, value, path)
        except Exception:  # an object the walk cannot traverse: look elsewhere
            continue
    shape = getattr(var._var_raw, "shape", None)
    return f"a captured {type(var).__name__}" + (f" of shape {tuple(shape)}" if shape else "")


def warn_reads(read: list[Variable[Any]], f: Callable[..., Any], name: str) -> None:
    """Warns (``ClosureReadWarning``) about the captured Variables ``f`` read."""
    if not read:
        return
    roots = _captured(f)
    names = sorted({_name(v, roots) for v in read})
    listed = ", ".join(names[:MAX_LISTED])
    if len(names) > MAX_LISTED:
        listed += f" and {len(names) - MAX_LISTED} more"
    warn_at_caller(
        f"nnx.{name}: the function read {listed} by closure (not as arguments): their "
        "current values are compiled in as constants, so later changes to them are not "
        "seen by this compiled function.\nFix: pass the object that holds them as an "
        f"argument (e.g. nnx.{name}(lambda model, x: model(x))(model, x)); if constants "
        "are intended, silence nnx.ClosureReadWarning.",
        ClosureReadWarning,
    )
