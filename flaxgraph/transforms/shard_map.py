"""``shard_map``: run a function of objects once per device, on each device's shard.

Source: ``jax.shard_map``; Flax NNX 0.12 ``nnx.shard_map``; lifting per the
"JAX-style NNX Transforms" FLIP flax#4107; the local sharding names: ``docs/design.md``,
"Axis metadata".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple, overload

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE
from flaxgraph.modes import Mode, resolve
from flaxgraph.transforms.aliasing import NamedRoots, PrefixError, PrefixSpec, kind_name
from flaxgraph.transforms.calling_conventions import unbind
from flaxgraph.transforms.compiled import Compiled, JitFunctions
from flaxgraph.transforms.lift import OUT, Call, Inner, InStatic, OutStatic, Slots, split_inputs
from flaxgraph.transforms.lift_types import StateSharding, reject_lift_types
from flaxgraph.transforms.prefix_groups import prefix_keys
from flaxgraph.transforms.transformed import Args, Kwargs, P, R, Transformed
from flaxgraph.variablelib.variable import metadata_of, write_metadata

_REPLICATED = PartitionSpec()  # type: ignore[no-untyped-call]
MeshLike = jax.sharding.Mesh | jax.sharding.AbstractMesh
"""A mesh ``shard_map`` maps over: a concrete ``Mesh`` or an ``AbstractMesh``."""


def _is_spec(p: object) -> bool:
    return p is None or isinstance(p, PartitionSpec)


SPECS_SPEC = PrefixSpec(
    "in_specs",
    _is_spec,
    StateSharding,
    "give a PartitionSpec for the whole object (P() replicates it), or "
    "nnx.StateSharding({filter: PartitionSpec, ...}).",
)
OUT_SPECS_SPEC = PrefixSpec("out_specs", _is_spec, StateSharding, SPECS_SPEC.fix)


def _args_prefix(in_specs: object, n_args: int) -> object:
    """``in_specs`` over the positional arguments (one entry each, or one for all)."""
    if isinstance(in_specs, (tuple, list)):
        if len(in_specs) != n_args:
            raise ValueError(
                f"in_specs has {len(in_specs)} entries but the function was called with "
                f"{n_args} positional arguments.\nFix: give one entry per argument (or a "
                "single PartitionSpec for all of them)."
            )
        return tuple(in_specs)
    return in_specs


def _jax_spec(p: PartitionSpec | None) -> PartitionSpec:
    return _REPLICATED if p is None else p


def _local_names(names: tuple[Any, ...], manual: frozenset[Any]) -> tuple[Any, ...]:
    """Sharding names as seen inside the body: manual axes dropped (``None``)."""
    out = []
    for entry in names:
        if isinstance(entry, tuple):
            kept = tuple(n for n in entry if n not in manual)
            out.append(kept if len(kept) > 1 else (kept[0] if kept else None))
        else:
            out.append(None if entry in manual else entry)
    return tuple(out)


class SavedMetadata(NamedTuple):
    """A Variable's metadata inside ``shard_map`` (``local``) and outside it (``original``)."""

    local: dict[str, Any]
    original: dict[str, Any]


class LocalView:
    """The metadata hooks of one shard_map trace: manual axes' names dropped inside."""

    def __init__(self, manual: frozenset[Any]):
        self.manual = manual
        self.saved: RefMap[SavedMetadata] = RefMap()  # by Variable

    def on_inputs(self, leaves: list[Any], prefixes: list[Any]) -> None:
        for leaf in leaves:
            if REGISTRY.kind_of(leaf) is not VARIABLE:
                continue
            original = metadata_of(leaf)
            names = original.get("out_sharding")
            if not isinstance(names, tuple):
                continue
            new = _local_names(names, self.manual)
            if new != names:
                local = {**original, "out_sharding": new}
                write_metadata(leaf, local)
                self.saved[leaf] = SavedMetadata(local, original)

    def on_output_leaf(self, leaf: Any, prefix: object) -> None:
        entry = self.saved.get(leaf) if REGISTRY.kind_of(leaf) is VARIABLE else None
        if entry is not None and metadata_of(leaf) is entry.local:
            write_metadata(leaf, entry.original)


def _spec_problem(
    spec: Any, value: object, mesh: MeshLike, manual: frozenset[Any], whole: bool
) -> str | None:
    """What is wrong with ``spec`` for ``value``, or ``None`` (``whole``: also divisibility)."""
    if spec is None:
        return None
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    names_at = [e if isinstance(e, tuple) else (() if e is None else (e,)) for e in spec]
    for name in (n for names in names_at for n in names):
        if name not in sizes:
            return (
                f"names the mesh axis {name!r}, which the mesh does not have (its axes: "
                f"{tuple(mesh.axis_names)}).\nFix: use one of the mesh's axis names."
            )
        if name not in manual:
            return (
                f"names the mesh axis {name!r}, which is not in axis_names "
                f"{tuple(sorted(manual, key=str))}: a spec may only name manual axes.\n"
                "Fix: add it to axis_names, or leave it out of the spec."
            )
    for leaf in jax.tree.leaves(value):
        problem = _shape_problem(spec, names_at, np.shape(leaf), sizes, whole)
        if problem is not None:
            return problem
    return None


def _shape_problem(
    spec: PartitionSpec,
    names_at: list[tuple[Any, ...]],
    shape: tuple[int, ...],
    sizes: dict[Any, int],
    whole: bool,
) -> str | None:
    """``_spec_problem`` for one array of shape ``shape``."""
    if len(spec) > len(shape):
        entries = "1 entry" if len(spec) == 1 else f"{len(spec)} entries"
        return (
            f"has {entries}, but the value has rank {len(shape)} (shape {tuple(shape)}).\n"
            "Fix: give at most one entry per dimension (P() replicates), or a "
            "StateSharding with its own spec for this value."
        )
    for dim, names in enumerate(names_at):
        devices = math.prod(sizes[n] for n in names)
        if whole and devices > 1 and shape[dim] % devices:
            return (
                f"splits dimension {dim} (size {shape[dim]}) over {devices} devices "
                f"({', '.join(map(repr, names))}), which does not divide it.\nFix: make the "
                "dimension a multiple of the mesh axis size, or replicate it (None)."
            )
    return None


class ShardMapped(Transformed[P, R]):
    """What ``nnx.shard_map`` returns: ``fun`` per shard, in one ``jax.jit`` per input structure."""

    def __init__(
        self,
        fun: Callable[P, R],
        bound: tuple[Any, ...],
        mesh: MeshLike,
        in_specs: object,
        out_specs: object,
        axis_names: AbstractSet[Any],
        check_vma: bool,
        mode: Mode,
    ):
        super().__init__(fun, bound)
        if bound and isinstance(in_specs, (tuple, list)):
            # ``nnx.shard_map(model, ...)``: the instance is the first argument; an
            # in_specs tuple covers the explicit arguments, the instance is replicated.
            in_specs = (_REPLICATED, *in_specs)
        self.mesh, self.in_specs, self.out_specs = mesh, in_specs, out_specs
        self.axis_names, self.mode = axis_names, mode
        self.manual = frozenset(axis_names) if axis_names else frozenset(mesh.axis_names)
        self.in_keys = prefix_keys(in_specs, spec=SPECS_SPEC)
        self.out_keys = prefix_keys(in_specs, out_specs, spec=SPECS_SPEC)
        self.map_kwargs: dict[str, Any] = dict(mesh=mesh, check_vma=check_vma)
        if axis_names:
            self.map_kwargs["axis_names"] = frozenset(axis_names)
        self.jitted_fn = JitFunctions()
        self.last_trace: list[Any] = []  # the current call's last trace: (out_static, roots)

    def pure(
        self, in_static: InStatic[Any], entry: Compiled, with_static: bool, *groups: Any
    ) -> object:
        """The per-shard function: merge (local sharding names), call ``fun``, split."""
        args_prefix = _args_prefix(self.in_specs, in_static.extra)
        view = LocalView(self.manual)
        inner = Inner(
            self.fun,
            OUT_SPECS_SPEC,
            self.out_keys,
            on_inputs=view.on_inputs,
            on_output_leaf=view.on_output_leaf,
            record_kept=True,
            mode=self.mode,
        )
        roots: list[Any] = []

        def call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: object) -> object:
            out = fn(*args)
            roots.extend((out, args, kwargs))
            return None, out

        in_prefixes = [self.in_keys[g] for g in in_static.slots.groups]
        _, out_static, out_groups = inner.run(
            in_static, groups, in_prefixes, (args_prefix, _REPLICATED), self.out_specs, call
        )
        _check_outputs(out_static, out_groups, self.out_keys, roots, self.mesh, self.manual)
        self.last_trace[:] = (out_static, tuple(roots))  # for notes on JAX's errors
        return entry.record(out_static, out_groups, with_static)

    def make_jit(self, in_static: InStatic[Any], entry: Compiled, with_static: bool) -> object:
        """``jax.jit`` of ``jax.shard_map`` of ``pure`` for one input structure."""
        mesh = self.mesh
        out_group_specs = tuple(_jax_spec(k) for k in self.out_keys)
        bound_pure = functools.partial(self.pure, in_static, entry, with_static)

        def body(*groups: list[Any]) -> object:
            return bound_pure(*groups)

        # JAX's messages name the function: name it after the user's.
        body.__name__ = body.__qualname__ = getattr(self.fun, "__name__", "f")
        mapped = jax.shard_map(
            body,
            in_specs=tuple(_jax_spec(k) for k in self.in_keys),
            out_specs=(_REPLICATED, out_group_specs) if with_static else out_group_specs,
            **self.map_kwargs,
        )
        if not isinstance(mesh, jax.sharding.Mesh) or self.axis_names:
            return jax.jit(mapped)
        # The outputs carry exactly the out_specs given (jit alone would report an
        # equivalent normalized spec, e.g. P() for P(None)).
        shardings = tuple(NamedSharding(mesh, spec) for spec in out_group_specs)
        return jax.jit(mapped, out_shardings=(None, shardings) if with_static else shardings)

    def prepare(self, args: tuple[Any, ...]) -> tuple[Call, Compiled, Any, Any]:
        """Splits the arguments (lift step 1), checks each spec, finds the compiled function."""
        a_prefix = _args_prefix(self.in_specs, len(args))
        call = split_inputs(args, {}, (a_prefix, _REPLICATED), SPECS_SPEC, self.mode)
        roots = NamedRoots(("args", "kwargs"), (args, {}))
        for leaf, value, spec, path in zip(
            call.leaves, call.values, call.prefixes, call.graphdef.leaf_paths
        ):
            problem = _spec_problem(spec, value, self.mesh, self.manual, whole=True)
            if problem is not None:
                raise PrefixError(
                    f"in_specs gives {spec!r} for the {kind_name(leaf)} at "
                    f"{roots.where(path)}: the spec {problem}"
                )
        slots, groups = call.groups(self.in_keys)
        # The spec trees may hold lists and dicts (unhashable): pure rebuilds them.
        in_static = InStatic.make(graphdef=call.graphdef, slots=slots, extra=len(args))
        return call, self.jitted_fn.get(in_static, self.make_jit), groups, slots

    def call_general(
        self, args: Args, kwargs: Kwargs, dyn_args: Args, dyn_kwargs: Kwargs, statics: Args
    ) -> object:
        if kwargs:
            raise TypeError(
                f"shard_map takes positional arguments only (in_specs is a prefix of "
                f"them), but got keyword arguments {sorted(kwargs)}.\nFix: pass them "
                "positionally, with an in_specs entry each."
            )
        call, entry, groups, slots = self.prepare(args)
        try:
            out, out_groups = entry.call(groups)
        except ValueError as error:
            _note_groups(error, args, call, slots, self.in_keys, self.out_keys, self.last_trace)
            raise
        finally:
            self.last_trace.clear()
        result = call.finish(out, out_groups)
        if self.mode.updates:
            _place_inputs(call, self.mesh)
        self.remember(call, out, entry, slots, len(self.in_keys), args, kwargs)
        return result


@overload
def shard_map(
    f: Callable[P, R],
    *,
    mesh: MeshLike,
    in_specs: object,
    out_specs: object,
    axis_names: AbstractSet[Any] = ...,
    check_vma: bool = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
) -> ShardMapped[P, R]: ...


@overload
def shard_map(
    f: None = None,
    *,
    mesh: MeshLike,
    in_specs: object,
    out_specs: object,
    axis_names: AbstractSet[Any] = ...,
    check_vma: bool = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
) -> Callable[[Callable[P, R]], ShardMapped[P, R]]: ...


def shard_map(
    f: Callable[P, R] | None = None,
    *,
    mesh: MeshLike,
    in_specs: object,
    out_specs: object,
    axis_names: AbstractSet[Any] = frozenset(),
    check_vma: bool = True,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> ShardMapped[P, R] | Callable[[Callable[P, R]], ShardMapped[P, R]]:
    """``jax.shard_map`` for functions of objects.

    Args:
      f: the function (or method, or Module instance) to run on each shard.
      mesh: a ``jax.sharding.Mesh`` (or ``AbstractMesh``).
      in_specs: a prefix over the positional arguments (one entry each, or one for
        all) of ``PartitionSpec`` (``None`` replicates); at an object, one spec for
        all its state, ``nnx.StateSharding({filter: spec})``, a ``State`` of specs
        (``nnx.get_partition_spec``) or ``nnx.prefix(obj, {filter: spec})``. Inside
        ``f`` a dimension named at ``spec[i]`` has ``size / devices``.
      out_specs: the same over the output (an axis not named must hold equal values
        on all shards); objects the arguments reach come back with their ``in_specs``.
      axis_names: the mesh axes ``f`` is manual over (all if empty).
      check_vma: as in ``jax.shard_map``.
      graph, graph_updates: the traversal mode (see ``jit``); ``StateSharding``
        needs graph updates.

    Returns:
      A ``ShardMapped`` of positional arguments only (given no ``f``, a decorator).
      A call updates the argument objects in place (as ``NamedSharding``s with
      ``in_specs`` under graph updates) and returns the output assembled with
      ``out_specs``; an output that is an input object is the caller's.

    Raises:
      PrefixError (``ValueError``): a spec does not fit its value (rank, unknown or
        non-manual axis, indivisible dimension; naming the path) or the arguments.
      InconsistentAliasingError (``ValueError``): an object gets different specs.
      TraceContextError (``ValueError``): ``f`` mutates or returns a captured object.
      TypeError: keyword arguments were passed.
      ValueError: ``in_specs`` has not one entry per argument, or ``jax.shard_map``
        rejects the call (a note lists the paths of the groups it names).

    Example::

      >>> import jax, jax.numpy as jnp, flaxgraph as nnx
      >>> from jax.sharding import PartitionSpec as P
      >>> mesh = jax.sharding.Mesh(jax.devices()[:1], ('data',))
      >>> class Sum(nnx.Module):
      ...   def __init__(self): self.calls = nnx.BatchStat(jnp.array(0))
      ...   def __call__(self, x):
      ...     self.calls += 1
      ...     return jax.lax.psum(x.sum(), 'data')
      >>> model = Sum()
      >>> f = nnx.shard_map(lambda m, x: m(x), mesh=mesh, in_specs=(P(), P('data')),
      ...                   out_specs=P())
      >>> float(f(model, jnp.arange(4.0))), int(model.calls.value)
      (6.0, 1)
    """
    mode = resolve(graph, graph_updates)
    reject_lift_types(
        mode, "shard_map", "in_specs", in_specs, out_specs, plain="a PartitionSpec (or None)"
    )

    def make(f: Callable[P, R]) -> ShardMapped[P, R]:
        inner_f, bound = unbind(f, "shard_map")
        return ShardMapped(inner_f, bound, mesh, in_specs, out_specs, axis_names, check_vma, mode)

    return make if f is None else make(f)


def _place_inputs(call: Call, mesh: MeshLike) -> None:
    """Puts the caller's unchanged input arrays on their ``NamedSharding`` over ``mesh``."""
    if not isinstance(mesh, jax.sharding.Mesh):
        return  # an AbstractMesh has no devices to place on
    for leaf, spec in zip(call.leaves, call.prefixes):
        if REGISTRY.kind_of(leaf) is not VARIABLE:
            continue
        value = leaf.get_raw_value()
        if (
            isinstance(value, jax.Array)
            and not isinstance(value, jax.core.Tracer)
            and not isinstance(value.sharding, NamedSharding)
        ):
            leaf.set_value(jax.device_put(value, NamedSharding(mesh, _jax_spec(spec))))


def _check_outputs(
    out_static: OutStatic,
    out_groups: Sequence[Sequence[Any]],
    out_keys: Sequence[Any],
    roots: list[Any],
    mesh: MeshLike,
    manual: frozenset[Any],
) -> None:
    """Checks each returned per-shard leaf against its spec (``PrefixError`` naming the path)."""
    paths: Sequence[tuple[Hashable, ...]] = out_static.graphdef.leaf_paths
    for path, source in zip(paths, out_static.sources):
        if source.origin != OUT:
            continue
        spec = out_keys[source.at]
        value = out_groups[source.at][source.position]
        problem = _spec_problem(spec, value, mesh, manual, whole=False)
        if problem is not None:
            where = NamedRoots(("output", "args", "kwargs"), tuple(roots)).where(path)
            name = "out_specs" if path[0] == 0 else "in_specs"
            raise PrefixError(
                f"{name} gives {spec!r} for the value at {where} (returned from each "
                f"shard): the spec {problem}"
            )


def _note_groups(
    error: ValueError,
    args: tuple[Any, ...],
    call: Call,
    slots: Slots,
    in_keys: Sequence[Any],
    out_keys: Sequence[Any],
    last_trace: list[Any],
) -> None:
    """Notes on JAX's ``error`` the paths of the leaves in each spec group it names."""
    message = str(error)
    lines = []
    in_where = NamedRoots(("args", "kwargs"), (args, {}))
    in_paths = call.graphdef.leaf_paths
    for g, key in enumerate(in_keys):
        if f"in_specs[{g}]" in message:
            paths = [in_where.where(p) for p, h in zip(in_paths, slots.groups) if h == g]
            lines.append(_group_line("in_specs", g, key, paths))
    if last_trace:
        out_static, roots = last_trace
        out_where = NamedRoots(("output", "args", "kwargs"), roots)
        leaf_paths = out_static.graphdef.leaf_paths
        for g, key in enumerate(out_keys):
            if f"out_specs[{g}]" in message:
                paths = [
                    out_where.where(p)
                    for p, s in zip(leaf_paths, out_static.sources)
                    if s.origin == OUT and s.at == g
                ]
                lines.append(_group_line("out_specs", g, key, paths))
    if lines:
        error.add_note(
            "flaxgraph passes jax.shard_map one group of leaves per distinct spec; the "
            "groups named above are:\n" + "\n".join(lines)
        )


def _group_line(name: str, g: int, key: object, paths: list[str]) -> str:
    shown = ", ".join(paths[:6]) + (f" and {len(paths) - 6} more" if len(paths) > 6 else "")
    return f"  {name}[{g}] (spec {key!r}): {shown}"
