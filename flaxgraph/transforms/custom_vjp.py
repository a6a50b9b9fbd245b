"""``custom_vjp`` for functions of objects.

Source: ``jax.custom_vjp``; ``DiffState`` in ``nondiff_argnums`` and ``updates_g``:
Flax NNX 0.12 ``nnx.custom_vjp``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from flaxgraph.graphlib.paths import path_str
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE
from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.modes import resolve
from flaxgraph.transforms.calling_conventions import check_not_bound_method
from flaxgraph.transforms.diff_argnums import DIFF_KEYS, DIFF_SPEC, Diff, output_inner, tangent_at
from flaxgraph.transforms.lift import OUT, AuxValue, Call, InStatic, OutStatic, split_inputs
from flaxgraph.transforms.lift_types import DiffState, reject_lift_types
from flaxgraph.transforms.transformed import P, R, Transformed
from flaxgraph.variablelib.variable import Param, is_variable


class custom_vjp(Transformed[P, R]):
    """``jax.custom_vjp`` where arguments may be objects; a ``Transformed`` without a fast path.

    ``bwd(*nondiff_args, residuals, g)`` returns per differentiable argument a
    ``State`` of its Params' cotangents (missing ones are zero) or an array; a ``bwd`` declaring
    ``updates_g`` also gets, per argument, a copy whose changed Variables hold the
    cotangents of their changes. Residuals may contain objects (as pytrees).

    Args:
      fun: the function (also usable as ``@nnx.custom_vjp`` and
        ``@nnx.custom_vjp(nondiff_argnums=...)``).
      nondiff_argnums: arguments not differentiated, passed to ``fwd`` and ``bwd``
        unchanged (hashable); an ``nnx.DiffState(argnum, filter)`` entry instead
        picks that argument's differentiable sub-state (needs graph updates).
      graph, graph_updates: the traversal mode (see ``jit``); without graph updates
        every array of an object argument is differentiated.

    Raises:
      ValueError: ``bwd`` returns the wrong number of cotangents; ``fun`` is a bound
        method; a ``DiffState`` without graph updates; a Variable is reached from a
        differentiable and a non-differentiable argument (naming both paths).

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class W(nnx.Module):
      ...   def __init__(self): self.w = nnx.Param(jnp.array(0.0))
      >>> @nnx.custom_vjp
      ... def f(m, x):
      ...   return jnp.sin(m.w.value) * x
      >>> def f_fwd(m, x):
      ...   return f(m, x), (jnp.cos(m.w.value), jnp.sin(m.w.value), x)
      >>> def f_bwd(res, g):
      ...   cos_w, sin_w, x = res
      ...   return nnx.State({'w': nnx.Param(cos_w * x * g)}), sin_w * g
      >>> f.defvjp(f_fwd, f_bwd)
      >>> float(nnx.grad(f)(W(), 2.0)['w'].value)
      2.0
    """

    def __new__(cls, fun: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        if fun is None:  # @nnx.custom_vjp(nondiff_argnums=...)
            return lambda f: cls(f, *args, **kwargs)
        return super().__new__(cls)

    fast = False

    def __init__(
        self,
        fun: Callable[P, R],
        nondiff_argnums: Sequence[int] = (),
        *,
        graph: bool | None = None,
        graph_updates: bool | None = None,
    ):
        check_not_bound_method(fun, "custom_vjp")
        self.mode = resolve(graph, graph_updates)
        reject_lift_types(self.mode, "custom_vjp", "nondiff_argnums", nondiff_argnums, plain="ints")
        super().__init__(fun)
        entries = (
            (nondiff_argnums,)
            if isinstance(nondiff_argnums, (int, DiffState))
            else tuple(nondiff_argnums)
        )
        self.nondiff_argnums = tuple(e for e in entries if not isinstance(e, DiffState))
        self.diff_filters = {e.argnum: e.filter for e in entries if isinstance(e, DiffState)}
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Sets the forward rule ``fwd(*args) -> (output, residuals)`` and the backward
        rule ``bwd(*nondiff_args, residuals, g) -> cotangents``."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if kwargs:
            raise TypeError(
                f"{self.fun.__name__}: nnx.custom_vjp functions take positional arguments "
                f"only, got keyword arguments {sorted(kwargs)}.\nFix: pass them by position."
            )
        if self.fwd is None or self.bwd is None:
            raise TypeError(f"{self.fun.__name__}: call defvjp(fwd, bwd) before calling it.")
        self.plans.general_calls += 1
        if self.bound:
            args = (*self.bound, *args)  # type: ignore[assignment]
        n = len(args)
        nondiff = tuple(sorted(i % n for i in self.nondiff_argnums))
        diff_pos = [i for i in range(n) if i not in nondiff]
        fixed = tuple(args[i] for i in nondiff)
        diff_args = tuple(args[i] for i in diff_pos)
        _check_no_shared_variables(args, nondiff, diff_pos)
        filters = {i % n: f for i, f in self.diff_filters.items()}

        def full(dargs: tuple[Any, ...]) -> tuple[Any, ...]:
            out = list(args)
            for i, v in zip(diff_pos, dargs):
                out[i] = v
            return tuple(out)

        mode = self.mode
        prefix = tuple((Diff(filters.get(i, Param)) if mode.updates else True) for i in diff_pos)
        call = split_inputs(diff_args, {}, (prefix, False), DIFF_SPEC, mode)
        slots, (diff, rest) = call.groups(DIFF_KEYS)
        static = InStatic.make(graphdef=call.graphdef, slots=slots, extra=None)
        in_prefixes = [DIFF_KEYS[g] for g in slots.groups]
        diff_paths = [p for p, g in zip(call.graphdef.leaf_paths, slots.groups) if g == 0]
        fun, fwd, bwd = self.fun, self.fwd, self.bwd

        def run(f: Callable[..., Any], diff_values: list[Any], rest: list[Any]) -> Any:
            """Merges, calls ``f``, re-splits; returns ``(f's result, lifted updates)``."""
            inner = output_inner(f, mode)

            def call_fn(fn: Callable[..., Any], a: tuple[Any, ...], kw: dict[str, Any]) -> object:
                return fn(*full(a), **kw), None

            result, out_static, out_groups = inner.run(
                static, (diff_values, rest), in_prefixes, (None, None), None, call_fn
            )
            return result, (AuxValue(out_static), out_groups)

        # The non-differentiated leaves are an argument too (their cotangent is zero):
        # closed over, they could be tracers of an outer transform, which
        # jax.custom_vjp does not allow.
        @jax.custom_vjp
        def primal(diff_values: list[Any], rest: list[Any]) -> Any:
            output, lifted = run(fun, diff_values, rest)
            return lifted, output

        wants_updates = _declares(bwd, "updates_g")

        def primal_fwd(diff_values: list[Any], rest: list[Any]) -> Any:
            (output, residuals), lifted = run(fwd, diff_values, rest)
            return (lifted, output), (residuals, lifted[0], [_zero_cotangent(v) for v in rest])

        def primal_bwd(res: Any, g: Any) -> Any:
            residuals, out_static, rest_zeros = res
            (_, lg), out_g = g
            kwargs = {}
            if wants_updates:
                kwargs["updates_g"] = _updates_cotangent(call, diff_args, out_static.value, lg)
            cotangents = bwd(*fixed, residuals, out_g, **kwargs)
            if not isinstance(cotangents, tuple) or len(cotangents) != len(diff_args):
                raise ValueError(
                    f"The backward rule of {fun.__name__} must return a tuple with one "
                    f"cotangent per differentiable argument ({len(diff_args)}), got "
                    f"{type(cotangents).__name__}"
                    + (f" of length {len(cotangents)}" if isinstance(cotangents, tuple) else "")
                    + "."
                )
            return [tangent_at(cotangents, p, v) for p, v in zip(diff_paths, diff)], rest_zeros

        primal.defvjp(primal_fwd, primal_bwd)
        (out_static, out_groups), output = primal(diff, rest)
        call.finish(out_static.value, out_groups)
        typed: R = output
        return typed


def _zero_cotangent(x: Any) -> object:
    """The zero cotangent of ``x`` (``float0`` for integer and boolean arrays)."""
    dtype = jax.numpy.result_type(x)
    if jax.numpy.issubdtype(dtype, jax.numpy.inexact):
        return jax.numpy.zeros_like(x)
    return np.zeros(np.shape(x), dtype=jax.dtypes.float0)


def _declares(f: Callable[..., Any], name: str) -> bool:
    """Whether ``f`` has a parameter called ``name`` (or takes ``**kwargs``)."""
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _updates_cotangent(
    call: Call, diff_args: tuple[Any, ...], out_static: OutStatic, out_groups_g: Any
) -> tuple[Any, ...]:
    """``updates_g``: per argument, a copy holding its changed Variables' cotangents."""
    by_path = {
        path[1:]: out_groups_g[s.at][s.position]
        for path, s in zip(out_static.graphdef.leaf_paths, out_static.sources)
        if s.origin == OUT and path[0] == 1
    }
    cotangent = {}
    for path, leaf in zip(call.graphdef.leaf_paths, call.leaves):
        if REGISTRY.kind_of(leaf) is VARIABLE and path[1:] in by_path:
            cotangent[id(leaf)] = by_path[path[1:]]

    def with_cotangent(v: object) -> object:
        return v.replace(cotangent[id(v)]) if is_variable(v) and id(v) in cotangent else None

    return tuple(jax.tree.map(with_cotangent, arg, is_leaf=is_variable) for arg in diff_args)


def _check_no_shared_variables(
    args: tuple[Any, ...], nondiff: tuple[int, ...], diff_pos: list[int]
) -> None:
    """``ValueError`` (both paths) for a Variable of a diff and a non-diff argument."""
    if not nondiff:
        return
    seen: dict[int, str] = {}
    for i in nondiff:
        _, leaves = flatten_with_paths(args[i], root_name=f"args[{i}]")
        for path, leaf in leaves:
            if REGISTRY.kind_of(leaf) is VARIABLE:
                seen.setdefault(id(leaf), path_str(f"args[{i}]", args[i], path))
    for i in diff_pos:
        _, leaves = flatten_with_paths(args[i], root_name=f"args[{i}]")
        for path, leaf in leaves:
            if REGISTRY.kind_of(leaf) is VARIABLE and id(leaf) in seen:
                raise ValueError(
                    f"Duplicate {type(leaf).__name__} in custom_vjp: the same Variable is "
                    f"at {seen[id(leaf)]} (a nondiff argument, passed as is) and at "
                    f"{path_str(f'args[{i}]', args[i], path)} (differentiated), so the "
                    "function would see two different values for it.\nFix: pass it "
                    "once, or pass a copy (nnx.clone) as the nondiff argument."
                )
