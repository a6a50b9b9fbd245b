"""``custom_vjp`` for functions of objects.

Define a function, a forward rule and a backward rule as with
``jax.custom_vjp``; objects may be arguments. Their differentiable part is
their ``Param`` Variables; the backward rule returns, for an object argument, a
``State`` of cotangents for those Params (missing entries count as zero), and
an array for an array argument::

  @nnx.custom_vjp
  def f(m, x):
    return jnp.sin(m.w.value) * x

  def f_fwd(m, x):
    return f(m, x), (jnp.cos(m.w.value), jnp.sin(m.w.value), x)

  def f_bwd(res, g):
    cos_w, sin_w, x = res
    return nnx.State({'w': nnx.Param(cos_w * x * g)}), sin_w * g

  f.defvjp(f_fwd, f_bwd)

``bwd`` receives ``(*nondiff_args, residuals, output_cotangent)`` exactly as in
JAX. (Flax NNX instead passes ``(input_updates_cotangent, output_cotangent)``;
flaxgraph keeps JAX's convention: changes the function makes to its arguments
are not differentiated through.) Residuals may contain objects: they travel as
pytrees (value semantics).

Source: ``jax.custom_vjp``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax

from flaxgraph.modes import resolve
from flaxgraph.transforms.autodiff import _AUX_SPEC, _DIFF_KEYS, DIFF_SPEC, _Diff, _tangent_at
from flaxgraph.transforms.calls import check_not_bound_method, normalize_argnums
from flaxgraph.transforms.lift import Inner, InStatic, Static, split_inputs
from flaxgraph.variablelib.variable import Param


class custom_vjp:
    """``jax.custom_vjp`` where arguments may be objects (see the module docstring).

    Args:
      fun: the function.
      nondiff_argnums: positions of arguments that are not differentiated; they are
        passed to ``fwd`` and ``bwd`` unchanged (as in JAX) and must be hashable.
      graph, graph_updates: the traversal mode (see ``nnx.jit``, ``flaxgraph.modes``);
        without graph updates every array of an object argument is differentiated.

    Also usable as ``@nnx.custom_vjp`` and ``@nnx.custom_vjp(nondiff_argnums=...)``.

    Raises:
      ValueError: ``bwd`` returns the wrong number of cotangents.

    Source: ``jax.custom_vjp``.
    """

    def __new__(cls, fun: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        if fun is None:  # @nnx.custom_vjp(nondiff_argnums=...)
            return lambda f: cls(f, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        fun: Callable[..., Any],
        nondiff_argnums: Sequence[int] = (),
        *,
        graph: bool | None = None,
        graph_updates: bool | None = None,
    ):
        check_not_bound_method(fun, "custom_vjp")
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = normalize_argnums(nondiff_argnums)
        self.mode = resolve(graph, graph_updates)
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Sets the forward rule ``fwd(*args) -> (output, residuals)`` and the backward
        rule ``bwd(*nondiff_args, residuals, g) -> cotangents``."""
        self.fwd, self.bwd = fwd, bwd

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else functools.partial(self, obj)

    def __call__(self, *args: Any) -> Any:
        if self.fwd is None or self.bwd is None:
            raise TypeError(f"{self.fun.__name__}: call defvjp(fwd, bwd) before calling it.")
        n = len(args)
        nondiff = tuple(sorted(i % n for i in self.nondiff_argnums))
        diff_pos = [i for i in range(n) if i not in nondiff]
        fixed = tuple(args[i] for i in nondiff)
        diff_args = tuple(args[i] for i in diff_pos)

        def full(dargs: tuple[Any, ...]) -> tuple[Any, ...]:
            out = [None] * n
            for i, v in zip(nondiff, fixed):
                out[i] = v
            for i, v in zip(diff_pos, dargs):
                out[i] = v
            return tuple(out)

        mode = self.mode
        prefix = tuple((_Diff(Param) if mode.updates else True) for _ in diff_args)
        call = split_inputs(diff_args, {}, (prefix, False), DIFF_SPEC, mode)
        slots, (diff, rest) = call.groups(_DIFF_KEYS)
        static = InStatic(call.graphdef, slots, None)
        in_prefixes = [_DIFF_KEYS[g] for g, _ in slots]
        diff_paths = [p for p, (g, _) in zip(call.graphdef.leaf_paths, slots) if g == 0]
        fun, fwd, bwd = self.fun, self.fwd, self.bwd

        def run(f: Callable[..., Any], diff_values: list[Any]) -> Any:
            """Merges, calls ``f``, re-splits; returns ``(f's result, lifted updates)``."""
            inner = Inner(f, _AUX_SPEC, [None], same_prefix=lambda a, b: True, mode=mode)

            def call_fn(fn: Callable[..., Any], a: Any, kw: Any) -> Any:
                return fn(*full(a), **kw), None

            result, out_static, out_groups = inner.run(
                static, (diff_values, rest), in_prefixes, (None, None), None, call_fn
            )
            return result, (Static(out_static), out_groups)

        @jax.custom_vjp
        def primal(diff_values: list[Any]) -> Any:
            output, lifted = run(fun, diff_values)
            return lifted, output

        def primal_fwd(diff_values: list[Any]) -> Any:
            (output, residuals), lifted = run(fwd, diff_values)
            return (lifted, output), residuals

        def primal_bwd(residuals: Any, g: Any) -> Any:
            _, out_g = g
            cotangents = bwd(*fixed, residuals, out_g)
            if not isinstance(cotangents, tuple) or len(cotangents) != len(diff_args):
                raise ValueError(
                    f"The backward rule of {fun.__name__} must return a tuple with one "
                    f"cotangent per differentiable argument ({len(diff_args)}), got "
                    f"{type(cotangents).__name__}"
                    + (f" of length {len(cotangents)}" if isinstance(cotangents, tuple) else "")
                    + "."
                )
            return ([_tangent_at(cotangents, p, v) for p, v in zip(diff_paths, diff)],)

        primal.defvjp(primal_fwd, primal_bwd)
        (out_static, out_groups), output = primal(diff)
        call.finish(out_static.value, out_groups)
        return output
