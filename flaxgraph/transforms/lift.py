"""The lifting machine: the five lift steps every transform runs to accept objects.

The steps and the traversal modes are explained in ``docs/design.md``, "The five lift
steps" and "Traversal modes".

Source: the "JAX-style NNX Transforms" FLIP flax#4107; ``docs/design.md``, "The five lift steps".
"""

from __future__ import annotations

import dataclasses
import enum
import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar, Generic, NamedTuple, Self, TypeVar, cast

import jax

from flaxgraph.errors import SharedReferenceError, TraceContextError
from flaxgraph.graphlib.build import build_graph
from flaxgraph.graphlib.graphdefs import GraphDef, lenient_hash
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE
from flaxgraph.graphlib.snapshot import StructureSnapshot
from flaxgraph.graphlib.walk import shared_variables_message
from flaxgraph.modes import DEFAULT, Mode
from flaxgraph.tracing import current_trace
from flaxgraph.transforms.aliasing import NamedRoots, PrefixSpec, PrefixWalk, with_duplicates_line
from flaxgraph.transforms.locate import locate_module
from flaxgraph.transforms.prefix_groups import group_index, same_prefix
from flaxgraph.typing import PathParts
from flaxgraph.variablelib.refs import is_ref
from flaxgraph.variablelib.variable import is_variable, metadata_of, read_slot, trace_of

T = TypeVar("T")
E = TypeVar("E", bound=Hashable)


class Origin(enum.IntEnum):
    """Where an output leaf's value comes from: ``IN`` the caller's input value
    ``values[at]``, ``OUT`` the JAX transform's ``out_groups[at][position]``."""

    IN = 0
    OUT = 1


# The two origins every transform uses, as module constants (read on every call).
IN = Origin.IN
OUT = Origin.OUT


class LeafSource(NamedTuple):
    """Where one leaf of an out GraphDef gets its value (see ``Origin``)."""

    origin: Origin
    at: int
    position: int = 0


def leaf_values(
    sources: Sequence[LeafSource], in_values: Sequence[Any], out_groups: Sequence[Sequence[Any]]
) -> list[Any]:
    """The value of each leaf of ``sources``: the input's or the JAX transform's."""
    return [in_values[s.at] if s.origin == IN else out_groups[s.at][s.position] for s in sources]


class Slots(NamedTuple):
    """Where each input leaf sits in the groups handed to the JAX transform: leaf ``i``
    is ``groups[slots.groups[i]][slots.positions[i]]``."""

    groups: tuple[int, ...]
    positions: tuple[int, ...]


class NodeMatch(NamedTuple):
    """An input node found again in step 4's walk: out-GraphDef index, input index."""

    out_index: int
    in_index: int


class AuxValue(Generic[T]):
    """A pytree with no leaves whose auxiliary data is ``value``: a GraphDef crossing JAX."""

    __slots__ = ("value",)

    def __init__(self, value: T):
        self.value = value

    def __repr__(self) -> str:
        return f"AuxValue({self.value!r})"


jax.tree_util.register_pytree_node(AuxValue, lambda s: ((), s.value), lambda aux, _: AuxValue(aux))


def key_hash(*fields: object) -> int:
    """The hash of an ``AuxValue`` record; an unhashable field is hashed without its value."""
    try:
        return hash(fields)
    except TypeError:
        return lenient_hash(fields)


class HashedRecord:
    """Base of the ``AuxValue`` records: hashed once when made, compared by hash, then ``_fields``."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    key_hash: int

    @classmethod
    def of(cls, **fields: object) -> Self:
        """The record of ``fields`` (all but ``key_hash``), hashed in ``_fields`` order, so
        equal records hash alike however the keywords are ordered."""
        make = cast("Callable[..., Self]", cls)
        return make(**fields, key_hash=key_hash(*map(fields.__getitem__, cls._fields)))

    def _key(self) -> tuple[object, ...]:
        return tuple(getattr(self, f) for f in self._fields)

    def __hash__(self) -> int:
        return self.key_hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            type(other) is type(self)
            and isinstance(other, HashedRecord)
            and self.key_hash == other.key_hash
            and self._key() == other._key()
        )


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class InStatic(HashedRecord, Generic[E]):
    """What the pure function needs besides arrays: input GraphDef, slots, the transform's
    ``extra``. Made by ``make``."""

    _fields: ClassVar[tuple[str, ...]] = ("graphdef", "slots", "extra")
    graphdef: GraphDef[Any]
    slots: Slots
    extra: E
    key_hash: int = dataclasses.field(repr=False)

    @classmethod
    def make(cls, *, graphdef: GraphDef[Any], slots: Slots, extra: E) -> InStatic[E]:
        return cls(
            graphdef=graphdef,
            slots=slots,
            extra=extra,
            key_hash=key_hash(graphdef, slots, extra),
        )


class FinishCache:
    """A cache cell for an ``OutStatic``'s ``fastpath.FinishPlan`` (not part of its value)."""

    __slots__ = ("plan",)

    def __init__(self) -> None:
        self.plan: object = None  # a fastpath.FinishPlan (fastpath imports this module)


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class OutStatic(HashedRecord):
    """What comes back besides arrays: GraphDef of ``(output, args, kwargs)``, input nodes,
    leaf sources, whether the inputs kept their structure. Made by ``make``."""

    _fields: ClassVar[tuple[str, ...]] = ("graphdef", "index_map", "sources", "inputs_kept")
    graphdef: GraphDef[Any]
    index_map: tuple[NodeMatch, ...]
    sources: tuple[LeafSource, ...]
    inputs_kept: bool
    key_hash: int = dataclasses.field(repr=False)
    finish: FinishCache = dataclasses.field(default_factory=FinishCache, repr=False)

    @classmethod
    def make(
        cls,
        *,
        graphdef: GraphDef[Any],
        index_map: tuple[NodeMatch, ...],
        sources: tuple[LeafSource, ...],
        inputs_kept: bool = False,
    ) -> OutStatic:
        return cls(
            graphdef=graphdef,
            index_map=index_map,
            sources=sources,
            inputs_kept=inputs_kept,
            key_hash=key_hash(graphdef, index_map, sources, inputs_kept),
        )


class Resplit(NamedTuple):
    """Step 4's walk over ``(output, args, kwargs)`` (``Merged.resplit``)."""

    graphdef: GraphDef[Any]
    leaves: list[tuple[PathParts, Any]]
    prefixes: list[Any]
    index_map: tuple[NodeMatch, ...]


class InnerResult(NamedTuple):
    """What ``Inner.run`` returns: ``call``'s kept part, the ``OutStatic``, the out groups."""

    kept: Any
    out_static: OutStatic
    out_groups: tuple[list[Any], ...]


@dataclasses.dataclass
class Call:
    """One lifted call: the split inputs (step 1) and what step 5 needs to finish it."""

    graphdef: GraphDef[Any]
    leaves: list[Any]
    values: list[Any]
    prefixes: list[Any]
    nodes: list[Any]
    in_prefix: object

    def groups(
        self, keys: Sequence[Any], prefixes: Sequence[Any] | None = None
    ) -> tuple[Slots, tuple[list[Any], ...]]:
        """Places each leaf value in the group of its prefix: ``(slots, groups)``."""
        slots = self.slots_for(self.prefixes if prefixes is None else prefixes, keys)
        groups: tuple[list[Any], ...] = tuple([] for _ in keys)
        for value, g in zip(self.values, slots.groups):
            groups[g].append(value)
        return slots, groups

    def slots_for(self, prefixes: Sequence[Any], keys: Sequence[Any]) -> Slots:
        """Where each leaf sits in the groups of ``keys`` for ``prefixes``."""
        sizes = [0] * len(keys)
        in_group = []
        positions = []
        for prefix in prefixes:
            g = group_index(prefix, keys)
            in_group.append(g)
            positions.append(sizes[g])
            sizes[g] += 1
        return Slots(tuple(in_group), tuple(positions))

    def finish(self, out_static: OutStatic, out_groups: Sequence[Sequence[Any]]) -> object:
        """Step 5: updates the caller's objects in place and returns the output."""
        return self.finish_values(
            out_static, leaf_values(out_static.sources, self.values, out_groups)
        )

    def finish_values(self, out_static: OutStatic, values: list[Any]) -> object:
        """Step 5 with the leaf values already gathered (in out-GraphDef order)."""
        return write_back(out_static, values, self.nodes)


_read_raw = operator.attrgetter("raw_value")


def created_outside(node: object, trace: object) -> bool:
    """Whether ``node`` (graph node or Variable) was created in a trace other than ``trace``:
    the one test of "captured from outside"; one that records no trace counts as inside."""
    created = trace_of(node) if is_variable(node) else getattr(node, "_obj_trace", None)
    return created is not None and created != trace


def write_back(out_static: OutStatic, values: list[Any], nodes: Sequence[Any]) -> object:
    """Step 5: updates ``nodes`` in place from ``out_static`` and ``values``; returns the output."""
    reuse = {out_i: nodes[in_i] for out_i, in_i in out_static.index_map}
    output, _args, _kwargs = build_graph(out_static.graphdef, values, reuse=reuse, new_refs=True)
    return output


def split_inputs(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    in_prefix: object,
    spec: PrefixSpec,
    mode: Mode = DEFAULT,
    *,
    private_reads: bool = False,
) -> Call:
    """Step 1: flattens ``(args, kwargs)`` as one graph with one prefix per leaf.

    Args:
      args, kwargs: the call's arguments.
      in_prefix: prefix tree over ``(args, kwargs)``: a pair ``(args_prefix,
        kwargs_prefix)`` or a single prefix for everything.
      spec: what counts as a prefix for this transform.
      mode: the traversal mode (tree mode rejects shared Variables).
      private_reads: read the Variables' values without counting it as a read that
        hands them out (``nnx.jit`` only, whose outputs never return an input array
        but to its own Variable: ``transforms/donation.py``).

    Raises:
      PrefixError, InconsistentAliasingError (both ``ValueError``): see ``aliasing``.
      SharedReferenceError (``ValueError``): tree mode, and a Variable is reachable
        along two paths; the message lists them.
    """
    walk = PrefixWalk(spec, NamedRoots(("args", "kwargs"), (args, kwargs)), graph=mode.graph)
    try:
        graphdef, leaves, prefixes = walk.run_checked((args, kwargs), in_prefix)
    except SharedReferenceError as error:
        raise with_duplicates_line(error, (args, kwargs), None) from None
    leaf_objs = [leaf for _, leaf in leaves]
    kinds, classify = REGISTRY.kind_cache(), REGISTRY.classify
    read = read_slot if private_reads else _read_raw
    values = [
        read(leaf) if (kinds.get(type(leaf)) or classify(leaf)) is VARIABLE else leaf
        for leaf in leaf_objs
    ]
    return Call(graphdef, leaf_objs, values, prefixes, list(walk.ref_index), in_prefix)


class Merged:
    """The inputs merged inside a trace (step 3), with what step 4 needs."""

    __slots__ = (
        "args",
        "kwargs",
        "values",
        "prefixes",
        "leaves",
        "in_index",
        "in_leaf",
        "metadata",
        "raw_in",
        "snapshot",
        "mode",
        "in_static",
    )

    def __init__(
        self,
        in_static: InStatic[Any],
        values: list[Any],
        prefixes: Sequence[Any],
        snapshot: bool = False,
        mode: Mode = DEFAULT,
    ):
        self.mode = mode
        self.in_static = in_static
        index_ref: dict[int, Any] = {}
        sink: list[Any] = []
        self.args, self.kwargs = build_graph(
            in_static.graphdef, values, index_ref=index_ref, leaf_sink=sink
        )
        self.values = values
        self.prefixes = list(prefixes)
        self.leaves = sink
        self.in_index = RefMap.from_pairs((obj, idx) for idx, obj in index_ref.items())
        kinds, classify = REGISTRY.kind_cache(), REGISTRY.classify
        variable_at = [(kinds.get(type(leaf)) or classify(leaf)) is VARIABLE for leaf in sink]
        self.in_leaf = RefMap.from_pairs(
            (leaf, i) for i, (leaf, v) in enumerate(zip(sink, variable_at)) if v
        )
        self.metadata: list[Any] = [
            metadata_of(leaf) if v else None for leaf, v in zip(sink, variable_at)
        ]
        self.raw_in = {id(x): i for i, (x, v) in enumerate(zip(sink, variable_at)) if not v}
        # Taken before the function runs: did it change the inputs' structure?
        self.snapshot = (
            StructureSnapshot(index_ref.values()) if snapshot or not mode.updates else None
        )

    def unchanged_input(self, leaf: object) -> int | None:
        """The input position of ``leaf`` if it is an unchanged input leaf, else ``None``."""
        if is_variable(leaf):
            i = self.in_leaf.get(leaf)
            if (
                i is not None
                and leaf._var_raw is self.values[i]
                and metadata_of(leaf) is self.metadata[i]
            ):
                typed: int | None = i
                return typed
            return None
        i = self.raw_in.get(id(leaf))
        return i if i is not None and self.leaves[i] is leaf else None

    def structure_kept(self) -> bool:
        """Whether ``(args, kwargs)`` keep their merged structure (needs ``snapshot``)."""
        assert self.snapshot is not None
        return self.snapshot.unchanged()

    def restore_structure(self) -> None:
        """Without graph updates: puts the inputs' structure back as merged, keeping the
        input Variables' new values."""
        assert self.snapshot is not None
        kinds, classify = REGISTRY.kind_cache(), REGISTRY.classify
        if self.snapshot.unchanged() and not any(
            # a raw attribute may have changed
            len(path) > 2 and (kinds.get(type(leaf)) or classify(leaf)) is not VARIABLE
            for path, leaf in zip(self.in_static.graphdef.leaf_paths, self.leaves)
        ):
            return
        leaves = [
            leaf if (kinds.get(type(leaf)) or classify(leaf)) is VARIABLE else value
            for leaf, value in zip(self.leaves, self.values)
        ]
        reuse = {i: obj for obj, i in self.in_index.items()}
        self.args, self.kwargs = build_graph(self.in_static.graphdef, leaves, reuse=reuse)

    def resplit(
        self,
        output: object,
        spec: PrefixSpec,
        inputs_out_prefix: tuple[Any, Any],
        out_prefix_tree: object,
        on_output_leaf: Callable[[Any, Any], None] | None = None,
        captured_out: bool = False,
    ) -> Resplit:
        """Step 4: one walk over ``(output, args, kwargs)``, output first."""
        if not self.mode.updates:
            self.restore_structure()
        walk = _OutputWalk(
            spec,
            NamedRoots(("output", "args", "kwargs"), (output, self.args, self.kwargs)),
            self.in_index,
            on_output_leaf,
            self.mode,
            captured_out,
        )
        args_prefix, kwargs_prefix = inputs_out_prefix
        graphdef, leaves, prefixes = walk.run_checked(
            (output, self.args, self.kwargs), (out_prefix_tree, args_prefix, kwargs_prefix)
        )
        index_map = tuple(
            NodeMatch(out_i, self.in_index[obj])
            for obj, out_i in walk.ref_index.items()
            if obj in self.in_index
        )
        return Resplit(graphdef, leaves, prefixes, index_map)


@dataclasses.dataclass(frozen=True)
class Inner:
    """Steps 3 and 4 for one trace: merge, call, re-split. ``same_prefix``: may an unchanged
    input leaf come back as is; ``captured_out``: the output may hold captured objects
    (``eval_shape`` only, as in Flax NNX 0.12.8)."""

    f: Callable[..., Any]
    out_spec: PrefixSpec
    out_keys: Sequence[Any]
    same_prefix: Callable[[Any, Any], bool] = same_prefix
    on_inputs: Callable[[list[Any], list[Any]], None] | None = None
    on_output_leaf: Callable[[Any, Any], None] | None = None
    record_kept: bool = False
    templates: Any = None
    mode: Mode = DEFAULT
    captured_out: bool = False

    def run(
        self,
        in_static: InStatic[Any],
        groups: Sequence[Sequence[Any]],
        in_prefixes: Sequence[Any],
        inputs_out_prefix: tuple[Any, Any],
        out_prefix_tree: object,
        call: Callable[..., Any] | None = None,
    ) -> InnerResult:
        """Merges, calls ``call(f, args, kwargs) -> (kept, output)`` (default ``f(*args,
        **kwargs)``) and re-splits ``(output, args, kwargs)``: an ``InnerResult``."""
        merged = Merged(
            in_static,
            [groups[g][i] for g, i in zip(in_static.slots.groups, in_static.slots.positions)],
            in_prefixes,
            snapshot=self.record_kept,
            mode=self.mode,
        )
        if self.on_inputs is not None:
            self.on_inputs(merged.leaves, merged.prefixes)
        try:
            if call is None:
                kept, output = None, self.f(*merged.args, **merged.kwargs)
            else:
                kept, output = call(self.f, merged.args, merged.kwargs)
        except Exception as error:
            locate_module(error, merged.args, merged.kwargs)
            raise
        hooks_ran = False
        if self.templates is not None:
            match = self.templates.try_reuse_split(in_static, merged, output, self.on_output_leaf)
            if match.out_static is not None:
                return InnerResult(kept, match.out_static, match.out_groups)
            hooks_ran = match.hooks_ran
        split = merged.resplit(
            output,
            self.out_spec,
            inputs_out_prefix,
            out_prefix_tree,
            None if hooks_ran else self.on_output_leaf,
            self.captured_out,
        )
        inputs_kept = self.record_kept and (not self.mode.updates or merged.structure_kept())
        out_groups: tuple[list[Any], ...] = tuple([] for _ in self.out_keys)
        sources = []
        for (path, leaf), prefix in zip(split.leaves, split.prefixes):
            i = self.input_kept(merged, output, path, leaf, prefix)
            if i is not None:
                sources.append(LeafSource(IN, i))
                continue
            g = group_index(prefix, self.out_keys)
            sources.append(LeafSource(OUT, g, len(out_groups[g])))
            if REGISTRY.kind_of(leaf) is VARIABLE:
                leaf = leaf._var_raw
            elif is_ref(leaf):  # a raw Ref leaves as its content (JAX returns no Refs)
                leaf = leaf[...]
            out_groups[g].append(leaf)
        out_static = OutStatic.make(
            graphdef=split.graphdef,
            index_map=split.index_map,
            sources=tuple(sources),
            inputs_kept=inputs_kept,
        )
        if self.templates is not None:
            self.templates.record(in_static, merged, output, split.leaves, out_static, out_groups)
        return InnerResult(kept, out_static, out_groups)

    def input_kept(
        self, merged: Merged, output: object, path: PathParts, leaf: object, prefix: object
    ) -> int | None:
        """The input position whose value ``leaf`` keeps, or ``None`` if it comes back
        through JAX (``scan`` overrides it)."""
        i = merged.unchanged_input(leaf)
        if i is not None and self.same_prefix(merged.prefixes[i], prefix):
            return i
        return None


class _OutputWalk(PrefixWalk):
    """The step-4 walk: also rejects captured objects and runs the output-leaf hook."""

    def __init__(
        self,
        spec: PrefixSpec,
        roots: NamedRoots,
        in_index: RefMap[int],
        on_leaf: Callable[[Any, Any], None] | None,
        mode: Mode = DEFAULT,
        captured_out: bool = False,
    ):
        super().__init__(spec, roots, graph=mode.graph)
        self.in_index = in_index
        self.on_leaf = on_leaf
        self.trace = current_trace()
        self.mode = mode
        self.captured_out = captured_out

    def enter_node(self, node: object, path: PathParts, prefix: object) -> object:
        if not self.mode.updates and path and path[0] == 0 and node in self.in_index:
            self.returned_input()
        if node not in self.in_index and not self.captured_out:
            if created_outside(node, self.trace):
                phrase = (
                    "Cannot extract graph node from different trace level"
                    if self.mode.updates
                    else "Cannot return captured Variable (or an object holding one)"
                )
                raise TraceContextError(
                    f"{phrase}: the {type(node).__name__} at {self.where(path)} was created "
                    "outside the transform and captured by closure; a transform may not "
                    "return (or store into its arguments) an object it did not receive, "
                    "because the caller would get a silent copy of it.\nFix: pass it as an "
                    "argument of the transformed function."
                )
        return super().enter_node(node, path, prefix)

    def add_leaf(self, path: PathParts, leaf: object, prefix: object) -> None:
        super().add_leaf(path, leaf, prefix)
        if self.on_leaf is not None and REGISTRY.kind_of(leaf) is VARIABLE:
            self.on_leaf(leaf, self.leaf_prefixes[-1])

    def returned_input(self) -> None:
        """Without graph updates an input object may not be an output."""
        roots = self.roots.values

        def select(paths: Sequence[PathParts]) -> bool:
            return any(p[0] == 0 for p in paths) and any(p[0] != 0 for p in paths)

        error = SharedReferenceError(
            shared_variables_message(
                roots,
                self.where,
                f"With {self.mode.name} a transformed function may not return its input "
                "objects: the transform does not support Variable aliasing between inputs "
                "and outputs (only Variable values come back to the caller)",
                wrapped=True,
                select=select,
                fixes=[
                    "return new objects or arrays (e.g. nnx.clone(obj), or obj.value);",
                    "or use graph updates: graph=True, graph_updates=True (or the "
                    "nnx.compat spelling of the transform), which returns the caller's "
                    "own object.",
                ],
            )
        )
        raise with_duplicates_line(error, roots, select)
