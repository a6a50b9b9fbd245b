"""Autodiff of functions of objects: ``grad``, ``value_and_grad``, ``vjp``, ``jvp``, ``remat``.

Source: ``jax.grad``, ``jax.value_and_grad``, ``jax.vjp``, ``jax.jvp``,
``jax.checkpoint``; ``DiffState`` per the "JAX-style NNX Transforms" FLIP flax#4107;
the decorator forms of ``vjp``/``jvp``: Flax NNX 0.12.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax

from flaxgraph.graphlib.build import build_graph
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE, is_node_module, pytree_children
from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.modes import Mode, resolve
from flaxgraph.statelib import State
from flaxgraph.statelib.state import replace_leaf as _grad_leaf
from flaxgraph.transforms.calling_conventions import (
    check_not_bound_method,
    decorator,
    merge_static,
    normalize_argnums,
    split_static,
    unbind,
)
from flaxgraph.transforms.diff_argnums import (
    AUX_SPEC,
    DIFF_KEYS,
    DIFF_SPEC,
    Diff,
    check_argnums,
    diff_prefix,
    output_inner,
    tangent_at,
)
from flaxgraph.transforms.lift import AuxValue, Call, InStatic, Slots, split_inputs
from flaxgraph.transforms.lift_types import DiffState, reject_lift_types
from flaxgraph.transforms.transformed import Wrapped
from flaxgraph.typing import PathParts
from flaxgraph.variablelib.variable import Param


def _grad_tree(call: Call, args: tuple[Any, ...], argnum: int, grads: dict[int, Any]) -> object:
    """The gradient of argument ``argnum``: its structure, each object a State of its gradients."""
    by_path = {
        path: (leaf, grads[i])
        for i, (path, leaf) in enumerate(zip(call.graphdef.leaf_paths, call.leaves))
        if i in grads
    }
    return _grad_build(args[argnum], (0, argnum), by_path)


def _grad_build(x: Any, path: PathParts, by_path: dict[Any, tuple[Any, Any]]) -> object:
    """``_grad_tree`` below ``x`` (module-level: a recursive closure makes a cycle)."""
    if is_node_module(x):
        n = len(path)
        pairs = [(p[n:], _grad_leaf(leaf, g)) for p, (leaf, g) in by_path.items() if p[:n] == path]
        return State.from_flat_path(pairs)
    if REGISTRY.kind_of(x) is VARIABLE:
        # a Variable seen earlier along another path, or not differentiated: an
        # empty State, as Flax NNX 0.12 gives (nnx.update with it is a no-op)
        item = by_path.get(path)
        return State({}) if item is None else _grad_leaf(*item)
    if type(x) in (list, tuple):
        return type(x)(_grad_build(v, (*path, i), by_path) for i, v in enumerate(x))
    if type(x) is dict:
        return {k: _grad_build(v, (*path, k), by_path) for k, v in x.items()}
    item = by_path.get(path)
    if item is not None:
        return item[1]
    children = jax.tree_util.tree_flatten_with_path(x, is_leaf=lambda y: y is not x)
    if children[0] and not jax.tree_util.treedef_is_leaf(children[1]):
        items, treedef = pytree_children(x)  # type: ignore[misc]
        return treedef.unflatten([_grad_build(v, (*path, k), by_path) for k, v in items])
    return None


def _grad_copy(call: Call, args: tuple[Any, ...], argnum: int, grads: dict[int, Any]) -> object:
    """The gradient of argument ``argnum`` without graph updates: a copy holding the gradients."""
    by_var = {
        id(call.leaves[i]): g
        for i, g in grads.items()
        if REGISTRY.kind_of(call.leaves[i]) is VARIABLE
    }
    by_path = {
        call.graphdef.leaf_paths[i][2:]: g
        for i, g in grads.items()
        if call.graphdef.leaf_paths[i][:2] == (0, argnum)
    }
    graphdef, leaves = flatten_with_paths(args[argnum])
    values = [
        leaf.replace(by_var[id(leaf)]) if REGISTRY.kind_of(leaf) is VARIABLE else by_path[path]
        for path, leaf in leaves
    ]
    return build_graph(graphdef, values)


def _vg_core(
    f: Callable[..., Any],
    argnums: object,
    has_aux: bool,
    holomorphic: bool,
    allow_int: bool,
    mode: Mode,
) -> Callable[..., Any]:
    """``value_and_grad``'s lifted function: ``g(*args) -> ((value, aux), grads)``."""
    inner = output_inner(f, mode)
    grad_tree = _grad_tree if mode.updates else _grad_copy
    loss_call = _primal_call(has_aux, "value")

    def pure(diff: list[Any], static: AuxValue[Any], rest: list[Any]) -> object:
        in_static: InStatic[Any] = static.value
        in_prefixes = [DIFF_KEYS[g] for g in in_static.slots.groups]
        value, out_static, out_groups = inner.run(
            in_static, (diff, rest), in_prefixes, (None, None), None, loss_call
        )
        return value, (AuxValue(out_static), out_groups)

    transformed = jax.value_and_grad(
        pure, argnums=0, has_aux=True, holomorphic=holomorphic, allow_int=allow_int
    )

    def run(*args: object, **kwargs: object) -> Any:
        args_prefix, nums = diff_prefix(argnums, len(args), mode, args)
        call = split_inputs(args, kwargs, (args_prefix, False), DIFF_SPEC, mode)
        slots, (diff, rest) = call.groups(DIFF_KEYS)
        static = AuxValue(InStatic.make(graphdef=call.graphdef, slots=slots, extra=None))
        (value, (out_static, out_groups)), grad_list = transformed(diff, static, rest)
        aux = call.finish(out_static.value, out_groups)
        diff_index = [i for i, g in enumerate(slots.groups) if g == 0]
        grads = dict(zip(diff_index, grad_list))
        trees = tuple(grad_tree(call, args, n, grads) for n in nums)
        return (value, aux), trees[0] if isinstance(argnums, (int, DiffState)) else trees

    return run


@decorator
def value_and_grad(
    f: Callable[..., Any],
    argnums: int | DiffState | Sequence[int | DiffState] = 0,
    has_aux: bool = False,
    *,
    holomorphic: bool = False,
    allow_int: bool = False,
    reduce_axes: Sequence[Any] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[..., Any]:
    """``jax.value_and_grad`` for functions of objects.

    Args:
      f: a function returning a scalar (or ``(scalar, aux)`` with ``has_aux``).
      argnums: the positional arguments to differentiate: ints (an object's
        ``Param`` Variables), or ``DiffState(argnum, filter)``.
      has_aux: ``f`` returns ``(value, aux)``; ``aux`` may contain objects.
      holomorphic, allow_int, reduce_axes: as in ``jax.value_and_grad``.
      graph, graph_updates: the traversal mode (see ``jit``). Without graph updates,
        as ``jax.grad`` on a pytree: an int argnum differentiates every array of the
        argument, the gradient is a copy of the argument, and ``DiffState`` is refused.

    Returns:
      A function returning ``(value, grads)`` (``((value, aux), grads)``): one entry
      per argnum (one alone for an int or a DiffState), the argument's structure
      with objects as ``State``s of their gradients. ``f``'s changes are applied.

    Raises:
      InconsistentAliasingError: one Variable is differentiated along one path and
        not along another.
      ValueError: (when created) ``f`` is a bound method of a Module, or ``argnums``
        holds an object.
      TraceContextError: ``f`` mutates an object it captured by closure.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class W(nnx.Module):
      ...   def __init__(self): self.w = nnx.Param(jnp.array(3.0))
      >>> loss, grads = nnx.value_and_grad(lambda m: m.w.value ** 2)(W())
      >>> float(loss), float(grads['w'].value)
      (9.0, 6.0)
    """
    mode = resolve(graph, graph_updates)
    check_argnums(argnums, "value_and_grad")
    reject_lift_types(mode, "value_and_grad", "argnums", argnums, plain="an int")
    inner_f, bound = unbind(f, "value_and_grad")
    del reduce_axes
    core = _vg_core(inner_f, _shift(argnums, len(bound)), has_aux, holomorphic, allow_int, mode)

    @functools.wraps(inner_f)
    def wrapper(*args: object, **kwargs: object) -> object:
        (value, aux), grads = core(*args, **kwargs)
        return ((value, aux) if has_aux else value), grads

    return Wrapped(inner_f, wrapper, bound)


@decorator
def grad(
    f: Callable[..., Any],
    argnums: int | DiffState | Sequence[int | DiffState] = 0,
    has_aux: bool = False,
    *,
    holomorphic: bool = False,
    allow_int: bool = False,
    reduce_axes: Sequence[Any] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[..., Any]:
    """``jax.grad`` for functions of objects (arguments and errors: see ``value_and_grad``).

    Returns:
      A function returning ``grads`` (``(grads, aux)`` with ``has_aux``).

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class W(nnx.Module):
      ...   def __init__(self): self.w = nnx.Param(jnp.array(3.0))
      >>> float(nnx.grad(lambda m: m.w.value ** 2)(W())['w'].value)
      6.0
    """
    check_not_bound_method(f, "grad")
    check_argnums(argnums, "grad")
    reject_lift_types(resolve(graph, graph_updates), "grad", "argnums", argnums, plain="an int")
    vg = value_and_grad(
        f, argnums, has_aux, holomorphic=holomorphic, allow_int=allow_int,
        reduce_axes=reduce_axes, graph=graph, graph_updates=graph_updates,
    )  # fmt: skip

    def wrapper(*args: object, **kwargs: object) -> object:
        value, grads = vg(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return Wrapped(vg.fun, wrapper)


def _shift(argnums: Any, by: int) -> object:
    if not by:
        return argnums
    # negative argnums count from the end, which `self` does not change
    if isinstance(argnums, int):
        return argnums + by if argnums >= 0 else argnums
    if isinstance(argnums, DiffState):
        return DiffState(argnums.argnum + by, argnums.filter) if argnums.argnum >= 0 else argnums
    return tuple(_shift(a, by) for a in argnums)


@decorator
def remat(
    f: Callable[..., Any],
    *,
    prevent_cse: bool = True,
    policy: Callable[..., bool] | None = None,
    static_argnums: int | tuple[int, ...] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[..., Any]:
    """``jax.checkpoint`` for functions of objects: intermediates are recomputed, not stored.

    Args:
      f: the function.
      prevent_cse, policy: as in ``jax.checkpoint``.
      static_argnums: compile-time constant arguments (hashable).
      graph, graph_updates: the traversal mode (see ``jit``).

    Returns:
      ``f`` rematerialised; objects are passed, updated and returned as with ``jit``.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
      >>> loss = nnx.remat(lambda m, x: m(x).sum())
      >>> grads = nnx.grad(loss)(model, jnp.ones((4, 2)))
      >>> grads['kernel'].shape, float(grads['bias'][0])
      ((2, 3), 4.0)
    """
    mode = resolve(graph, graph_updates)
    inner_f, bound = unbind(f, "remat")
    nums = tuple(n + len(bound) if n >= 0 else n for n in normalize_argnums(static_argnums))
    inner = output_inner(inner_f, mode)

    def pure(static: AuxValue[Any], values: list[Any]) -> object:
        in_static: InStatic[Any] = static.value
        statics = in_static.extra

        def call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
            full_args, full_kwargs = merge_static(args, kwargs, statics)
            return None, fn(*full_args, **full_kwargs)

        _, out_static, out_groups = inner.run(
            in_static, (values,), [None] * len(values), (None, None), None, call
        )
        return AuxValue(out_static), out_groups

    checkpointed = jax.checkpoint(pure, prevent_cse=prevent_cse, policy=policy)

    @functools.wraps(inner_f)
    def wrapper(*args: object, **kwargs: object) -> object:
        dyn_args, dyn_kwargs, statics = split_static(args, kwargs, nums, ())
        call = split_inputs(dyn_args, dyn_kwargs, (None, None), AUX_SPEC, mode)
        slots, (values,) = call.groups([None])
        static = AuxValue(InStatic.make(graphdef=call.graphdef, slots=slots, extra=statics))
        out_static, out_groups = checkpointed(static, values)
        return call.finish(out_static.value, out_groups)

    return Wrapped(inner_f, wrapper, bound)


checkpoint = remat


def _primal_call(has_aux: bool, what: str = "output") -> Callable[..., Any]:
    """The ``call`` of ``Inner.run``: ``f``'s ``(output, aux)`` (``aux`` ``None`` without it)."""

    def call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
        out = fn(*args, **kwargs)
        if not has_aux:
            return out, None
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(
                f"With has_aux=True the function must return a pair ({what}, aux); got a "
                f"{type(out).__name__}."
            )
        return out

    return call


def _lift_diff_inputs(
    f: Callable[..., Any], primals: tuple[Any, ...], mode: Mode, has_aux: bool
) -> tuple[Call, Callable[[list[Any]], Any], list[Any], Slots]:
    """Lifts ``primals`` (their Params differentiated) -> ``(call, pure, diff, slots)``."""
    args_prefix = tuple((Diff(Param) if mode.updates else True) for _ in primals)
    call = split_inputs(primals, {}, (args_prefix, False), DIFF_SPEC, mode)
    slots, (diff, rest) = call.groups(DIFF_KEYS)
    static = InStatic.make(graphdef=call.graphdef, slots=slots, extra=None)
    inner, in_prefixes = output_inner(f, mode), [DIFF_KEYS[g] for g in slots.groups]

    def pure(diff_values: list[Any]) -> Any:
        out, out_static, out_groups = inner.run(
            static, (diff_values, rest), in_prefixes, (None, None), None, _primal_call(has_aux)
        )
        return out, (AuxValue(out_static), out_groups)

    return call, pure, diff, slots


def vjp(
    f: Callable[..., Any] | None = None,
    *primals: object,
    has_aux: bool = False,
    reduce_axes: Sequence[Any] = (),
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``jax.vjp`` where primals may be objects (their ``Param`` Variables and raw arrays).

    Args:
      f: the function.
      *primals: its arguments (objects allowed).
      has_aux: ``f`` returns ``(output, aux)``.
      reduce_axes: accepted for compatibility (unused).
      graph, graph_updates: the traversal mode (see ``grad``).

    Returns:
      ``(output, vjp_fn)`` (plus ``aux``); ``vjp_fn(cotangent)`` gives one cotangent
      per primal (a ``State`` of Params for an object); changes to the primals are
      applied at once. Without primals, a function of them; without ``f``, a decorator.

    Raises:
      ValueError: ``f`` is a bound method of a Module.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> out, vjp_fn = nnx.vjp(lambda x: x ** 2, jnp.array(3.0))
      >>> float(out), float(vjp_fn(jnp.array(1.0))[0])
      (9.0, 6.0)
    """
    del reduce_axes
    options: dict[str, Any] = dict(has_aux=has_aux, graph=graph, graph_updates=graph_updates)
    if f is None:
        return functools.partial(vjp, **options)
    check_not_bound_method(f, "vjp")
    if not primals:
        return functools.wraps(f)(functools.partial(vjp, f, **options))
    mode = resolve(graph, graph_updates)
    call, pure, diff, slots = _lift_diff_inputs(f, primals, mode, has_aux)
    grad_tree = _grad_tree if mode.updates else _grad_copy
    out, jax_vjp_fn, (out_static, out_groups) = jax.vjp(pure, diff, has_aux=True)
    aux = call.finish(out_static.value, out_groups)
    diff_index = [i for i, g in enumerate(slots.groups) if g == 0]

    def vjp_fn(cotangent: object) -> tuple[Any, ...]:
        (grad_list,) = jax_vjp_fn(cotangent)
        grads = dict(zip(diff_index, grad_list))
        return tuple(grad_tree(call, primals, i, grads) for i in range(len(primals)))

    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def jvp(
    f: Callable[..., Any] | None = None,
    primals: Sequence[Any] | None = None,
    tangents: Sequence[Any] | None = None,
    has_aux: bool = False,
    *,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> object:
    """``jax.jvp`` where primals may be objects.

    Args:
      f: the function.
      primals: the arguments (objects allowed).
      tangents: one per primal: for an object, a ``State`` of its Params (missing
        entries are zero) or an object of the same structure; for an array, an array.
      has_aux: ``f`` returns ``(output, aux)``.
      graph, graph_updates: the traversal mode (see ``jit``).

    Returns:
      ``(output, output_tangent)`` (plus ``aux``). Without ``primals``/``tangents``,
      a function ``g(primals, tangents)``; without ``f``, a decorator.

    Raises:
      ValueError: ``f`` is a bound method of a Module, or ``primals`` and
        ``tangents`` differ in length.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> out, t = nnx.jvp(lambda x: x ** 2, (jnp.array(3.0),), (jnp.array(1.0),))
      >>> float(out), float(t)
      (9.0, 6.0)
    """
    options: dict[str, Any] = dict(has_aux=has_aux, graph=graph, graph_updates=graph_updates)
    if f is None:
        return functools.partial(jvp, **options)
    check_not_bound_method(f, "jvp")
    if primals is None or tangents is None:
        return functools.wraps(f)(functools.partial(jvp, f, **options))
    mode = resolve(graph, graph_updates)
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp got {len(primals)} primals but {len(tangents)} tangents.")
    call, pure, diff, slots = _lift_diff_inputs(f, primals, mode, has_aux)
    diff_paths = [p for p, g in zip(call.graphdef.leaf_paths, slots.groups) if g == 0]
    tangent_list = [tangent_at(tangents, path, value) for path, value in zip(diff_paths, diff)]
    out, tangent_out, (out_static, out_groups) = jax.jvp(
        pure, (diff,), (tangent_list,), has_aux=True
    )
    aux = call.finish(out_static.value, out_groups)
    return (out, tangent_out, aux) if has_aux else (out, tangent_out)
