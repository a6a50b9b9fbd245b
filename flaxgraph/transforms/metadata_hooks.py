"""``transform_metadata``: a Variable's axis metadata as seen inside a mapped function.

See ``docs/design.md``, "Axis metadata".
Source: Flax NNX 0.12 ``nnx.transform_metadata``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE
from flaxgraph.modes import resolve
from flaxgraph.transforms.aliasing import NamedRoots, PrefixSpec
from flaxgraph.transforms.lift_types import StateAxes
from flaxgraph.transforms.prefix_groups import prefix_keys
from flaxgraph.transforms.scan_axes import Carry
from flaxgraph.transforms.transformed import Wrapped
from flaxgraph.transforms.unprefixed import LiftedCall
from flaxgraph.transforms.vmap import AxisHooks, args_prefix, is_axis
from flaxgraph.typing import MISSING
from flaxgraph.variablelib.variable import PARTITION_NAME


def _is_meta_axis(p: object) -> bool:
    """An int, ``None`` or ``nnx.Carry`` (no axis, as ``scan`` takes it)."""
    return is_axis(p) or p is Carry


_FIX = "give an int, None or nnx.Carry for the whole object, or nnx.StateAxes({filter: axis, ...})."
META_AXES_SPEC = PrefixSpec("in_axes", _is_meta_axis, StateAxes, _FIX)
META_OUT_AXES_SPEC = PrefixSpec("out_axes", _is_meta_axis, StateAxes, _FIX)


def _positional(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Keyword arguments that could be positional become positional (as Flax does)."""
    if not kwargs:
        return args, kwargs
    try:
        bound = inspect.signature(f).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return args, kwargs
    return bound.args, bound.kwargs


def _check_names(leaves: list[Any], axes: list[Any], partition: object, roots: object) -> None:
    """``ValueError`` (naming the path) if a Variable under an int axis names another partition."""
    for leaf, axis in zip(leaves, axes):
        if not (REGISTRY.kind_of(leaf) is VARIABLE and isinstance(axis, int)):
            continue
        names = leaf.get_metadata("out_sharding", None)
        if not isinstance(names, tuple) or not -len(names) <= axis < len(names):
            continue
        if names[axis] != partition:
            where = _where(leaf, roots)
            raise ValueError(
                f"transform_metadata(partition={partition!r}) would remove axis {axis} "
                f"of the {type(leaf).__name__} at {where}, but its out_sharding {names!r} "
                f"names {names[axis]!r} there; putting the axis back would rename it to "
                f"{partition!r}.\nFix: pass partition={names[axis]!r}, or give this "
                "argument another in_axes (None leaves it alone)."
            )


def _where(target: object, roots: Any) -> str:
    for path, value in iter_graph(roots):
        if value is target:
            return NamedRoots(("args", "kwargs"), roots).where(path)
    return "an argument"


def transform_metadata(
    f: Callable[..., Any] = MISSING,
    *,
    in_axes: object = 0,
    out_axes: object = 0,
    partition: str | None,
    graph: bool | None = None,
) -> Any:
    """Runs ``f`` with its Variables' axis metadata as a ``vmap`` over those axes would show it.

    The arrays keep their shapes; updates to the objects reach the caller's, whose
    metadata gets the axis back; an output that is an input object is the caller's.

    Args:
      f: the function; omit it for the decorator form.
      in_axes: as ``vmap``'s (``nnx.Carry`` counts as ``None``; keyword-only
        arguments take a single int/None): each Variable under an int axis gets
        ``remove_axis`` before ``f`` and ``add_axis`` after it.
      out_axes: the same for Variables in the output (``add_axis`` only).
      partition: the mesh-axis name of the axis (``nnx.PARTITION_NAME`` in the
        hooks' parameters); required, may be ``None``.
      graph: ``False`` for tree mode (``None``: ``nnx.set_graph_mode``'s default).

    Returns:
      The wrapped function (same arguments and output as ``f``), or a decorator.

    Raises:
      ValueError: (before anything runs) a Variable under an int axis names another
        partition there, naming its path; or ``in_axes`` does not fit the arguments.
      PrefixError (``ValueError``): ``in_axes``/``out_axes`` is not a valid prefix.
      InconsistentAliasingError (``ValueError``): one object reached under two axes.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> w = nnx.Param(jnp.zeros((5, 2)), out_sharding=(None, 'data'))
      >>> def grow(v):
      ...   return nnx.Param(jnp.ones(3), out_sharding=('model',))
      >>> nnx.transform_metadata(grow, in_axes=1, out_axes=1, partition='data')(w).out_sharding
      ('model', 'data')
    """
    if f is MISSING:
        return functools.partial(
            transform_metadata, in_axes=in_axes, out_axes=out_axes, partition=partition, graph=graph
        )
    mode = resolve(graph, None)
    params = {PARTITION_NAME: partition}
    keys = prefix_keys(in_axes, out_axes, 0, None, spec=META_AXES_SPEC)
    kwargs_axis = in_axes if is_axis(in_axes) else None

    def wrapper(*args: object, **kwargs: object) -> object:
        args, kwargs = _positional(f, args, kwargs)
        metadata = AxisHooks(params)
        lifted = LiftedCall(
            f,
            mode,
            in_spec=META_AXES_SPEC,
            out_spec=META_OUT_AXES_SPEC,
            keys=keys,
            on_inputs=metadata.on_inputs,
            on_output_leaf=metadata.on_output_leaf,
        )
        call, static, groups = lifted.split(
            args, kwargs, (args_prefix(in_axes, len(args)), kwargs_axis)
        )
        _check_names(call.leaves, call.prefixes, partition, (args, kwargs))
        # No JAX transform: the pure function runs as is, in the caller's trace.
        return LiftedCall.finish(call, lifted.pure(static, groups, out_axes))

    return Wrapped(f, wrapper)
