"""Prefix resolution and the consistent-aliasing check, in one graph walk (``PrefixWalk``).

See ``docs/design.md``, "The five lift steps" (step 1) and "Errors".
Source: the "JAX-style NNX Transforms" FLIP flax#4107 ("Consistent aliasing").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

from flaxgraph.errors import FlaxgraphError, SharedReferenceError, numbered_fixes
from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.paths import path_str
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE, node_impl
from flaxgraph.graphlib.walk import Walk, variable_paths
from flaxgraph.statelib import State
from flaxgraph.transforms.lift_types import (
    NO_MATCH,
    LiftType,
    StatePrefix,
    is_graph_prefix,
    is_node_states,
    is_reference_prefix,
    object_prefix,
    unbox_value,
)
from flaxgraph.typing import PathParts
from flaxgraph.variablelib.refs import is_ref
from flaxgraph.variablelib.variable import Variable, is_variable


class InconsistentAliasingError(FlaxgraphError, ValueError):
    """One object reachable along several paths receives different prefixes."""


class PrefixError(FlaxgraphError, ValueError):
    """A prefix tree (``in_axes``, ``in_shardings``…) does not fit the value it is for."""


@dataclasses.dataclass(frozen=True)
class PrefixSpec:
    """What counts as a prefix for one transform argument (``in_axes``…)."""

    name: str
    is_leaf: Callable[[Any], bool]
    lift_type: type | None = None
    fix: str = ""
    wildcard: object = None
    """``jit``'s unspecified sharding; ``None`` if there is none."""


@dataclasses.dataclass(frozen=True)
class _MapCtx:
    """Inside an object that received a lift type: resolve leaves by filter."""

    mapping: LiftType
    base: int  # length of the object's path; leaf paths are taken relative to it


@dataclasses.dataclass(frozen=True)
class NamedRoots:
    """Names the top-level positions of a walked tuple (``args``, ``kwargs``, ``output``)."""

    names: tuple[str, ...]
    values: tuple[Any, ...]

    def where(self, path: PathParts) -> str:
        if not path:
            return "(" + ", ".join(self.names) + ")"
        i = path[0]
        return path_str(self.names[i], self.values[i], path[1:])  # type: ignore[call-overload]


class PrefixWalk(Walk):
    """Flattens a tuple of roots, resolving one prefix per leaf and checking aliasing."""

    dynamic_leaves = True

    def __init__(
        self,
        spec: PrefixSpec,
        roots: NamedRoots,
        ref_index: RefMap[int] | None = None,
        graph: bool = True,
    ):
        super().__init__(RefMap() if ref_index is None else ref_index, "args", roots.values, graph)
        self.spec = spec
        self.roots = roots
        self.leaf_prefixes: list[Any] = []
        self.contexts: RefMap[Any] = RefMap()
        self.conflict = False

    def where(self, path: PathParts) -> str:
        return self.roots.where(path)

    def diagnostic_root(self) -> tuple[Any, bool]:
        return self.roots.values, True

    # -- prefix semantics ------------------------------------------------------------------
    def _context(self, node: object, path: PathParts, prefix: object) -> object:
        """The prefix context an object gets from ``prefix`` (checked)."""
        if isinstance(prefix, _MapCtx) or self.spec.is_leaf(prefix):
            return prefix
        if isinstance(prefix, State):
            return _MapCtx(StatePrefix(prefix), len(path))  # type: ignore[arg-type]
        node_prefix = object_prefix(prefix, self.graph)
        if node_prefix is not None:
            return _MapCtx(node_prefix, len(path))  # type: ignore[arg-type]
        if is_graph_prefix(prefix):
            raise PrefixError(
                f"{self.spec.name} gives the graph node {type(prefix).__name__} as the prefix "
                f"of the {type(node).__name__} at {self.where(path)}. Graph nodes are not "
                "allowed as prefixes when graph=True: a prefix object only stands for a "
                "pytree in tree mode.\nFix: use nnx.prefix(obj, {filter: value}, graph=True) "
                "(a NodeStates of prefixes), a State of prefixes, or a lift type."
            )
        lift: Any = self.spec.lift_type
        if lift is not None and isinstance(prefix, lift):
            bad = [p for p in prefix.prefixes if not self.spec.is_leaf(p)]
            if bad:
                raise PrefixError(
                    f"{self.spec.name} gives {prefix!r} for the {type(node).__name__} at "
                    f"{self.where(path)}, but {bad[0]!r} is not a valid {self.spec.name} value."
                    + (f"\nFix: {self.spec.fix}" if self.spec.fix else "")
                )
            return _MapCtx(prefix, len(path))
        raise PrefixError(
            f"{self.spec.name} gives {_describe(prefix)} for the {type(node).__name__} at "
            f"{self.where(path)}, but an object takes one prefix for all of its state"
            + (f" or a {lift.__name__}" if lift is not None else "")
            + "."
            + (f"\nFix: {self.spec.fix}" if self.spec.fix else "")
        )

    def _leaf_prefix(self, path: PathParts, leaf: object, ctx: object) -> object:
        if isinstance(ctx, _MapCtx):
            prefix = ctx.mapping.prefix_of(path[ctx.base :], leaf)
            if prefix is NO_MATCH:
                raise PrefixError(
                    f"The {kind_name(leaf)} at {self.where(path)} matches none of the "
                    f"filters of {ctx.mapping!r}.\nFix: add a filter for it, or end the "
                    "mapping with `...: <prefix>` to cover the rest."
                    if not isinstance(ctx.mapping, StatePrefix)
                    else f"The {kind_name(leaf)} at {self.where(path)} has no entry in the "
                    f"State given as {self.spec.name} for its object.\nFix: build the "
                    "prefix State from the same object's state (e.g. "
                    "nnx.get_named_sharding(nnx.state(model), mesh))."
                )
            return prefix
        if self.spec.is_leaf(ctx):
            return ctx
        if isinstance(ctx, LiftType) and ctx.distributes:
            return ctx.leaf_prefix
        raise PrefixError(
            f"{self.spec.name} gives {_describe(ctx)} for the {kind_name(leaf)} leaf at "
            f"{self.where(path)}; a leaf takes a single prefix."
            + (f"\nFix: {self.spec.fix}" if self.spec.fix else "")
        )

    def _context_key(self, x: object, path: PathParts, ctx: object) -> object:
        if isinstance(ctx, _MapCtx):
            return ("map", ctx.mapping, path[ctx.base :])
        return ("leaf", ctx)

    # -- Walk hooks ------------------------------------------------------------------------
    def enter_node(self, node: object, path: PathParts, prefix: object) -> object:
        ctx = self._context(node, path, prefix)
        if REGISTRY.kind_of(node) is VARIABLE:
            resolved = self._leaf_prefix(path, node, ctx)
            self.contexts[node] = ("leaf", resolved)
            return resolved
        self.contexts[node] = self._context_key(node, path, ctx)
        return ctx

    def on_alias(self, x: object, path: PathParts, prefix: object) -> None:
        if is_reference_prefix(prefix):
            return  # nnx.prefix((m, m), ...): a later sighting carries a reference only
        ctx, resolved = self._sighting(x, path, prefix)
        if resolved is NO_MATCH:
            return
        key = self._context_key(x, path, ctx) if resolved is _NODE else ("leaf", resolved)
        first = self.contexts[x]
        if key != first and not (self._wild(key) or self._wild(first)):
            self.conflict = True

    def _sighting(self, x: object, path: PathParts, prefix: object) -> tuple[object, object]:
        """A later sighting of ``x``: ``(context, leaf prefix)``; the prefix is ``_NODE`` for a
        graph node and ``NO_MATCH`` to keep the first (a raw ``jax.Ref`` is a leaf)."""
        if is_ref(x):
            return prefix, self._leaf_prefix(path, x, prefix)
        ctx = self._context(x, path, prefix)
        if is_variable(x):  # (the TypeGuard narrows x for _alias_prefix)
            return ctx, self._alias_prefix(path, x, ctx)
        return ctx, _NODE

    def _alias_prefix(self, path: PathParts, x: Variable[Any], ctx: Any) -> object:
        """The prefix a later sighting of ``x`` receives, or ``NO_MATCH`` to keep its first."""
        if not _unlisted_reference(x, path, ctx):
            return self._leaf_prefix(path, x, ctx)
        rule = ctx.mapping.rule
        return NO_MATCH if rule is None else rule(path[ctx.base :], x)

    def _wild(self, key: Any) -> bool:
        wildcard = self.spec.wildcard
        return wildcard is not None and key[0] == "leaf" and key[1] is wildcard

    def child_prefixes(
        self, x: object, path: PathParts, prefix: object, keys: Sequence[Hashable]
    ) -> Sequence[Any] | None:
        if isinstance(prefix, _MapCtx) or self.spec.is_leaf(prefix):
            return None
        if isinstance(prefix, LiftType) and prefix.distributes:
            return None
        if isinstance(prefix, LiftType):
            raise PrefixError(
                f"{type(prefix).__name__} can only be used for an object (a Module, Object or "
                f"Variable), but {self.spec.name} gives it for the {type(x).__name__} at "
                f"{self.where(path)}.\nFix: give each object inside its own "
                f"{type(prefix).__name__}, or a plain prefix for the whole {type(x).__name__}."
            )
        if isinstance(prefix, (tuple, list)) and isinstance(x, (tuple, list)):
            if len(prefix) == len(x):
                return list(prefix)
            raise PrefixError(
                f"{self.spec.name} has {len(prefix)} entries at {self.where(path)}, but the "
                f"{type(x).__name__} there has {len(x)}.\nFix: give one entry per element, or "
                "a single prefix for all of them."
            )
        if isinstance(prefix, State) and not isinstance(x, (tuple, list, dict)):
            missing = [k for k in keys if k not in prefix]
            if not missing:
                return [unbox_value(prefix[k]) for k in keys]
            raise PrefixError(
                f"{self.spec.name} gives a State for the {type(x).__name__} at "
                f"{self.where(path)}, but it has no entry for {missing[0]!r}.\nFix: build "
                "the prefix State from the same state (e.g. nnx.prefix(state, {...}))."
            )
        if isinstance(prefix, dict) and isinstance(x, dict):
            if set(prefix) == set(x):
                return [prefix[k] for k in keys]
            raise PrefixError(
                f"{self.spec.name} has keys {sorted(map(str, prefix))} at {self.where(path)}, "
                f"but the dict there has keys {sorted(map(str, x))}."
            )
        raise PrefixError(
            f"{self.spec.name} gives {_describe(prefix)} for the {type(x).__name__} at "
            f"{self.where(path)}; the structures do not match."
            + (f"\nFix: {self.spec.fix}" if self.spec.fix else "")
        )

    def add_leaf(self, path: PathParts, leaf: object, prefix: object) -> None:
        if REGISTRY.kind_of(leaf) is not VARIABLE:
            prefix = self._leaf_prefix(path, leaf, prefix)
            if self.graph and is_ref(leaf):
                self.contexts[leaf] = ("leaf", prefix)
        self.leaves.append((path, leaf))
        self.leaf_prefixes.append(prefix)

    def run_checked(
        self, value: object, prefix: object
    ) -> tuple[GraphDef[Any], list[tuple[PathParts, Any]], list[Any]]:
        """``run`` plus the aliasing check: ``(graphdef, leaves, leaf_prefixes)``.

        Raises:
          PrefixError: the prefix tree does not fit the value.
          InconsistentAliasingError: an object's aliases receive different prefixes.
        """
        graphdef, leaves = self.run(value, prefix)
        if self.conflict:
            AliasDiagnostics(self.spec, self.roots).check(value, prefix)
        return graphdef, leaves, self.leaf_prefixes


def _unlisted_reference(x: object, path: PathParts, ctx: object) -> bool:
    """Whether the alias ``x`` is a Variable its ``nnx.prefix`` prefix lists only as a reference."""
    return (
        REGISTRY.kind_of(x) is VARIABLE
        and isinstance(ctx, _MapCtx)
        and isinstance(ctx.mapping, StatePrefix)
        and is_node_states(ctx.mapping.state)
        and ctx.mapping.prefix_of(path[ctx.base :], x) is NO_MATCH
    )


_NODE = object()  # ``PrefixWalk._sighting`` of a graph node
_MAX_RECORDS = 10_000  # the diagnostic walk stops growing past this (huge shared DAGs)


class Sighting(NamedTuple):
    """One path along which ``AliasDiagnostics`` reached a leaf, with the prefix it got there."""

    path: PathParts
    leaf: object
    prefix: object


class AliasDiagnostics(PrefixWalk):
    """Re-walks every alias to list each leaf's prefix along every path (errors only)."""

    def __init__(self, spec: PrefixSpec, roots: NamedRoots):
        super().__init__(spec, roots)
        self.records: dict[Any, list[Sighting]] = {}
        self.node_at: dict[PathParts, Any] = {}
        self.expanding: set[int] = set()  # nodes being re-walked (stops cycles)

    def enter_node(self, node: object, path: PathParts, prefix: object) -> object:
        self.node_at[path] = node
        return super().enter_node(node, path, prefix)

    def _record(self, path: PathParts, leaf: object, prefix: object) -> None:
        if REGISTRY.kind_of(leaf) is VARIABLE or is_ref(leaf):
            key: object = ("var", id(leaf))
        else:
            for cut in range(len(path) - 1, -1, -1):
                owner = self.node_at.get(path[:cut])
                if owner is not None:
                    key = ("attr", id(owner), path[cut:])
                    break
            else:
                key = ("path", path)
        self.records.setdefault(key, []).append(Sighting(path, leaf, prefix))

    def add_leaf(self, path: PathParts, leaf: object, prefix: object) -> None:
        super().add_leaf(path, leaf, prefix)
        self._record(path, leaf, self.leaf_prefixes[-1])

    def on_alias(self, x: object, path: PathParts, prefix: object) -> None:
        if is_reference_prefix(prefix):
            return  # nnx.prefix((m, m), ...): a later sighting carries a reference only
        ctx, resolved = self._sighting(x, path, prefix)
        if resolved is not _NODE:
            if resolved is not NO_MATCH:
                self._record(path, x, resolved)
            return
        if id(x) in self.expanding or len(self.records) > _MAX_RECORDS:
            return
        self.expanding.add(id(x))
        self.node_at[path] = x
        items, _ = node_impl(x).flatten(x)
        for k, v in items:
            self.visit(v, (*path, k), ctx, True)
        self.expanding.discard(id(x))

    def check(self, value: object, prefix: object) -> None:
        self.run(value, prefix)
        wildcard = self.spec.wildcard

        def n_prefixes(record: list[Sighting]) -> int:
            return len(
                {_hashable_key(s.prefix) for s in record if s.prefix is not wildcard}
                if wildcard is not None
                else {_hashable_key(s.prefix) for s in record}
            )

        bad = [r for r in self.records.values() if n_prefixes(r) > 1]
        if not bad:
            return
        lines = []
        for record in bad:
            leaf = record[0].leaf
            lines.append(f"  {kind_name(leaf)}{_shape(leaf)}:")
            lines.extend(f"    {self.where(s.path)}: {s.prefix!r}" for s in record)
        raise InconsistentAliasingError(
            "Inconsistent aliasing detected. The following nodes have different prefixes "
            f"({self.spec.name}): an object is reachable along several paths that give it "
            f"different {self.spec.name}. Every alias of an object must be "
            f"transformed the same way; the aliases and the {self.spec.name} each received:\n"
            + "\n".join(lines)
            + "\n"
            + numbered_fixes(
                [
                    f"give every position that holds the object the same {self.spec.name};",
                    "pass a copy (nnx.clone(obj)) where it must be transformed differently;",
                    "or use a lift type (StateAxes, StateSharding, DiffState) whose filters "
                    "give the shared part one prefix.",
                ]
            )
        )


def kind_name(leaf: object) -> str:
    """How messages name a leaf: its Variable kind, or ``array`` for raw arrays."""
    if is_variable(leaf):
        return type(leaf).__name__
    return "array" if hasattr(leaf, "shape") and hasattr(leaf, "dtype") else type(leaf).__name__


def _hashable_key(p: object) -> object:
    try:
        hash(p)
        return p
    except TypeError:
        return repr(p)


def _shape(leaf: object) -> str:
    value = leaf.raw_value if is_variable(leaf) else leaf
    shape = getattr(value, "shape", None)
    return f" of shape {tuple(shape)}" if shape is not None else ""


def _describe(prefix: object) -> str:
    if isinstance(prefix, (tuple, list, dict)):
        return f"a {type(prefix).__name__} {prefix!r}"
    return repr(prefix)


def with_duplicates_line(
    error: SharedReferenceError, roots: tuple[Any, ...], select: Callable[[Any], bool] | None
) -> SharedReferenceError:
    """``error`` with a last line naming Variables reached twice (Flax's ``Duplicate Param``)."""
    kinds: list[str] = []
    for entries in variable_paths(roots, True).values():
        paths = [p for _, p in entries]
        if len(entries) > 1 and (select is None or select(paths)):
            kind = type(entries[0][0]).__name__
            if kind not in kinds:
                kinds.append(kind)
    if not kinds:
        return error
    listed = ", ".join(f"Duplicate {k}" for k in kinds)
    return SharedReferenceError(
        f"{error}\n({listed}: Variable aliasing needs graph=True, graph_updates=True.)"
    )
