"""A fast-path plan: what a repeated call with the same argument structure needs,
and the records it is made of.

A ``Plan`` is made by a transform's general path after a call (``transformed.py``)
and kept by the function's ``PlanCache`` (``fastpath.py``), which generates its
``run`` function (``plan_code.py``): the plan's checks, reads, call and write-back
as straight-line code. This module holds the plan and its records only, so that the
code generator and the cache both name the one ``Plan``.

Source: ``docs/design.md``, "The fast path".
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple, cast

from flaxgraph.graphlib.graphdefs import (
    ArrayDef,
    ContainerDef,
    Def,
    GraphDef,
    NodeDef,
    NodeRef,
    StaticDef,
    VariableDef,
)
from flaxgraph.graphlib.registry import is_hashable
from flaxgraph.graphlib.snapshot import StructureSnapshot
from flaxgraph.tracing import current_trace
from flaxgraph.transforms.compiled import Compiled
from flaxgraph.transforms.donation import AutoDonation
from flaxgraph.transforms.leaf_access import (
    is_in_place,
    leaf_reader,
    leaf_writer,
)
from flaxgraph.transforms.lift import Call, LeafSource, OutStatic, Slots
from flaxgraph.transforms.prefix_groups import DonatedKey
from flaxgraph.transforms.ref_writes import RefInstall
from flaxgraph.variablelib.variable import Variable, is_box_backed, is_ref_backed, is_variable

_LEAF = object()


class VariableWrites(NamedTuple):
    """Input Variables whose new values all come from one output group, set with one
    C-level ``map``: ``targets[k].raw_value = out_groups[group][positions[k]]``."""

    targets: list[Variable[Any]]
    positions: list[int]
    group: int


class OtherWrite(NamedTuple):
    """A write that is not a plain Variable's value (an array attribute, a list item,
    a box-backed Variable): ``write(value of source)``."""

    source: LeafSource
    write: Callable[[Any], None]


class BoundFinish(NamedTuple):
    """A ``FinishPlan`` bound to one plan's objects (``FinishPlan.bind``).

    Attributes:
      var_writes: the Variables' new values, grouped by output group.
      other_writes: the other writes (array attributes, list items, boxes).
      output: ``(in_values, out_groups) -> output`` (``FinishPlan.output_reader``).
      installs: the new arrays of Ref-backed Variables (``RefInstall``), or ``None``.
      apply: ``(in_values, out_groups) -> output``: all of the above, generated
        from the one write-back template (``_write_back``, which a plan's ``run``
        also inlines); ``None`` until ``plan_code.with_apply``.
    """

    var_writes: list[VariableWrites]
    other_writes: list[OtherWrite]
    output: Callable[[list[Any], Sequence[Sequence[Any]]], Any]
    installs: RefInstall | None
    apply: Callable[[list[Any], Sequence[Sequence[Any]]], Any] | None = None


class CheckKind(enum.Enum):
    """What an argument check of a plan compares (``ArgCheck``; its
    ``expected`` per kind is documented there)."""

    IS = "is"  # the same object
    TYPE = "type"  # a leaf of that type
    ITEMS = "items"  # a list, tuple or dict of that type with those keys or length
    PYTREE = "pytree"  # an attribute pytree of that type and one-level structure


MISS: Any = object()  # what run returns when the plan does not apply (None is an output)


def miss_always(args: tuple[Any, ...], kwargs: dict[str, Any], statics: Any) -> Any:
    """A ``run`` for a plan without generated code: never applies."""
    return MISS


def record_key(checks: Sequence[ArgCheck], statics: Any) -> Hashable:
    """The ``PlanCache`` key of a plan: its recorded argument checks (objects by
    identity) with the static arguments, so that a new plan for the same arguments
    (after a structural change) replaces the old one. It is read from the record the
    general walk made (``recorded_checks``), never from a call's arguments: finding
    the plan that applies to a call is the plans' own ``run`` (each checks
    everything itself), tried in turn (``PlanCache.run_any``). An unhashable record
    (unhashable static fields of a pytree) gives a key of its own."""
    key = (
        tuple(
            (c.root, c.keys, c.kind, id(c.expected) if c.kind is CheckKind.IS else c.expected)
            for c in checks
        ),
        statics,
    )
    return key if is_hashable(key) else object()


class ArgCheck(NamedTuple):
    """One check that a call's argument still has the plan's structure
    (``Plan.arg_checks``).

    Attributes:
      root: ``0`` below ``args``, ``1`` below ``kwargs``.
      keys: the path below the root (the argument's index or name first).
      kind: a ``CheckKind``.
      expected: ``IS``: the object; ``TYPE``: the type; ``ITEMS``: ``(type, keys or
        length)``; ``PYTREE``: ``(type, one-level treedef)``.
    """

    root: int
    keys: tuple[Any, ...]
    kind: CheckKind
    expected: Any


class ArgLeaf(NamedTuple):
    """An input leaf that is an argument's own value (``Plan.arg_leaves``): read from
    the call's arguments on every call.

    Attributes:
      position: the leaf's position among the input leaves.
      root: ``0`` below ``args``, ``1`` below ``kwargs``.
      keys: the path below the root.
    """

    position: int
    root: int
    keys: tuple[Hashable, ...]


def recorded_checks(call: Call) -> tuple[ArgCheck, ...] | None:
    r"""The ``ArgCheck``\ s of a plan, read from what the general walk recorded of the
    call's arguments (``call.graphdef``, whose root holds ``(args, kwargs)``), not
    decided again: a container the walk recorded (a list, tuple or dict; an attribute
    pytree with its one-level treedef) is checked for its type and keys, then its
    items; a leaf the walk made (an argument array, a traced Python or NumPy
    number, ``walk.traced_constant``) for its type, or for being another leaf of the
    walk's rule; a static value, a graph node and a Variable for identity (the
    object the walk saw). Containers come before their items, so each access of the
    generated code is safe once reached. ``None`` when the record holds what a plan
    cannot check (a raw ``jax.Ref``, an ``nnx.data``/``nnx.static`` mark, an object
    inside an attribute pytree).
    """
    root = call.graphdef.root
    if type(root) is not ContainerDef or len(root.children) != 2:
        return None
    leaf_at = dict(zip(call.graphdef.leaf_paths, call.leaves))
    out: list[ArgCheck] = []
    for r, part in enumerate(root.children):
        if type(part) is not ContainerDef:
            return None
        for key, child in zip(part.keys, part.children):
            if not _record(child, r, (key,), leaf_at, call.nodes, out, True):
                return None
    return tuple(out)


def argument_leaf_paths(graphdef: GraphDef[Any]) -> frozenset[tuple[Hashable, ...]]:
    """The paths of the leaves the general walk recorded in the arguments' own
    containers (lists, tuples, dicts, attribute pytrees; no graph node in between):
    they change with every call's arguments and are read from them."""
    found: set[tuple[Hashable, ...]] = set()
    todo: list[tuple[Def, tuple[Hashable, ...]]] = [(graphdef.root, ())]
    while todo:
        d, path = todo.pop()
        if isinstance(d, ContainerDef):
            todo.extend((c, (*path, k)) for k, c in zip(d.keys, d.children))
        elif isinstance(d, ArrayDef) and len(path) > 1:
            found.add(path)
    return frozenset(found)


def _record(
    d: Def,
    root: int,
    keys: tuple[Hashable, ...],
    leaf_at: dict[tuple[Hashable, ...], object],
    nodes: Sequence[Any],
    out: list[ArgCheck],
    objects: bool,
) -> bool:
    """Appends the checks of the recorded definition ``d`` at ``keys`` (see
    ``recorded_checks``); False when it cannot be checked."""
    if isinstance(d, ContainerDef):
        if d.treedef is None:
            expected = (d.type, d.keys if d.type is dict else len(d.keys))
            out.append(ArgCheck(root, keys, CheckKind.ITEMS, expected))
        else:
            if not all(type(k) is str and k.isidentifier() for k in d.keys):
                return False  # read by attribute in the generated code
            out.append(ArgCheck(root, keys, CheckKind.PYTREE, (d.type, d.treedef)))
            objects = False
        return all(
            _record(c, root, (*keys, k), leaf_at, nodes, out, objects)
            for k, c in zip(d.keys, d.children)
        )
    if isinstance(d, ArrayDef):
        if d.index is not None:  # a raw jax.Ref
            return False
        leaf = leaf_at.get((root, *keys), _LEAF)
        if leaf is _LEAF:  # an nnx.data mark: its value is the leaf
            return False
        out.append(ArgCheck(root, keys, CheckKind.TYPE, type(leaf)))
        return True
    if isinstance(d, StaticDef):
        out.append(ArgCheck(root, keys, CheckKind.IS, d.value))
        return True
    if objects and isinstance(d, NodeDef | VariableDef | NodeRef):
        out.append(ArgCheck(root, keys, CheckKind.IS, nodes[d.index]))
        return True
    return False


class Plan:
    """What a repeated call with the same argument structure needs (see module doc).

    ``plan.run(args, kwargs, statics)`` is the whole fast path, generated for the
    plan (``plan_code.py``): it checks that the call has this plan's arguments (the
    same objects, leaves of the same types) and that their structure is unchanged,
    reads the leaves, calls the compiled function and finishes; it returns ``MISS``
    (having done nothing) when the plan does not apply. It is the only form of the
    plan's checks and reads: a plan found by key runs it too.
    """

    __slots__ = (
        "graphdef",
        "nodes",
        "snapshot",
        "leaves",
        "compiled",
        "members",
        "getters",
        "targets",
        "arg_leaves",
        "passthrough",
        "trace",
        "writers",
        "finishes",
        "in_place",
        "n_args",
        "statics",
        "kwarg_names",
        "arg_checks",
        "attribute_parents",
        "leaf_variables",
        "last_out",
        "last_finish",
        "run",
        "source",
        "ref_positions",
        "box_positions",
        "auto",
        "repeat_positions",
        "__weakref__",  # the PlanCache holds plans weakly (plan_owners.py)
    )

    def __init__(
        self,
        call: Call,
        compiled: Compiled,
        slots: Slots,
        n_groups: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        statics: Any = (),
        *,
        donated: bool = False,
        auto: AutoDonation | None = None,
    ):
        # The automatic donation the compiled function was made for: each call
        # donates a copy of a candidate something else holds (donation.copy_held).
        self.auto = auto
        # Explicitly donated leaves: each call donates a copy of an array met twice
        # among them (donation.copy_repeats).
        auto_positions = frozenset(auto.positions) if auto is not None else frozenset()
        self.repeat_positions = (
            tuple(
                i
                for i, p in enumerate(call.prefixes)
                if isinstance(p, DonatedKey) and p.donated and i not in auto_positions
            )
            if donated
            else ()
        )
        # Only what later calls need: no reference to the first call's values or to
        # its arguments' own arrays.
        self.graphdef = call.graphdef
        self.nodes = call.nodes
        self.leaves = [leaf if is_variable(leaf) else None for leaf in call.leaves]
        self.compiled = compiled
        members: list[list[int]] = [[] for _ in range(n_groups)]
        for i, g in enumerate(slots.groups):
            members[g].append(i)
        self.members = members
        # The call's signature: which arguments are objects (compared by identity)
        # and which are leaves (compared by type).
        self.n_args = len(args)
        self.statics = statics
        self.kwarg_names = frozenset(kwargs)
        recorded = recorded_checks(call)
        checks = recorded if recorded is not None else ()
        self.arg_checks = checks
        # Arguments' pytrees whose items are reached by attribute (plan_code._access).
        self.attribute_parents = frozenset(
            (c.root, c.keys) for c in checks if c.kind is CheckKind.PYTREE
        )
        # What to compare to know the structure is unchanged (see graphlib/snapshot.py).
        self.snapshot = StructureSnapshot(call.nodes)
        # Leaves inside pytrees other than lists, tuples and dicts (namedtuples,
        # dataclasses…) reached through an object can be neither read by key nor
        # written in place: such graphs take the general path (the arguments' own
        # containers are read on every call). A leaf in a tuple is read through the
        # tuple's holder and written by rebuilding the tuple (leaf_access.LeafPlace).
        # Ref-backed Variables are read and written through their Refs
        # (ref_writes.py), box-backed ones (hijax Variables holding pytrees) through
        # their boxes (a copy of the content in, the new content set), unless
        # arguments are donated.
        stored = [
            pos for pos, leaf in enumerate(call.leaves) if is_variable(leaf) and is_ref_backed(leaf)
        ]
        self.box_positions = frozenset(p for p in stored if is_box_backed(call.leaves[p]))
        self.ref_positions = frozenset(stored) - self.box_positions
        in_args = argument_leaf_paths(call.graphdef)
        self.in_place = (
            recorded is not None
            and self.snapshot.versioned
            and not (donated and stored)
            and all(
                is_variable(leaf)
                or is_in_place(path, call.graphdef.root, args, kwargs, path in in_args)
                for path, leaf in zip(call.graphdef.leaf_paths, call.leaves)
            )
        )
        # Reading a leaf is one C call: getter(target). Arguments' own leaves (x, y…)
        # change every call; their positions are filled in per call.
        self.getters: list[Any] = []
        self.targets: list[Any] = []
        self.arg_leaves: list[ArgLeaf] = []
        if self.in_place:
            for pos, (path, leaf) in enumerate(zip(call.graphdef.leaf_paths, call.leaves)):
                getter, target = leaf_reader(
                    path, call.graphdef.root, leaf, args, kwargs, path in in_args
                )
                self.getters.append(getter)
                self.targets.append(target)
                if target is None:
                    self.arg_leaves.append(ArgLeaf(pos, cast(int, path[0]), tuple(path[1:])))
        # The common case: every leaf is a Variable or an argument. Then reading is
        # one map over the Variables plus an insert per argument leaf.
        n_vars = sum(1 for leaf in call.leaves if is_variable(leaf))
        self.leaf_variables = (
            [leaf for leaf in call.leaves if is_variable(leaf)]
            if n_vars + len(self.arg_leaves) == len(call.leaves) and not stored
            else None
        )
        self.passthrough = len(members) == 1 or (
            sum(1 for m in members if m) == 1 and members[0] == list(range(len(slots.groups)))
        )
        self.trace = current_trace()
        # How to store a new value in place for each input leaf (None: no place, e.g.
        # an argument's own array).
        self.writers = [
            (
                leaf_writer(path, call.graphdef.root, leaf, args, kwargs, path in in_args)
                if self.in_place
                else None
            )
            for path, leaf in zip(call.graphdef.leaf_paths, call.leaves)
        ]
        self.finishes: dict[Hashable, BoundFinish | None] = {}  # by fastpath.FinishPlan
        self.last_out: OutStatic | None = None
        self.last_finish: BoundFinish | None = None
        # run(args, kwargs, statics): the whole fast path for one call, generated
        # for this plan (see plan_code.py); MISS when the plan does not apply.
        # (``PlanCache.put`` generates it for a plan it keeps, see plan_code.py.)
        self.run: Callable[..., Any] = miss_always
        self.source = ""
