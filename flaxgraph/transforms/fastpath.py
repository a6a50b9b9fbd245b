"""The per-call fast path: the plan cache and the write-back of a repeated call
(``FinishPlan``), explained in ``docs/design.md``, "The fast path".

Source: ``docs/design.md``, "The fast path".
"""

from __future__ import annotations

import enum
import itertools
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple, cast

from flaxgraph.graphlib.build import container_of
from flaxgraph.graphlib.graphdefs import (
    ArrayDef,
    ContainerDef,
    Def,
    NodeDef,
    NodeRef,
    StaticDef,
    VariableDef,
)
from flaxgraph.tracing import current_trace
from flaxgraph.transforms.lift import (
    IN,
    Call,
    LeafSource,
    OutStatic,
    created_outside,
    leaf_values,
    write_back,
)
from flaxgraph.transforms.plan import (
    MISS,
    BoundFinish,
    OtherWrite,
    Plan,
    VariableWrites,
)
from flaxgraph.transforms.plan_code import compile_run, with_apply
from flaxgraph.transforms.plan_owners import can_own, disown, own
from flaxgraph.transforms.ref_writes import RefInstall, copies_of_ref_values
from flaxgraph.variablelib.variable import Variable, is_variable


class LeafWrite(NamedTuple):
    """An out leaf (position in ``OutStatic.sources``) that an input leaf (plan position) receives."""

    out_position: int
    in_position: int


class OwnerKind(enum.Enum):
    """What a ``LeafOwner`` says about an out leaf."""

    VAR = "var"  # an input Variable: ``key`` is its input node index
    PATH = "path"  # a leaf of the args/kwargs part: ``key`` is its input path
    LOST = "lost"  # an array attribute of an input object reached through the output
    NEW = "new"  # none of the inputs' leaves


class LeafOwner(NamedTuple):
    """Which input leaf an out leaf is: an ``OwnerKind`` and its ``key``."""

    kind: OwnerKind
    key: Any = None


class FinishPlan:
    """How to apply one ``OutStatic`` without rebuilding the graph, by input positions."""

    __slots__ = ("usable", "writes", "build", "sources", "n_out", "single_leaf")

    def __init__(self, out: OutStatic, plan: Plan):
        self.sources = out.sources
        self.writes: list[LeafWrite] = []
        self.build: Callable[[list[Any], list[Any]], Any] | None = None
        self.n_out = 0
        self.single_leaf = False
        self.usable = out.inputs_kept
        if not self.usable:
            return
        in_index = dict(out.index_map)  # out node index -> input node index
        node_index = {id(n): i for i, n in enumerate(plan.nodes)}
        in_leaf_of_var = {
            node_index[id(leaf)]: pos for pos, leaf in enumerate(plan.leaves) if is_variable(leaf)
        }
        in_leaf_by_path = {p: i for i, p in enumerate(plan.graphdef.leaf_paths)}
        compiler = _OutputCompiler(in_index)
        output_builder = compiler.compile(cast(ContainerDef, out.graphdef.root).children[0])
        if compiler.new_objects:
            self.usable = False
            return
        owners = _leaf_owners(out.graphdef.root, in_index)
        for j, (source, owner) in enumerate(zip(out.sources, owners)):
            if owner.kind is OwnerKind.VAR:
                pos = in_leaf_of_var.get(owner.key)
            elif owner.kind is OwnerKind.PATH:
                pos = in_leaf_by_path.get(owner.key)
            else:
                pos = None
            if source.origin == IN:
                if pos is not None and pos != source.at:  # an input leaf moved
                    self.usable = False
                    return
                continue
            if owner.kind is OwnerKind.LOST:
                self.usable = False  # a changed array attribute of an input object
                return  # reached through the output: leave it to the general path
            if pos is not None:
                self.writes.append(LeafWrite(j, pos))
        self.build = output_builder
        self.n_out = compiler.position
        # The output is one array (a loss, a prediction): read it directly.
        self.single_leaf = type(cast(ContainerDef, out.graphdef.root).children[0]) is ArrayDef

    def bind(self, plan: Plan) -> BoundFinish | None:
        """The writes for one plan's objects; ``None`` when an output would hand out a Ref's array."""
        by_group: dict[int, VariableWrites] = {}
        others = []
        ref_variables: list[Variable[Any]] = []
        ref_sources: list[LeafSource] = []
        writers = plan.writers
        refs_at = plan.ref_positions
        boxes_at = plan.box_positions
        if refs_at:
            # An unchanged input leaf is the same value wherever it is used.
            used = [
                LeafSource(IN, s.at) if s.origin == IN else s for s in self.sources[: self.n_out]
            ]
            used += [self.sources[w.out_position] for w in self.writes]
            if any(s.origin == IN and s.at in refs_at for s in used):
                return None
            shared = {s for s in used if used.count(s) > 1}
        for w in self.writes:
            source = self.sources[w.out_position]
            pos = w.in_position
            leaf = plan.leaves[pos]
            changed = source.origin != IN
            write = writers[pos]
            if pos in boxes_at:
                if changed and write is not None:  # a new content for the box
                    others.append(OtherWrite(source, write))
            elif is_variable(leaf) and changed and pos not in refs_at:
                group = by_group.setdefault(source.at, VariableWrites([], [], source.at))
                group.targets.append(leaf)
                group.positions.append(source.position)
            elif pos in refs_at and changed and source not in shared and leaf is not None:
                ref_variables.append(leaf)
                ref_sources.append(source)
            elif write is not None:
                others.append(OtherWrite(source, write))
        installs = RefInstall(ref_variables, ref_sources) if ref_variables else None
        return with_apply(
            BoundFinish(
                var_writes=list(by_group.values()),
                other_writes=others,
                output=self.output_reader(plan),
                installs=installs,
                fresh=plan.auto is not None,
            )
        )

    def output_reader(self, plan: Plan) -> Callable[[list[Any], Sequence[Sequence[Any]]], Any]:
        """``(in_values, out_groups) -> output`` for one plan's objects."""
        build, nodes = self.build, plan.nodes
        assert build is not None
        if self.n_out == 1 and self.single_leaf:
            return _LeafOutput(self.sources[0])
        sources = self.sources[: self.n_out]

        def output(in_values: list[Any], out_groups: Sequence[Sequence[Any]]) -> Any:
            return build(leaf_values(sources, in_values, out_groups), nodes)

        return output


class _LeafOutput:
    """An output that is one leaf, taken from where ``source`` says."""

    __slots__ = ("source",)

    def __init__(self, source: LeafSource):
        self.source = source

    def __call__(self, in_values: list[Any], out_groups: Sequence[Sequence[Any]]) -> Any:
        s = self.source
        return in_values[s.at] if s.origin == IN else out_groups[s.at][s.position]


def _leaf_owners(root: Def, in_index: dict[int, int]) -> list[LeafOwner]:
    """Which input leaf each out leaf is (see ``LeafOwner``)."""
    owners: list[LeafOwner] = []

    def go(d: Any, path: tuple[Hashable, ...], in_input: bool) -> None:  # d: a Def
        t = type(d)
        if t is VariableDef:
            idx = in_index.get(d.index)
            owners.append(
                LeafOwner(OwnerKind.VAR, idx) if idx is not None else LeafOwner(OwnerKind.NEW)
            )
        elif t is ArrayDef:
            if path and path[0] in (1, 2):
                owners.append(LeafOwner(OwnerKind.PATH, (path[0] - 1, *path[1:])))
            else:
                owners.append(LeafOwner(OwnerKind.LOST if in_input else OwnerKind.NEW))
        elif t is NodeDef:
            inside = in_input or d.index in in_index
            for k, c in d.attributes:
                go(c, (*path, k), inside)
        elif t is ContainerDef:
            for k, c in zip(d.keys, d.children):
                go(c, (*path, k), in_input)

    go(root, (), False)
    return owners


class _OutputCompiler:
    """Turns an out GraphDef's output part into a builder ``(values, nodes) -> output``."""

    def __init__(self, in_index: dict[int, int]):
        self.in_index = in_index
        self.position = 0
        self.new_objects = False

    def compile(self, d: Any) -> Callable[[list[Any], list[Any]], Any]:  # d: a Def
        t = type(d)
        if t is NodeDef or t is VariableDef or t is NodeRef:
            idx = self.in_index.get(d.index)
            if idx is None:
                self.new_objects = True
                return lambda values, nodes: None
            self.position += _count_leaves(d)
            return lambda values, nodes: nodes[idx]
        if t is ArrayDef:
            pos = self.position
            self.position += 1
            return lambda values, nodes: values[pos]
        if t is StaticDef:
            value = d.value
            return lambda values, nodes: value
        if t is ContainerDef:
            builders = [self.compile(c) for c in d.children]
            return lambda values, nodes: container_of(d, [b(values, nodes) for b in builders])
        raise TypeError(f"Unknown GraphDef entry {d!r}")


def _count_leaves(d: Any) -> int:  # d: a Def
    t = type(d)
    if t is VariableDef or t is ArrayDef:
        return 1
    if t is NodeDef:
        return sum(_count_leaves(c) for _, c in d.attributes)
    if t is ContainerDef:
        return sum(_count_leaves(c) for c in d.children)
    return 0


class CacheInfo(NamedTuple):
    """What a transformed function's ``cache_info()`` returns.

    Attributes:
      general_calls: calls that took the general path (a graph walk, and a compile
        or a JAX cache lookup): the first call, calls after a structural change, calls
        with arguments the fast path does not cover (pytrees other than lists, tuples,
        dicts and attribute pytrees such as dataclasses and namedtuples).
      plans: fast-path plans currently cached (at most 4).
    """

    general_calls: int
    plans: int


class PlanCache:
    """The plans of one transformed function, most recent first, as ``() -> Plan | None``
    (weak when the plan's objects own it, ``plan_owners.py``)."""

    __slots__ = ("entries", "size", "recent", "general_calls")

    def __init__(self, size: int = 4):
        self.entries: OrderedDict[Any, Callable[[], Plan | None]] = OrderedDict()
        self.size = size
        self.recent: Callable[[], Plan | None] = _NO_PLAN  # tried first, before a key
        self.general_calls = 0  # counted by the transform on its general path

    @property
    def plans(self) -> OrderedDict[Any, Plan]:
        """The live plans by key, most recent first."""
        live: OrderedDict[Any, Plan] = OrderedDict()
        for key, ref in self.entries.items():
            plan = ref()
            if plan is not None:
                live[key] = plan
        return live

    def info(self) -> CacheInfo:
        """The counts a transformed function's ``cache_info()`` reports."""
        return CacheInfo(self.general_calls, len(self.plans))

    def sources(self) -> list[str]:
        """The generated source of every cached plan, most recent first."""
        return [plan.source for plan in self.plans.values()]

    def run_any(self, args: tuple[Any, ...], kwargs: dict[str, Any], statics: Any) -> Any:
        """The call through the first cached plan whose ``run`` applies, or ``MISS``."""
        recent = self.recent
        for ref in self.entries.values():
            if ref is recent:
                continue  # (tried already)
            plan = ref()
            if plan is None:
                continue
            result = plan.run(args, kwargs, statics)
            if result is not MISS:
                self.recent = ref
                return result
        return MISS

    def put(self, key: Any, plan: Plan) -> None:
        """Adds ``plan`` first, dropping dead entries and the oldest beyond ``size``."""
        if not plan.in_place:
            return
        plan.run, plan.source = compile_run(plan, finish_fast)
        ref: Callable[[], Plan | None]
        if can_own(plan):
            own(plan)
            ref = weakref.ref(plan)
        else:  # objects that cannot hold it: the cache does
            ref = itertools.repeat(plan).__next__
        old = self.entries.pop(key, None)
        old_plan = old() if old is not None else None
        if old_plan is not None and old_plan is not plan:
            disown(old_plan)
        self.entries[key] = ref
        self.entries.move_to_end(key, last=False)
        for dead in [k for k, r in self.entries.items() if r() is None]:
            del self.entries[dead]
        while len(self.entries) > self.size:
            _, dropped = self.entries.popitem()
            dropped_plan = dropped()
            if dropped_plan is not None:
                disown(dropped_plan)
        self.recent = ref


_NO_PLAN: Callable[[], None] = type(None)  # ``recent`` before any plan: returns None


def same_trace(call: Call) -> bool:
    """Whether every input object was created in the current trace (a plan needs it)."""
    trace = current_trace()
    return not any(created_outside(n, trace) for n in call.nodes)


def finish_fast(
    plan: Plan, out: OutStatic, out_groups: Sequence[Sequence[Any]], in_values: list[Any]
) -> Any:
    """Applies ``out`` to the plan's objects and returns the output."""
    bound: BoundFinish | None
    if out is plan.last_out:
        bound = plan.last_finish
    else:
        fin = cast("FinishPlan | None", out.finish.plan)
        if fin is None:
            fin = out.finish.plan = FinishPlan(out, plan)
        if not fin.usable:
            return _general_finish(plan, out, out_groups, in_values)
        if fin in plan.finishes:
            bound = plan.finishes[fin]
        else:
            bound = plan.finishes[fin] = fin.bind(plan)
            if plan.last_out is None and plan.in_place and bound is not None:
                # The first write-back of this plan: written into its run function.
                plan.run, plan.source = compile_run(plan, finish_fast, out, bound)
        if bound is not None:
            plan.last_out, plan.last_finish = out, bound
    if bound is None:  # an output would hand out a Ref's own array
        return _general_finish(plan, out, out_groups, in_values)
    assert bound.apply is not None  # (FinishPlan.bind generates it)
    return bound.apply(in_values, out_groups)


def _general_finish(
    plan: Plan, out: OutStatic, out_groups: Sequence[Sequence[Any]], in_values: list[Any]
) -> Any:
    """The general write-back, with copies of the Refs' values."""
    if plan.ref_positions:
        in_values = copies_of_ref_values(in_values, plan.ref_positions, plan.leaves)
    return write_back(out, leaf_values(out.sources, in_values, out_groups), plan.nodes)
