"""The lifting machine: one path by which every transform accepts objects.

JAX transforms take pure pytrees. flaxgraph transforms take Modules, Variables
and Rngs anywhere in their arguments and outputs, and keep Python's reference
semantics. Every transform goes through the same five steps:

1. **Outside, split.** ``split_inputs`` flattens ``(args, kwargs)`` as *one*
   graph (shared objects across arguments become references) while resolving the
   transform's prefix tree (``in_axes``, ``in_shardings``, diff flags…) to one
   prefix per leaf and checking consistent aliasing (``aliasing.PrefixWalk``).
   Leaves are grouped by prefix, so the prefix tree handed to JAX is just one
   plain prefix per group.
2. **The JAX transform** runs ``Call.pure``, a function of ``(AuxValue, groups)``
   only. The GraphDef travels as pytree *auxiliary data* (``AuxValue``), so JAX's
   own caches key on the graph structure: same structure, no retrace.
3. **Inside, merge** the leaves into fresh objects in the inner trace and call the
   user's function.
4. **Inside, split again** the inputs (to carry every update, structural ones
   included) together with the outputs, in one walk with the output prefixes:
   outputs that alias inputs become references to them, aliasing is checked
   between inputs and outputs, and captured objects may not be returned. Leaves
   whose value did not change are not returned at all (write back only what
   changed).
5. **Outside, update** the caller's objects in place from the returned GraphDef
   and leaves (``build_graph`` with ``reuse``) and build the outputs; an output
   that aliases an input is the caller's *same* object. If anything before this
   step raises, the caller's objects are untouched; this step validates before it
   writes.

**Traversal modes** (``flaxgraph.modes``) are parameters of these same steps,
not other paths: in tree mode (``graph=False``) step 1's walk rejects a Variable
reachable twice; with ``graph_updates=False`` (and in tree mode) step 4 first puts
the inputs' structure back as it came in, keeping the Variables' new values, and
rejects input Variables among the outputs, so only values come back and step 5
and the fast path run unchanged.

Source: the "JAX-style NNX Transforms" FLIP flax#4107 and
Flax Linen's "Lifted Transformations" design note (split into groups, lift, repack, commit);
``docs/design.md``, "The five lift steps"; modes per Flax
NNX 0.12 (``graph``/``graph_updates``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

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
from flaxgraph.variablelib.variable import is_variable, metadata_of, trace_of

T = TypeVar("T")
E = TypeVar("E", bound=Hashable)


class Origin(enum.IntEnum):
    """Where an output leaf's value comes from: the ``origin`` of a ``LeafSource``
    (``OutStatic.sources``).

    * ``IN``: the leaf is unchanged; take the caller's input value ``values[at]``.
    * ``OUT``: the leaf comes back from the JAX transform,
      ``out_groups[at][position]`` (for ``scan``: in the final carry or stacked,
      as the group's out-prefix says).

    An ``IntEnum``: comparing origins runs at C speed on the fast path.
    """

    IN = 0
    OUT = 1


# The two origins every transform uses, as module constants (read on every call).
IN = Origin.IN
OUT = Origin.OUT


class LeafSource(NamedTuple):
    """Where one leaf of an out GraphDef gets its value (``OutStatic.sources``).

    Attributes:
      origin: an ``Origin``.
      at: ``IN``: the input leaf's position; ``OUT``: the output group.
      position: ``OUT``: the position in the output group; ``0`` for ``IN``.
    """

    origin: Origin
    at: int
    position: int = 0


def leaf_values(
    sources: Sequence[LeafSource], in_values: Sequence[Any], out_groups: Sequence[Sequence[Any]]
) -> list[Any]:
    """The value of each leaf of ``sources`` (origins ``IN`` and ``OUT``): the input's
    value or the one the JAX transform returned."""
    return [in_values[s.at] if s.origin == IN else out_groups[s.at][s.position] for s in sources]


class Slots(NamedTuple):
    """Where each input leaf sits in the groups handed to the JAX transform
    (``InStatic.slots``): leaf ``i`` is ``groups[slots.groups[i]][slots.positions[i]]``.

    Two parallel tuples rather than one record per leaf: built on every general call
    at the cost of two tuples, and hashed as part of ``InStatic``.

    Attributes:
      groups: each leaf's group index (its prefix's position among the group keys).
      positions: each leaf's position in its group.
    """

    groups: tuple[int, ...]
    positions: tuple[int, ...]


class NodeMatch(NamedTuple):
    """An input node found again in step 4's walk (``OutStatic.index_map``): step 5
    updates the caller's node in place instead of building a new one.

    Attributes:
      out_index: the node's reference index in the out GraphDef.
      in_index: its reference index among the inputs' nodes (``Call.nodes``).
    """

    out_index: int
    in_index: int


class AuxValue(Generic[T]):
    """A pytree with no leaves whose auxiliary data is ``value`` (hashable).

    JAX keeps auxiliary data in the treedef, which is part of every transform's
    cache key and is rebuilt on cache hits; that is how GraphDefs cross JAX
    transforms without being arrays.
    """

    __slots__ = ("value",)

    def __init__(self, value: T):
        self.value = value

    def __repr__(self) -> str:
        return f"AuxValue({self.value!r})"


jax.tree_util.register_pytree_node(AuxValue, lambda s: ((), s.value), lambda aux, _: AuxValue(aux))


def key_hash(*fields: object) -> int:
    """The hash of a record that travels as ``AuxValue`` aux data, computed once when
    it is made. An unhashable field (a non-frozen dataclass config) is hashed without
    its value, as in Flax (JAX compares aux data with ``==``, so the key still works)."""
    try:
        return hash(fields)
    except TypeError:
        return lenient_hash(fields)


class HashedRecord:
    """Base of the frozen records that travel as ``AuxValue`` aux data: hashed once,
    when made (``key_hash``, given by the record's ``make``), and compared by that
    hash first, then by the fields named in ``_fields``."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    key_hash: int

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
    """What the pure function needs besides arrays: the input GraphDef, where each
    leaf sits in the groups, and any transform-specific static data (``extra``, of
    the transform's own type ``E``). Made by ``InStatic.make``, which computes
    ``key_hash``."""

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
    """The fast path's compiled write-back of one ``OutStatic`` (``plan``, a
    ``fastpath.FinishPlan``), made on first use: a cache cell the record holds, not a
    field of its value (it joins neither its hash nor its equality)."""

    __slots__ = ("plan",)

    def __init__(self) -> None:
        self.plan: object = None  # a fastpath.FinishPlan (fastpath imports this module)


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class OutStatic(HashedRecord):
    """What comes back besides arrays: the GraphDef of ``(output, args, kwargs)``,
    which of its nodes are the inputs' nodes, and where each leaf comes from. Made
    by ``OutStatic.make``, which computes ``key_hash``.

    Attributes:
      inputs_kept: True when the inputs' graph kept its structure (only values
        changed): the fast path may then write values in place instead of
        rebuilding the graph.
      finish: the fast path's compiled write-back, filled on first use.
    """

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
    """Step 4's walk (``Merged.resplit``).

    Attributes:
      graphdef: the GraphDef of ``(output, args, kwargs)``.
      leaves: ``(path, leaf)`` per leaf, in walk order.
      prefixes: each leaf's resolved out-prefix.
      index_map: a ``NodeMatch`` per input node found again.
    """

    graphdef: GraphDef[Any]
    leaves: list[tuple[PathParts, Any]]
    prefixes: list[Any]
    index_map: tuple[NodeMatch, ...]


class InnerResult(NamedTuple):
    """What ``Inner.run`` returns from inside the JAX transform.

    Attributes:
      kept: the part of ``call``'s result returned as is (e.g. ``grad``'s loss).
      out_static: the ``OutStatic`` of ``(output, args, kwargs)``.
      out_groups: the leaves that come back through JAX, one list per output group.
    """

    kept: Any
    out_static: OutStatic
    out_groups: tuple[list[Any], ...]


@dataclasses.dataclass
class Call:
    """One lifted call: the split inputs and everything needed to finish it.

    Attributes:
      graphdef: GraphDef of ``(args, kwargs)``.
      leaves: the caller's leaves (Variables or raw values) in walk order.
      values: their raw values.
      prefixes: their resolved prefixes.
      nodes: the caller's nodes and Variables by reference index.
      in_prefix: the prefix tree used for the inputs (reused for them on output).
    """

    graphdef: GraphDef[Any]
    leaves: list[Any]
    values: list[Any]
    prefixes: list[Any]
    nodes: list[Any]
    in_prefix: object

    def groups(
        self, keys: Sequence[Any], prefixes: Sequence[Any] | None = None
    ) -> tuple[Slots, tuple[list[Any], ...]]:
        """Places each leaf value in the group of its prefix (the call's own
        ``prefixes`` unless others are given): ``(slots, groups)``."""
        slots = self.slots_for(self.prefixes if prefixes is None else prefixes, keys)
        groups: tuple[list[Any], ...] = tuple([] for _ in keys)
        for value, g in zip(self.values, slots.groups):
            groups[g].append(value)
        return slots, groups

    def slots_for(self, prefixes: Sequence[Any], keys: Sequence[Any]) -> Slots:
        """Where each leaf sits in the groups of ``keys`` for the prefixes
        ``prefixes`` (one per leaf), without placing the values."""
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


def created_outside(node: object, trace: object) -> bool:
    """Whether the graph node or Variable ``node`` was created in a trace other than
    ``trace`` (captured by closure from outside a transform). The one test of
    "created in this trace": the lift's inner split (a captured object may not be
    returned), the loops' carry check (``control.py``) and the fast path's plan
    recording (``fastpath.same_trace``) ask it. An object that records no trace (a
    registered graph-node type other than ``Object``) counts as created here."""
    created = trace_of(node) if is_variable(node) else getattr(node, "_obj_trace", None)
    return created is not None and created != trace


def write_back(out_static: OutStatic, values: list[Any], nodes: Sequence[Any]) -> object:
    """Step 5: updates the input objects ``nodes`` (by input reference index) in place
    from ``out_static`` and the out leaves ``values``; returns the output."""
    reuse = {out_i: nodes[in_i] for out_i, in_i in out_static.index_map}
    output, _args, _kwargs = build_graph(out_static.graphdef, values, reuse=reuse, new_refs=True)
    return output


def split_inputs(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    in_prefix: object,
    spec: PrefixSpec,
    mode: Mode = DEFAULT,
) -> Call:
    """Step 1: flattens ``(args, kwargs)`` as one graph with one prefix per leaf.

    Args:
      args, kwargs: the call's arguments.
      in_prefix: prefix tree over ``(args, kwargs)``: a pair ``(args_prefix,
        kwargs_prefix)`` or a single prefix for everything.
      spec: what counts as a prefix for this transform.
      mode: the traversal mode (tree mode rejects shared Variables).

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
    values = [
        leaf.raw_value if (kinds.get(type(leaf)) or classify(leaf)) is VARIABLE else leaf
        for leaf in leaf_objs
    ]
    return Call(graphdef, leaf_objs, values, prefixes, list(walk.ref_index), in_prefix)


class Merged:
    """The inputs merged inside a trace (step 3), with what step 4 needs to tell
    which leaves are inputs and whether they changed."""

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
        # Taken before the function runs, to tell afterwards whether it changed the
        # inputs' structure (graphlib/snapshot.py).
        # Without graph updates, to tell whether the structure must be put back.
        self.snapshot = (
            StructureSnapshot(index_ref.values()) if snapshot or not mode.updates else None
        )

    def unchanged_input(self, leaf: object) -> int | None:
        """The input position of ``leaf`` if it is an input leaf whose value (and
        metadata) did not change inside the function, else ``None``."""
        if is_variable(leaf):
            i = self.in_leaf.get(leaf)
            if (
                i is not None
                and leaf.raw_value is self.values[i]
                and metadata_of(leaf) is self.metadata[i]
            ):
                typed: int | None = i
                return typed
            return None
        i = self.raw_in.get(id(leaf))
        return i if i is not None and self.leaves[i] is leaf else None

    def structure_kept(self) -> bool:
        """Whether ``(args, kwargs)`` still have the structure they were merged with
        (values may have changed). Needs ``snapshot=True`` at construction."""
        assert self.snapshot is not None
        return self.snapshot.unchanged()

    def restore_structure(self) -> None:
        """Without graph updates (``snapshot`` is then always taken): puts the inputs' structure back as it was merged
        (attributes the function added, deleted or replaced), keeping the new values
        of the input Variables; raw array attributes get their input values back."""
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
        """Step 4: one walk over ``(output, args, kwargs)`` (output first, so leaves an
        output shares with an input are found at their output path). ``captured_out``:
        the output may hold objects the function captured (see ``Inner``)."""
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
    """Steps 3 and 4 for one trace: merge, call, re-split.

    Attributes:
      f: the user's function.
      out_spec: what counts as a prefix on the way out.
      out_keys: the output groups (all prefixes ``out_prefix`` and the inputs'
        prefixes can resolve to).
      same_prefix: whether an unchanged input leaf with in-prefix ``a`` may be
        returned as is where the out-prefix is ``b``.
      on_inputs: called with the inner leaf objects (Variables or values) and their
        prefixes right after merging (e.g. to remove an axis from metadata).
      on_output_leaf: called with each output leaf and its prefix before its
        metadata is recorded (e.g. to add an axis back).
      record_kept: whether to record if the inputs kept their structure
        (``OutStatic.inputs_kept``, which the fast-path plans need; a structure
        snapshot of the merged inputs).
      templates: an ``out_template.Templates`` (with ``record_kept``): step 4 without
        the walk for calls matching an earlier one (transforms that trace every call).
      mode: the traversal mode (``flaxgraph.modes``).
      captured_out: whether the output may hold objects created outside the transform
        (captured by closure). Only where the caller gets a new abstract copy, never
        the object: ``eval_shape``, as in Flax NNX 0.12.8, whose ``nnx.eval_shape``
        returns ``ShapeDtypeStruct`` copies of captured modules and Variables.
    """

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
        """Merges the inputs, calls ``call(f, args, kwargs)`` (default ``f(*args,
        **kwargs)``), and re-splits ``(output_part, args, kwargs)``.

        ``in_prefixes`` are the inputs' per-leaf group keys; ``inputs_out_prefix``
        is the ``(args, kwargs)`` prefix pair applied to the inputs on the way out and
        ``out_prefix_tree`` the prefix of the output part. ``call`` returns ``(kept,
        output_part)``: ``kept`` is returned as is (e.g. a loss for ``grad``) and
        ``output_part`` goes through the lift.

        Returns:
          an ``InnerResult``.
        """
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
        # Without graph updates the inputs' structure was put back (resplit).
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
                leaf = leaf.raw_value
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
        """The input position whose value the re-split ``leaf`` (at ``path``, with
        out-prefix ``prefix``) takes on the way out, or ``None`` if it comes back
        through the JAX transform: an input leaf the function did not change, where
        ``same_prefix`` allows it. A transform may override it (``scan``'s carry
        always comes back, its broadcast state never does)."""
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
        """Without graph updates an input object may not be an output: only values
        come back, so the caller could not get its own object back."""
        output, args, kwargs = self.roots.values
        error = SharedReferenceError(
            shared_variables_message(
                (output, args, kwargs),
                self.where,
                f"With {self.mode.name} a transformed function may not return its input "
                "objects: the transform does not support Variable aliasing between inputs "
                "and outputs (only Variable values come back to the caller)",
                wrapped=True,
                select=lambda paths: (
                    any(p[0] == 0 for p in paths) and any(p[0] != 0 for p in paths)
                ),
                fixes=[
                    "return new objects or arrays (e.g. nnx.clone(obj), or obj.value);",
                    "or use graph updates: graph=True, graph_updates=True (or the "
                    "nnx.compat spelling of the transform), which returns the caller's "
                    "own object.",
                ],
            )
        )
        raise with_duplicates_line(
            error,
            (output, args, kwargs),
            lambda paths: any(p[0] == 0 for p in paths) and any(p[0] != 0 for p in paths),
        )
