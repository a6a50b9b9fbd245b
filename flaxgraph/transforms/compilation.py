"""``jit``: compile a function of objects, keeping reference semantics.

``nnx.jit(f)`` accepts Modules, Variables and Rngs anywhere in ``f``'s
arguments and outputs, compiles once per graph structure, and writes every
change ``f`` makes (values, RNG counters, new or deleted attributes, new shared
references) back into the caller's objects. ``StateSharding`` in
``in_shardings``/``out_shardings`` places each sub-state of an object on its
own sharding.

Source: ``jax.jit`` plus the "JAX-style NNX Transforms" FLIP flax#4107 and Flax NNX's
"Transformations" guide.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
from jax.sharding import PartitionSpec, Sharding

from flaxgraph.modes import resolve
from flaxgraph.transforms.aliasing import PrefixSpec
from flaxgraph.transforms.calls import (
    bind,
    decorator,
    infer_argnums_and_argnames,
    merge_static,
    normalize_argnames,
    normalize_argnums,
    split_static,
    unbind,
)
from flaxgraph.transforms.compiled import Compiled, Lowered
from flaxgraph.transforms.fastpath import MISS, Plan, PlanCache, plan_key, same_trace
from flaxgraph.transforms.lift import Inner, InStatic, split_inputs
from flaxgraph.transforms.lift_types import StateSharding, reject_lift_types
from flaxgraph.transforms.prefix_groups import prefix_keys


class _Unspecified:
    def __repr__(self) -> str:
        return "UNSPECIFIED"


UNSPECIFIED: Any = _Unspecified()


def _is_sharding(p: Any) -> bool:
    return p is None or p is UNSPECIFIED or isinstance(p, (Sharding, PartitionSpec))


SHARDING_SPEC = PrefixSpec(
    "in_shardings",
    _is_sharding,
    StateSharding,
    "give a Sharding (or None) for the whole object, or nnx.StateSharding({filter: sharding}).",
    wildcard=UNSPECIFIED,
)
OUT_SHARDING_SPEC = PrefixSpec(
    "out_shardings", _is_sharding, StateSharding, SHARDING_SPEC.fix, wildcard=UNSPECIFIED
)


def _split_prefix(prefix: Any, n_args: int) -> tuple[Any, Any]:
    """A user prefix over the positional arguments -> ``(args_prefix, kwargs_prefix)``."""
    if isinstance(prefix, (tuple, list)) and not _is_sharding(prefix):
        if len(prefix) != n_args:
            raise ValueError(
                f"in_shardings has {len(prefix)} entries but the function got {n_args} "
                "positional arguments (static arguments excluded); give one per argument."
            )
        return tuple(prefix), UNSPECIFIED
    return prefix, prefix


@decorator
def jit(
    fun: Callable[..., Any],
    *,
    in_shardings: Any = UNSPECIFIED,
    out_shardings: Any = UNSPECIFIED,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Iterable[str] | None = None,
    keep_unused: bool = False,
    device: Any = None,
    backend: str | None = None,
    inline: bool = False,
    compiler_options: dict[str, Any] | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[..., Any]:
    """Compiles ``fun``, which may take and return objects, with ``jax.jit``.

    Args:
      fun: the function (or method, or Module instance) to compile; a bound method
        of a Module raises ``ValueError`` (as in Flax NNX 0.12): decorate the method
        or pass ``MyClass.method`` and the instance.
      in_shardings: as in ``jax.jit``, a prefix over the positional arguments
        (static ones excluded); at an object, a Sharding for all its state or
        ``StateSharding({filter: sharding, ...})``. Unspecified by default. The
        updated state of an input object leaves with its in_sharding.
      out_shardings: the same over the output.
      static_argnums, static_argnames: arguments treated as compile-time constants
        (must be hashable). As in ``jax.jit``, given only one of them the other is
        inferred from ``fun``'s signature, so a static argument may be passed by
        position or by keyword (likewise for donation).
      donate_argnums, donate_argnames: arguments whose buffers may be reused for the
        outputs; objects' Variables get their new values, so donated objects stay
        usable.
      keep_unused, device, backend, inline, compiler_options: as in ``jax.jit``.
      graph: ``False`` for tree mode (objects as plain pytrees; a shared Variable
        is an error); ``None``: the default (``nnx.set_graph_mode``).
      graph_updates: ``False``: only Variable values come back to the caller, not
        attribute or structural changes, and input objects may not be returned;
        ``None``: the default (``nnx.set_graph_updates``). See ``flaxgraph.modes``.

    Returns:
      A function with ``fun``'s signature. Calling it updates the objects passed to
      it in place (values and structure) and returns ``fun``'s output; an output
      that is an input object is the caller's same object. Its ``lower(*args)``
      gives JAX's lowering, whose ``compile()`` is a function of the same
      arguments (objects included) that updates them the same way.

    Raises:
      InconsistentAliasingError (``ValueError``): one object reaches ``fun`` along
        paths with different shardings; the message lists every path.
      TraceContextError (``ValueError``): ``fun`` mutates or returns an object it
        captured by closure instead of receiving it as an argument.
      PrefixError (``ValueError``): ``in_shardings``/``out_shardings`` do not fit.
      SharedReferenceError (``ValueError``): in tree mode, a Variable is reachable
        twice among the arguments or outputs; without graph updates, ``fun``
        returns an input object. The message lists the paths.
      ValueError: a ``StateSharding`` is given with ``graph=False`` or
        ``graph_updates=False`` (when ``jit`` is created).

    Compilation is cached on the graph structure (GraphDef) and the arrays'
    shapes: a new object with the same structure reuses the compiled code; a
    structural change (a new attribute…) compiles again. Repeated calls on the same
    objects take a fast path (see ``guides/performance.md``); the returned function's
    ``cache_info()`` tells how many calls took the general path instead.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class Counter(nnx.Module):
      ...   def __init__(self): self.count = nnx.BatchStat(jnp.array(0))
      >>> @nnx.jit
      ... def step(c, x):
      ...   c.count += 1
      ...   return x * 2
      >>> c = Counter(); _ = step(c, 1.0); _ = step(c, 2.0)
      >>> int(c.count.value)
      2

    Source: ``jax.jit``; lifting per the "JAX-style NNX Transforms" FLIP flax#4107.
    """
    mode = resolve(graph, graph_updates)
    reject_lift_types(
        mode, "jit", "in_shardings", in_shardings, out_shardings, plain="a Sharding (or None)"
    )
    inner_fun, bound = unbind(fun, "jit")
    # For a Module instance, argnums and in_shardings count the
    # explicit arguments (as jax.jit does, and as grad/remat here do): shift past self.
    static_nums = tuple(n + len(bound) if n >= 0 else n for n in normalize_argnums(static_argnums))
    static_names = normalize_argnames(static_argnames)
    donate_nums = tuple(n + len(bound) if n >= 0 else n for n in normalize_argnums(donate_argnums))
    if bound and isinstance(in_shardings, (tuple, list)) and not _is_sharding(in_shardings):
        in_shardings = (UNSPECIFIED, *in_shardings)
    donate_names = normalize_argnames(donate_argnames)
    # As jax.jit: a static (donated) argument named in argnames may also be passed
    # by position, and one numbered in argnums by keyword.
    static_nums, static_names = infer_argnums_and_argnames(inner_fun, static_nums, static_names)
    donate_nums, donate_names = infer_argnums_and_argnames(inner_fun, donate_nums, donate_names)

    in_keys_sharding = prefix_keys(in_shardings, spec=SHARDING_SPEC)
    if UNSPECIFIED not in in_keys_sharding:  # keyword arguments get no in_sharding
        in_keys_sharding.append(UNSPECIFIED)
    in_keys = [(s, d) for s in in_keys_sharding for d in (False, True)]
    out_keys = prefix_keys(in_shardings, out_shardings, spec=SHARDING_SPEC) or [UNSPECIFIED]
    if UNSPECIFIED not in out_keys:
        out_keys.append(UNSPECIFIED)

    inner = Inner(
        inner_fun,
        OUT_SHARDING_SPEC,
        out_keys,
        same_prefix=lambda in_key, out_key: not in_key[1] and in_key[0] == out_key,
        record_kept=True,
        mode=mode,
    )

    def pure(in_static: InStatic, entry: Compiled, with_static: bool, *groups: list[Any]) -> Any:
        statics, n_args = in_static.extra
        args_prefix, kwargs_prefix = _split_prefix(in_shardings, n_args)
        in_prefixes = [in_keys[g] for g, _ in in_static.slots]

        def call(f: Callable[..., Any], args: Any, kwargs: Any) -> Any:
            full_args, full_kwargs = merge_static(args, kwargs, statics)
            return None, f(*full_args, **full_kwargs)

        _, out_static, out_groups = inner.run(
            in_static, groups, in_prefixes, (args_prefix, kwargs_prefix), out_shardings, call
        )
        return entry.record(out_static, out_groups, with_static)

    jit_kwargs: dict[str, Any] = dict(
        keep_unused=keep_unused, device=device, backend=backend, inline=inline
    )
    if compiler_options is not None:
        jit_kwargs["compiler_options"] = compiler_options
    if in_shardings is not UNSPECIFIED:
        jit_kwargs["in_shardings"] = tuple(_jax_sharding(s) for s, _ in in_keys)
    jit_kwargs["donate_argnums"] = tuple(i for i, (_, d) in enumerate(in_keys) if d)
    # One jax.jit per input structure, with the structure bound in and the output
    # structure recorded on the side (see compiled.py): JAX's per-call work is then
    # the arrays only, and equal structures (a new instance of the same model) share
    # the compiled code.
    compiled: dict[InStatic, Compiled] = {}

    def compiled_for(in_static: InStatic) -> Compiled:
        entry = compiled.get(in_static)
        if entry is None:

            def make(entry: Compiled, with_static: bool) -> Callable[..., Any]:
                kwargs = dict(jit_kwargs)
                # The updated state of an input keeps its in_sharding (as in Flax NNX
                # 0.12): the output groups of kept inputs are keyed by it.
                if out_shardings is not UNSPECIFIED or in_shardings is not UNSPECIFIED:
                    shardings = tuple(_jax_sharding(s) for s in out_keys)
                    kwargs["out_shardings"] = (None, shardings) if with_static else shardings
                return jax.jit(functools.partial(pure, in_static, entry, with_static), **kwargs)

            entry = compiled[in_static] = Compiled(make)
        return entry

    def prepare(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        dyn_args, dyn_kwargs, statics = split_static(args, kwargs, static_nums, static_names)
        args_prefix, kwargs_prefix = _split_prefix(in_shardings, len(dyn_args))
        call = split_inputs(dyn_args, dyn_kwargs, (args_prefix, kwargs_prefix), SHARDING_SPEC, mode)
        if donate_nums or donate_names:
            donated_positions = _donated_positions(args, donate_nums, static_nums)
            call.prefixes = [
                (p, _is_donated(path, donated_positions, donate_names))
                for p, path in zip(call.prefixes, call.graphdef.leaf_paths)
            ]
        else:
            call.prefixes = [(p, False) for p in call.prefixes]
        slots, groups = call.groups(in_keys)
        if in_shardings is not UNSPECIFIED:
            _place(call, slots, groups, in_keys)
        # The prefix trees may hold lists and dicts (unhashable): pure rebuilds them.
        in_static = InStatic(call.graphdef, slots, (statics, len(dyn_args)))
        return call, compiled_for(in_static), groups, slots

    plans = PlanCache()
    place = in_shardings is not UNSPECIFIED

    @functools.wraps(inner_fun)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if static_nums or static_names:
            dyn_args, dyn_kwargs, statics = split_static(args, kwargs, static_nums, static_names)
        else:
            dyn_args, dyn_kwargs, statics = args, kwargs, ()
        # Fast path (see fastpath.py): same argument structure as a recent call.
        if not place:
            plan = plans.recent
            if plan is not None:
                result = plan.run(dyn_args, dyn_kwargs, statics)
                if result is not MISS:
                    return result
            result = plans.run_by_key(dyn_args, dyn_kwargs, statics)
            if result is not MISS:
                return result
        plans.general_calls += 1
        call, entry, groups, slots = prepare(args, kwargs)
        out, out_groups = entry.call(groups)
        result = call.finish(out, out_groups)
        key = None if place else plan_key(dyn_args, dyn_kwargs)
        if key is not None and out.inputs_kept and same_trace(call):
            donated = bool(donate_nums or donate_names)
            plan = Plan(
                call, entry, slots, len(in_keys), dyn_args, dyn_kwargs, statics, donated=donated
            )
            plans.put((key, statics), plan)
        return result

    def lower(*args: Any, **kwargs: Any) -> Lowered:
        """``jax.jit(...).lower`` of the compiled pure function for these arguments;
        its ``compile()`` takes the same arguments (see ``compiled.Lowered``)."""
        full = (*bound, *args)
        _, entry, groups, _ = prepare(full, kwargs)
        return Lowered(entry.lower(groups), entry, prepare, full[: len(full) - len(args)])

    result = bind(wrapper, bound, fun)
    result.lower = lower  # type: ignore[attr-defined]
    result.cache_info = plans.info  # type: ignore[attr-defined]
    return result


def _place(call: Any, slots: Any, groups: Any, keys: Sequence[Any]) -> None:
    """Puts concrete input arrays on their ``Sharding`` before the call and makes the
    caller's leaves point to the placed arrays, so an object's Variables end up on the
    requested sharding even when ``fun`` leaves them unchanged (and are transferred
    once, not on every call)."""
    for (sharding, _), group in zip(keys, groups):
        if not isinstance(sharding, Sharding):
            continue
        for j, v in enumerate(group):
            if (
                isinstance(v, jax.Array)
                and not isinstance(v, jax.core.Tracer)
                and v.sharding != sharding
            ):
                group[j] = jax.device_put(v, sharding)
    call.values = [groups[g][j] for g, j in slots]


def _jax_sharding(s: Any) -> Any:
    return None if s is UNSPECIFIED else s


def _donated_positions(
    args: tuple[Any, ...], donate_nums: tuple[int, ...], static_nums: tuple[int, ...]
) -> set[int]:
    """Donated positions renumbered after removing static arguments."""
    n = len(args)
    statics = {i % n for i in static_nums if -n <= i < n}
    positions = set()
    for i in donate_nums:
        if not -n <= i < n:  # not passed by position (e.g. a donate_argnames by keyword)
            continue
        j = i % n
        positions.add(j - sum(1 for s in statics if s < j))
    return positions


def _is_donated(path: Any, positions: set[int], names: tuple[str, ...]) -> bool:
    root, key = path[0], path[1] if len(path) > 1 else None
    return (root == 0 and key in positions) or (root == 1 and key in names)
