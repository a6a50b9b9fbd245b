"""``make_jaxpr`` over functions of objects: the jaxpr a lifted call traces.

Source: Flax NNX 0.12 ``nnx.make_jaxpr``; ``jax.make_jaxpr``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax

from flaxgraph.graphlib.build import build_graph
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE
from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.modes import resolve
from flaxgraph.transforms.calling_conventions import (
    merge_static,
    normalize_argnums,
    split_static,
    unbind,
)
from flaxgraph.transforms.transformed import Wrapped
from flaxgraph.transforms.unprefixed import LiftedCall
from flaxgraph.typing import MISSING


def make_jaxpr(
    f: Callable[..., Any] = MISSING,
    *,
    graph: bool | None = None,
    graph_updates: bool | None = None,
    static_argnums: int | Sequence[int] = (),
) -> object:
    """Returns a function that gives the ``jax.core.ClosedJaxpr`` of ``f(*args, **kwargs)``.

    Its inputs are the arrays of ``(args, kwargs)`` in walk order (a shared Variable
    once), its outputs those of ``f``'s output, not the arguments' changes (as in
    Flax). Nothing runs.

    Args:
      f: a function of objects and arrays (or a Module instance); omit it for a
        decorator factory (``@nnx.make_jaxpr(static_argnums=1)``).
      graph: ``False`` for tree mode (``None``: ``nnx.set_graph_mode``'s default).
      graph_updates: ``True`` given explicitly raises (no update can come back);
        ``None`` follows ``nnx.set_graph_updates`` and works in every mode.
      static_argnums: positional arguments passed as Python values (hashable).

    Returns:
      ``g(*args, **kwargs) -> ClosedJaxpr``, or a decorator when ``f`` is omitted.

    Raises:
      ValueError: ``graph_updates=True`` was given explicitly; ``f`` is a bound
        method of a Module.
      TypeError: a static argument is unhashable.
      TraceContextError (``ValueError``): ``f`` returns or stores a captured object.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class Scale(nnx.Module):
      ...   def __init__(self): self.w = nnx.Param(jnp.ones(3))
      >>> jaxpr = nnx.make_jaxpr(lambda m, x: m.w * x)(Scale(), jnp.ones(3))
      >>> [v.aval.shape for v in jaxpr.jaxpr.invars], [v.aval.shape for v in jaxpr.jaxpr.outvars]
      ([(3,), (3,)], [(3,)])
    """
    if f is MISSING:
        return functools.partial(
            make_jaxpr, graph=graph, graph_updates=graph_updates, static_argnums=static_argnums
        )
    if graph_updates is True and graph is not False:
        raise ValueError(
            "nnx.make_jaxpr does not support graph_updates=True: a jaxpr only traces the "
            "function, so no update (of values or of structure) can come back to the "
            "arguments.\nFix: omit graph_updates (or pass graph_updates=False); the "
            "jaxpr is the same."
        )
    mode = resolve(graph, graph_updates)
    argnums = normalize_argnums(static_argnums)
    inner_f, bound = unbind(f, "make_jaxpr")
    offset = len(bound)

    @functools.wraps(inner_f)
    def wrapper(*args: object, **kwargs: object) -> object:
        nums = tuple(i + offset if i >= 0 else i for i in argnums)
        dyn_args, dyn_kwargs, statics = split_static(args, kwargs, nums, ())

        def with_statics(*a: object, **k: object) -> object:
            full_args, full_kwargs = merge_static(a, k, statics)
            return inner_f(*full_args, **full_kwargs)

        lifted = LiftedCall(with_statics, mode)
        _call, static, groups = lifted.split(dyn_args, dyn_kwargs)

        def pure(groups: tuple[list[Any], ...]) -> list[Any]:
            out = lifted.pure(static, groups)
            leaves = LiftedCall.out_leaves(static, groups, out)
            output, _args, _kwargs = build_graph(out[0].value.graphdef, leaves)
            _, out_leaves = flatten_with_paths(output, root_name="output")
            return [v.raw_value if REGISTRY.kind_of(v) is VARIABLE else v for _, v in out_leaves]

        return jax.make_jaxpr(pure)(groups)

    return Wrapped(inner_f, wrapper, bound)
