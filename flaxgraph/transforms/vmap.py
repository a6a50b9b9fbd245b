"""``vmap`` and ``pmap`` over objects, with ``StateAxes`` and axis metadata.

See ``docs/design.md``, "Axis metadata".
Source: ``jax.vmap``, ``jax.pmap``; the "JAX-style NNX Transforms" FLIP flax#4107 and
Flax NNX's "Transformations" guide; the "Axis Metadata" FLIP flax#2434.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, overload

import jax

from flaxgraph.graphlib.registry import REGISTRY, VARIABLE
from flaxgraph.modes import DEFAULT, Mode, resolve
from flaxgraph.partitioning import map_boxes
from flaxgraph.transforms.aliasing import NamedRoots, PrefixSpec
from flaxgraph.transforms.calling_conventions import decorator, normalize_argnums, unbind
from flaxgraph.transforms.closure_reads import warn_reads
from flaxgraph.transforms.compiled import Traced
from flaxgraph.transforms.fastpath import CacheInfo
from flaxgraph.transforms.general import resolve_kwargs
from flaxgraph.transforms.jax_errors import mapped_input_error
from flaxgraph.transforms.lift import (
    OUT,
    AuxValue,
    Inner,
    InStatic,
    LeafSource,
    OutStatic,
    split_inputs,
)
from flaxgraph.transforms.lift_types import StateAxes, reject_lift_types
from flaxgraph.transforms.out_template import Templates
from flaxgraph.transforms.prefix_groups import (
    DonatedKey,
    donated_keys,
    prefix_keys,
    same_unless_donated,
)
from flaxgraph.transforms.rng_broadcast import RngWatch, warn_drawn, watch
from flaxgraph.transforms.transformed import Args, Kwargs, P, R, Transformed
from flaxgraph.variablelib.axes import (
    add_axis_of,
    drop_stacked_axis,
    pad_stacked_axis,
    remove_axis_of,
)
from flaxgraph.variablelib.closure_watch import watching
from flaxgraph.variablelib.variable import PARTITION_NAME


def is_axis(p: object) -> bool:
    return p is None or (isinstance(p, int) and not isinstance(p, bool))


AXES_SPEC = PrefixSpec(
    "in_axes",
    is_axis,
    StateAxes,
    "give an int or None for the whole object, or nnx.StateAxes({filter: axis, ...}).",
)
OUT_AXES_SPEC = PrefixSpec("out_axes", is_axis, StateAxes, AXES_SPEC.fix)


def args_prefix(in_axes: object, n_args: int, name: str = "in_axes") -> object:
    """``in_axes`` over the positional arguments (a leaf prefix or one entry per argument)."""
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if isinstance(in_axes, tuple):
        if len(in_axes) != n_args:
            raise ValueError(
                f"{name} has {len(in_axes)} entries but the function was called with "
                f"{n_args} positional arguments; give one entry per argument (or a single "
                "int/None for all)."
            )
    return in_axes


class AxisHooks:
    """The metadata hooks of one mapped call (active if ``transform_metadata`` has a partition)."""

    def __init__(self, transform_metadata: Mapping[str, Any]):
        self.params = dict(transform_metadata)
        self.active = PARTITION_NAME in self.params

    def on_inputs(self, leaves: list[Any], prefixes: list[Any]) -> None:
        for leaf, axis in zip(leaves, prefixes):
            if REGISTRY.kind_of(leaf) is VARIABLE and isinstance(axis, int):
                if self.active:
                    remove_axis_of(leaf, axis, self.params)
                else:
                    drop_stacked_axis(leaf, axis)

    def on_output_leaf(self, leaf: object, axis: object) -> None:
        if REGISTRY.kind_of(leaf) is VARIABLE and isinstance(axis, int):
            if self.active:
                add_axis_of(leaf, axis, self.params)
            else:
                pad_stacked_axis(leaf, axis)


class Mapped(Transformed[P, R]):
    """What ``nnx.vmap`` and ``nnx.pmap`` return (eager ``vmap``: broadcast groups by closure)."""

    def __init__(
        self,
        jax_map: Callable[..., Any],
        fun: Callable[P, R],
        bound: tuple[Any, ...],
        in_axes: object,
        out_axes: object,
        transform_metadata: Mapping[str, Any],
        donate_argnums: tuple[int, ...] = (),
        mode: Mode = DEFAULT,
        **jax_kwargs: Any,
    ):
        super().__init__(fun, bound)
        self.name = name = "vmap" if jax_map is jax.vmap else "pmap"
        reject_lift_types(mode, name, "in_axes", in_axes, plain="an int or None")
        reject_lift_types(mode, name, "out_axes", out_axes, plain="an int or None")
        self.in_axes, self.out_axes, self.mode = in_axes, out_axes, mode
        self.transform_metadata = transform_metadata
        self.donate_argnums = donate_argnums
        self.jax_kwargs = jax_kwargs
        in_keys = prefix_keys(in_axes, 0, spec=AXES_SPEC)
        self.out_keys = prefix_keys(in_axes, out_axes, 0, spec=AXES_SPEC)
        self.in_keys = donated_keys(in_keys, bool(donate_argnums))
        self.by_closure = by_closure = jax_map is jax.vmap
        self.fast = by_closure
        self.configured()
        self.closed_groups = [by_closure and k.prefix is None for k in self.in_keys]
        self.interned: dict[OutStatic, OutStatic] = {}  # equal OutStatics -> one object
        self.templates = Templates()  # step 4 without the walk for repeated calls
        donated = tuple(
            1 + i for i, k in enumerate(self.in_keys) if k.donated
        )  # after the AuxValue
        extra = {"donate_argnums": donated} if donate_argnums else {}
        # Each group travels in a 1-tuple with in_axes ``(k,)``: jax.pmap (0.10) misreads
        # ``(None, k, ...)`` as one axis per leaf when there are as many leaves as arguments.
        if not by_closure:
            self.mapped = jax_map(
                functools.partial(self.pure, None),
                in_axes=(None, *((k.prefix,) for k in self.in_keys)),
                out_axes=(None, tuple(self.out_keys)),
                **extra,
                **jax_kwargs,
            )
        else:
            # The current call's structure and closed-over groups, per thread (``pure``
            # reads them on entry and leaves the OutStatic), so jax.vmap sees mapped arrays only.
            self.current = threading.local()
            passed_axes = tuple(
                (k.prefix,) for k, c in zip(self.in_keys, self.closed_groups) if not c
            )
            self.mapped = jax_map(
                self.pure_closed,
                in_axes=passed_axes,
                out_axes=tuple(self.out_keys),
                **extra,
                **jax_kwargs,
            )

    def make_inner(
        self, metadata: AxisHooks, on_inputs: Callable[[list[Any], list[Any]], None]
    ) -> Inner:
        """Steps 3-4 of the lift for one trace, with the axis-metadata hooks."""
        by_closure = self.by_closure
        return Inner(
            self.fun,
            OUT_AXES_SPEC,
            self.out_keys,
            same_prefix=same_unless_donated,
            on_inputs=on_inputs,
            on_output_leaf=metadata.on_output_leaf,
            record_kept=by_closure,
            templates=self.templates if by_closure else None,
            mode=self.mode,
        )

    def pure(
        self, closed: Sequence[Any] | None, static: AuxValue[Any], *boxed: tuple[list[Any]]
    ) -> Any:
        """The function ``jax_map`` maps: merge, move the axis metadata, call ``fun``, split."""
        passed = iter(boxed)
        groups = [closed[i] if closed is not None and c else next(passed)[0]
                  for i, c in enumerate(self.closed_groups)]  # fmt: skip
        in_static: InStatic[Any] = static.value
        a_prefix = in_static.extra.prefix
        metadata = AxisHooks(self.transform_metadata)
        in_prefixes = [self.in_keys[g] for g in in_static.slots.groups]
        out_axes = self.out_axes
        rngs: list[RngWatch | None] = [None]

        def on_inputs(leaves: list[Any], prefixes: list[Any]) -> None:
            axes = [p.prefix for p in prefixes]
            metadata.on_inputs(leaves, axes)
            rngs[0] = watch(in_static.graphdef.leaf_paths, leaves, axes)

        def call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
            params = metadata.params
            args = map_boxes(a_prefix, args, lambda b, axis: b.remove_axis(axis, params))
            if self.by_closure:
                out = fn(*args, **kwargs)
            else:  # pmap compiles and caches: captured Variables become constants
                with watching() as read:
                    out = fn(*args, **kwargs)
                warn_reads(read, self.fun, self.name)
            where = NamedRoots(("args", "kwargs"), (args, kwargs)).where
            warn_drawn(rngs[0], where, self.name, "in_axes")  # flax#4195
            return None, map_boxes(out_axes, out, lambda b, axis: b.add_axis(axis, params))

        _, out_static, out_groups = self.make_inner(metadata, on_inputs).run(
            in_static, groups, in_prefixes, (a_prefix, 0), out_axes, call
        )
        if self.by_closure:
            # One object for equal structures (the write-back is compiled per OutStatic object).
            if len(self.interned) > 64:
                self.interned.clear()
            out_static = self.interned.setdefault(out_static, out_static)
        return AuxValue(out_static), out_groups

    def pure_closed(self, *boxed: tuple[list[Any]]) -> object:
        """``pure`` for eager ``vmap``, reading and leaving its statics on ``current``."""
        current = self.current
        out, out_groups = self.pure(current.closed, current.static, *boxed)
        current.out = out
        return out_groups

    def run_mapped(self, in_static: InStatic[Any], *groups: list[Any]) -> object:
        """``(AuxValue(out_static), out_groups)`` for one call."""
        static = AuxValue(in_static)
        if not self.by_closure:
            return self.mapped(static, *((g,) for g in groups))
        current = self.current
        current.closed = [g if c else None for g, c in zip(groups, self.closed_groups)]
        current.static = static
        try:
            out_groups = self.mapped(*((g,) for g, c in zip(groups, self.closed_groups) if not c))
        finally:  # none of this call's arrays stay behind (they are the caller's)
            current.closed = current.static = None
        # the OutStatic (no arrays) stays on a failed call, for call_general's error message
        out, current.out = current.out, None
        return out, out_groups

    def call_general(
        self, args: Args, kwargs: Kwargs, dyn_args: Args, dyn_kwargs: Kwargs, statics: Args
    ) -> object:
        axes = _shift_axes(self.in_axes, len(self.bound))
        if isinstance(axes, (tuple, list)) and len(axes) > len(args) and kwargs:
            args, kwargs = resolve_kwargs(self.fun, args, kwargs)
        a_prefix = args_prefix(axes, len(args))
        call = split_inputs(args, kwargs, (a_prefix, 0), AXES_SPEC, self.mode)
        if self.donate_argnums:
            positions = {i % len(args) for i in self.donate_argnums}
            call.prefixes = [
                DonatedKey(p, path[0] == 0 and path[1] in positions)
                for p, path in zip(call.prefixes, call.graphdef.leaf_paths)
            ]
        else:
            call.prefixes = [DonatedKey(p, False) for p in call.prefixes]
        slots, groups = call.groups(self.in_keys)
        in_static = InStatic.make(
            graphdef=call.graphdef, slots=slots, extra=_CallPrefix(a_prefix, len(args))
        )
        entry = Traced(functools.partial(self.run_mapped, in_static))
        try:
            out, out_groups = entry.call(groups)
        except ValueError as error:
            if self.by_closure:
                last = getattr(self.current, "out", None)  # AuxValue(OutStatic) of this trace
                self.current.out = None
                better = _batched_broadcast_error(error, getattr(last, "value", None), self.name)
                if better is not None:
                    raise better from None
            better = mapped_input_error(
                call.graphdef.leaf_paths,
                call.values,
                [p.prefix for p in call.prefixes],
                NamedRoots(("args", "kwargs"), (args, kwargs)).where,
                self.name,
                self.jax_kwargs.get("axis_size"),
            )
            if better is not None:  # JAX named flaxgraph's groups; this names the paths
                raise better from None
            raise
        result = call.finish(out, out_groups)
        self.remember(
            call, out, entry, slots, len(self.in_keys), args, kwargs,
            donated=bool(self.donate_argnums),
        )  # fmt: skip
        return result


def _mapped(
    jax_map: Callable[..., Any],
    f: Callable[..., Any],
    in_axes: object,
    out_axes: object,
    transform_metadata: Mapping[str, Any],
    donate_argnums: tuple[int, ...] = (),
    mode: Mode = DEFAULT,
    **jax_kwargs: object,
) -> Mapped[Any, Any]:
    """vmap and pmap share everything but the JAX transform."""
    name = "vmap" if jax_map is jax.vmap else "pmap"
    inner_f, bound = unbind(f, name)
    return Mapped(
        jax_map, inner_f, bound, in_axes, out_axes, transform_metadata, donate_argnums, mode,
        **jax_kwargs,
    )  # fmt: skip


_BATCHED = re.compile(
    r"at vmap out_axes\[(\d+)\]\[(\d+)\], got axis spec None but output was batched on "
    r"axis (\d+)"
)


def _batched_broadcast_error(
    error: ValueError, out_static: OutStatic | None, name: str
) -> ValueError | None:
    """JAX's "batched where the axis is None" error, naming the leaf's path."""
    match = _BATCHED.search(str(error))
    if match is None or not isinstance(out_static, OutStatic):
        return None
    g, i, axis = (int(x) for x in match.groups())
    paths = out_static.graphdef.leaf_paths
    found = [p for p, src in zip(paths, out_static.sources) if src == LeafSource(OUT, g, i)]
    if not found:
        return None
    path = found[0]
    root = ("output", "args", "kwargs")[path[0]]  # type: ignore[call-overload]
    where = root + "".join(f"[{k!r}]" for k in path[1:])
    return ValueError(
        f"at {name} {where}, got axis spec None but output was batched on axis {axis}: "
        f"the value at {where} is broadcast (out axis None) but became different per "
        f"instance inside nnx.{name} (e.g. updated under a mapped nnx.cond).\n"
        f"  1. map it instead (an int axis, e.g. in a StateAxes) so each instance keeps "
        "its own value;\n"
        "  2. or do not update it inside the transform (or update it the same way for "
        "every instance)."
    )


class _CallPrefix:
    """One call's per-argument ``in_axes`` as static data, hashed by its argument count."""

    __slots__ = ("n_args", "prefix")

    def __init__(self, prefix: object, n_args: int):
        self.prefix, self.n_args = prefix, n_args

    def __hash__(self) -> int:
        return hash(("in_axes", self.n_args))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CallPrefix) and other.n_args == self.n_args


def _shift_axes(in_axes: object, n_bound: int) -> object:
    """With a bound instance, ``in_axes`` gets axis 0 for the instance in front."""
    if n_bound and isinstance(in_axes, (tuple, list)):
        return (0, *in_axes)
    return in_axes


@overload
def vmap(
    f: Callable[P, R],
    *,
    in_axes: object = ...,
    out_axes: object = ...,
    axis_name: object = ...,
    axis_size: int | None = ...,
    spmd_axis_name: object = ...,
    transform_metadata: Mapping[str, Any] = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
) -> Mapped[P, R]: ...


@overload
def vmap(
    f: None = None,
    *,
    in_axes: object = ...,
    out_axes: object = ...,
    axis_name: object = ...,
    axis_size: int | None = ...,
    spmd_axis_name: object = ...,
    transform_metadata: Mapping[str, Any] = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
) -> Callable[[Callable[P, R]], Mapped[P, R]]: ...


def vmap(
    f: Callable[P, R] | None = None,
    *,
    in_axes: object = 0,
    out_axes: object = 0,
    axis_name: object = None,
    axis_size: int | None = None,
    spmd_axis_name: object = None,
    transform_metadata: Mapping[str, Any] = {},
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Mapped[P, R] | Callable[[Callable[P, R]], Mapped[P, R]]:
    """``jax.vmap`` for functions of objects.

    Args:
      f: the function (or method: ``@nnx.vmap`` on ``__init__`` builds a stack of
        weights in ``self``).
      in_axes: an int, ``None``, or one entry per positional argument; at an
        object, an int/None for all its state, ``StateAxes({filter: axis})``, or a
        per-Variable prefix matched by path (``nnx.prefix(obj, {filter: axis})`` or
        a ``State`` of axes). Keyword arguments are mapped on axis 0, or bound to
        their positions when ``in_axes`` has entries for them.
      out_axes: the same over the output.
      axis_name, axis_size, spmd_axis_name: as in ``jax.vmap``; ``axis_size`` is
        required when nothing is mapped.
      transform_metadata: parameters of the Variables' ``add_axis``/``remove_axis``
        hooks, e.g. ``{nnx.PARTITION_NAME: 'batch'}``.
      graph, graph_updates: the traversal mode (see ``jit``); ``StateAxes`` needs
        graph updates.

    Returns:
      The vectorized function (a ``Mapped``; given no ``f``, a decorator). Changes
      to the arguments' objects are written back; outputs aliasing inputs are the
      caller's objects; ``cache_info()`` as ``jit``'s.

    Raises:
      InconsistentAliasingError (``ValueError``): one object gets different axes.
      PrefixError (``ValueError``): ``in_axes``/``out_axes`` do not fit the arguments.
      ValueError: when created, the axes hold a Variable, a graph node (graph
        mode), or a lift type without graph updates; when called, a broadcast value came back
        batched, or the entries, sizes or ranks do not fit (naming each path).
      TraceContextError (``ValueError``): a captured object is mutated or returned.

    Example::

      >>> import jax, jax.numpy as jnp, flaxgraph as nnx
      >>> class Weights(nnx.Module):
      ...   def __init__(self, kernel, bias):
      ...     self.kernel, self.bias = nnx.Param(kernel), nnx.Param(bias)
      >>> weights = Weights(jnp.ones((10, 2, 3)), jnp.zeros((10, 3)))
      >>> x = jnp.ones((10, 2))
      >>> nnx.vmap(lambda w, x: x @ w.kernel + w.bias, in_axes=0, out_axes=1)(weights, x).shape
      (3, 10)
    """
    make = functools.partial(
        _mapped,
        jax.vmap,
        in_axes=in_axes,
        out_axes=out_axes,
        transform_metadata=transform_metadata,
        mode=resolve(graph, graph_updates),
        axis_name=axis_name,
        axis_size=axis_size,
        spmd_axis_name=spmd_axis_name,
    )
    return make if f is None else make(f)


@decorator
def pmap(
    f: Callable[..., Any],
    axis_name: object = None,
    *,
    in_axes: object = 0,
    out_axes: object = 0,
    static_broadcasted_argnums: int | Iterable[int] = (),
    devices: Sequence[Any] | None = None,
    backend: str | None = None,
    axis_size: int | None = None,
    donate_argnums: int | Iterable[int] = (),
    transform_metadata: Mapping[str, Any] = {},
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[..., Any]:
    """``jax.pmap`` for functions of objects (see ``vmap``; the mapped axis runs on devices).

    Args:
      f: the function.
      axis_name, in_axes, out_axes, devices, backend, axis_size: as in ``jax.pmap``.
      static_broadcasted_argnums: compile-time constant arguments (hashable, no objects).
      donate_argnums: arguments whose buffers may be reused.
      transform_metadata, graph, graph_updates: as in ``vmap``.

    Returns:
      The mapped function (a ``StaticPmapped`` with static arguments, else a ``Mapped``).
    """
    mode = resolve(graph, graph_updates)
    statics = normalize_argnums(static_broadcasted_argnums)
    if statics:  # one pmapped function per distinct static value
        options = dict(axis_name=axis_name, devices=devices, backend=backend, axis_size=axis_size)
        donate = normalize_argnums(donate_argnums)
        return StaticPmapped(
            f, statics, in_axes, out_axes, donate, transform_metadata, mode, options
        )
    return _mapped(
        jax.pmap,
        f,
        in_axes,
        out_axes,
        transform_metadata,
        donate_argnums=normalize_argnums(donate_argnums),
        mode=mode,
        axis_name=axis_name,
        devices=devices,
        backend=backend,
        axis_size=axis_size,
    )


class StaticPmapped(Transformed[P, R]):
    """What ``nnx.pmap`` returns with static arguments: a ``Mapped`` per value (``by_static``)."""

    fast = False

    def __init__(
        self,
        fun: Callable[P, R],
        statics: tuple[int, ...],
        in_axes: object,
        out_axes: object,
        donate: tuple[int, ...],
        transform_metadata: Mapping[str, Any],
        mode: Mode,
        options: dict[str, Any],
    ):
        super().__init__(fun)
        self.statics = statics
        self.in_axes, self.out_axes, self.donate = in_axes, out_axes, donate
        self.transform_metadata, self.mode, self.options = transform_metadata, mode, options
        self.by_static: dict[Any, Mapped[Any, Any]] = {}

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if self.bound:
            args = (*self.bound, *args)  # type: ignore[assignment]
        n = len(args)
        pos = sorted(i % n for i in self.statics)
        key = tuple(args[i] for i in pos)
        mapped = self.by_static.get(key)
        if mapped is None:
            mapped = self.by_static[key] = self.for_static(pos, key)
        typed: R = mapped(*(a for i, a in enumerate(args) if i not in pos), **kwargs)
        return typed

    def for_static(self, pos: list[int], key: tuple[Any, ...]) -> Mapped[Any, Any]:
        """The ``Mapped`` of the function with the arguments at ``pos`` set to ``key``."""
        f = self.fun

        def with_statics(*dyn: Any, **kw: Any) -> object:
            full = list(dyn)
            for i, v in zip(pos, key):
                full.insert(i, v)
            return f(*full, **kw)

        axes = self.in_axes
        if isinstance(axes, (tuple, list)):
            axes = tuple(a for i, a in enumerate(axes) if i not in pos)
        donate = tuple(d - sum(1 for p in pos if p < d) for d in self.donate if d not in pos)
        return _mapped(
            jax.pmap,
            with_statics,
            axes,
            self.out_axes,
            self.transform_metadata,
            donate_argnums=donate,
            mode=self.mode,
            **self.options,
        )

    def cache_info(self, verbose: bool = False) -> CacheInfo:
        """``CacheInfo(general_calls, plans)`` summed over the static values seen."""
        infos = [m.cache_info(verbose) for m in self.by_static.values()]
        return CacheInfo(sum(i.general_calls for i in infos), sum(i.plans for i in infos))
