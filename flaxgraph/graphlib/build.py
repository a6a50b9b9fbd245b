"""Unflatten: (GraphDef, leaves) -> object graph, optionally updating existing objects.

Nodes are made without ``__init__``, each reference index once (sharing and cycles come
back); with ``reuse`` the caller's objects are updated in place, structure included (the
package README, "The build"). Source: Flax NNX 0.12 ``nnx.merge`` (its graph unflatten).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flaxgraph.errors import GraphStructureError
from flaxgraph.graphlib.graphdefs import (
    ArrayDef,
    ContainerDef,
    GraphDef,
    NodeDef,
    NodeRef,
    StaticDef,
    VariableDef,
)
from flaxgraph.graphlib.ref_outputs import ArrayRefOutput, NoUpdate, unwrap_ref_output
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE
from flaxgraph.graphlib.writes import Writes
from flaxgraph.tracing import current_trace
from flaxgraph.typing import MISSING
from flaxgraph.variablelib.refs import is_ref, new_ref
from flaxgraph.variablelib.variable import metadata_of


def build_graph(
    graphdef: GraphDef[Any],
    leaves: Sequence[Any],
    *,
    index_ref: dict[int, Any] | None = None,
    reuse: dict[int, Any] | None = None,
    leaf_sink: list[Any] | None = None,
    copy_variables: bool = True,
    recreate_variables: bool = True,
    new_refs: bool = False,
) -> Any:
    """Builds the graph of ``graphdef`` from ``leaves`` (in ``graphdef.leaf_paths`` order).

    Args:
      graphdef: the structure.
      leaves: one leaf per ``graphdef.leaf_paths`` entry: a Variable (its value
        and metadata are used) or a raw value.
      index_ref: reference index -> object map shared between calls
        (``merge_context``); objects already in it are used for their NodeRefs.
      reuse: reference index -> existing object (of the same type) to update in place;
        all writes are checked first and made together (``writes.Writes``), unchanged
        values are not written.
      leaf_sink: if given, receives the built leaf objects in leaf order.
      copy_variables: ``True``: a Variable leaf gives a new Variable; ``False``: the
        leaf itself is placed (``nnx.merge``'s default). Reused objects are updated
        either way.
      recreate_variables: a raw leaf at a Variable's place becomes a Variable of the
        GraphDef's kind and metadata (``True``) or stays raw.
      new_refs: a plain array at a raw ``jax.Ref``'s place becomes a new Ref (JAX
        cannot return Refs from a transform).


    Returns:
      The root value.

    Raises:
      GraphStructureError (a ``ValueError``): ``leaves`` has the wrong length, a
        NodeRef points to an index never defined, or a reused object has another
        type.
      TraceContextError (a ``ValueError``): a reused object that must change was
        created in another JAX trace.
    """
    if len(leaves) != len(graphdef.leaf_paths):
        raise GraphStructureError(
            f"The GraphDef expects {len(graphdef.leaf_paths)} state leaves but got {len(leaves)}."
        )
    builder = _Build(leaves, {} if index_ref is None else index_ref, reuse or {}, leaf_sink)
    if not copy_variables or not recreate_variables:
        builder.plain = False
        builder.copy, builder.recreate = copy_variables, recreate_variables
    builder.new_refs = new_refs
    root = builder.build(graphdef.root)
    builder.writes.apply(builder.trace)
    return root


class _Build:
    __slots__ = (
        "leaves",
        "position",
        "index_ref",
        "reuse",
        "writes",
        "sink",
        "trace",
        "plain",
        "copy",
        "recreate",
        "new_refs",
        "impls",
    )

    def __init__(
        self,
        leaves: Sequence[Any],
        index_ref: dict[int, Any],
        reuse: dict[int, Any],
        sink: list[Any] | None,
    ):
        self.leaves = leaves
        self.position = 0
        self.index_ref = index_ref
        self.reuse = reuse
        self.writes = Writes()
        self.sink = sink
        self.trace = current_trace()
        self.plain = True  # the defaults: every Variable is built anew
        self.copy = True
        self.recreate = True
        self.new_refs = False
        self.impls = REGISTRY.node_impls()  # node type -> GraphNodeImpl, one read per node

    def next_leaf(self) -> Any:
        leaf = self.leaves[self.position]
        self.position += 1
        return leaf

    def build(self, d: Any) -> Any:  # a Def, dispatched on type(d) below
        t = type(d)
        if t is NodeDef:
            impl = self.impls[d.type]
            node = self.reuse.get(d.index)
            if node is None:
                node = impl.create_empty(d.metadata, self.trace)
                self.index_ref[d.index] = node
                impl.set_items(node, [(k, self.build(c)) for k, c in d.attributes], d.metadata)
                return node
            if type(node) is not d.type:
                raise GraphStructureError(
                    f"Cannot update a {type(node).__name__} in place from a GraphDef node of "
                    f"type {d.type.__name__}."
                )
            self.index_ref[d.index] = node
            # The containers built here are new: keep the node's own lists and dicts
            # where their items are the same objects (the caller's references to them
            # stay valid, and an Object's structure version does not move).
            items = [
                (k, _old_if_identical(_child_or_missing(impl, node, k), self.build(child)))
                for k, child in d.attributes
            ]
            check = getattr(node, "_check_write", None)
            if check is not None:
                check(items, d.metadata)
            self.writes.other(lambda: impl.set_items(node, items, d.metadata))
            return node
        if t is VariableDef:
            leaf = self.next_leaf()
            leaf_is_variable = REGISTRY.kind_of(leaf) is VARIABLE
            if leaf_is_variable:
                value, metadata = leaf.raw_value, metadata_of(leaf)
            else:
                value, metadata = leaf, dict(d.metadata)
            variable = self.reuse.get(d.index)
            marker = type(value)
            if marker is NoUpdate or marker is ArrayRefOutput:  # see ref_outputs.py
                return _ref_output_variable(self, d, value, metadata, variable)
            if variable is None:
                variable = variable_for(d, leaf, self.copy, self.recreate, self.trace)
            else:
                if type(variable) is not d.type:
                    raise GraphStructureError(
                        f"Cannot update a {type(variable).__name__} in place from a "
                        f"{d.type.__name__} definition."
                    )
                current = metadata_of(variable)
                if value is not variable._var_raw or (
                    metadata is not current and metadata != current
                ):
                    self.writes.variable(variable, value, metadata)
            self.index_ref[d.index] = variable
            if self.sink is not None:
                self.sink.append(variable)
            return variable
        if t is NodeRef:
            try:
                return self.index_ref[d.index]
            except KeyError:
                raise GraphStructureError(
                    f"The GraphDef refers to node index {d.index} ({d.type.__name__}), which "
                    "is defined in another GraphDef; merge both inside one merge_context."
                ) from None
        if t is ArrayDef:
            leaf = self.next_leaf()
            value = leaf.raw_value if REGISTRY.kind_of(leaf) is VARIABLE else leaf
            if d.index is not None:  # a raw jax.Ref: later NodeRefs to its index share it
                if d.index in self.reuse:  # the caller's own Ref (written in place)
                    value = self.reuse[d.index]
                elif self.new_refs and not is_ref(value):
                    value = new_ref(value)  # a Ref a transform created and returned
                self.index_ref[d.index] = value
            if self.sink is not None:
                self.sink.append(value)
            return value
        if t is StaticDef:
            return d.value
        if t is ContainerDef:
            return container_of(d, [self.build(c) for c in d.children])
        raise TypeError(f"Unknown GraphDef entry {d!r}")


def variable_for(d: VariableDef, leaf: Any, copy: bool, recreate: bool, trace: Any) -> Any:
    """Every build's rule for a Variable's place no existing Variable takes: a copy of a
    Variable leaf (or the leaf), a new Variable (of ``trace``) for a raw leaf (or the leaf)."""
    if REGISTRY.kind_of(leaf) is VARIABLE:
        return d.type._from_parts(leaf.raw_value, metadata_of(leaf), trace) if copy else leaf
    return d.type._from_parts(leaf, dict(d.metadata), trace) if recreate else leaf


def container_of(d: ContainerDef, values: list[Any]) -> Any:
    """Every build's rule for a container: the one ``d`` describes, holding ``values``."""

    t = d.type
    if t is list:
        return values
    if t is tuple:
        return tuple(values)
    if t is dict:
        return dict(zip(d.keys, values))
    return d.treedef.unflatten(values)


def _ref_output_variable(
    build: _Build, d: VariableDef, value: Any, metadata: dict[str, Any], variable: Any
) -> Any:
    """A Ref-backed Variable's entry from an inner split: the caller's own Variable
    (``NoUpdate``: already written in place) or a new one with a new Ref."""
    if variable is None:
        if type(value) is NoUpdate:
            raise GraphStructureError(
                f"The GraphDef's {d.type.__name__} at index {d.index} holds NoUpdate, but "
                "no Variable of the caller has this index: merge it in the update_context "
                "(merge_context(tag, False)) whose split produced it."
            )
        variable = d.type._from_parts(unwrap_ref_output(value), metadata, build.trace)
    elif type(value) is ArrayRefOutput:
        build.writes.variable(variable, value.value, metadata)
    build.index_ref[d.index] = variable
    if build.sink is not None:
        build.sink.append(variable)
    return variable


def _old_if_identical(old: Any, new: Any) -> Any:
    """``old`` if it is a list/dict/tuple holding the very same objects as ``new``
    (recursively through such containers), else ``new``: the write-back keeps the
    caller's container objects where nothing in them was replaced. An identity rule,
    not the structural-change rule (``snapshot.same_item``, for which a new array in
    an old place is no new structure)."""
    t = type(new)
    if type(old) is not t or old is new:
        return new
    if t is list or t is tuple:
        if len(old) != len(new):
            return new
        for a, b in zip(old, new):
            if a is not b and _old_if_identical(a, b) is b:
                return new
        return old
    if t is dict:
        if len(old) != len(new) or list(old) != list(new):
            return new
        for k, b in new.items():
            a = old[k]
            if a is not b and _old_if_identical(a, b) is b:
                return new
        return old
    return new


def _child_or_missing(impl: Any, node: Any, key: Any) -> Any:
    """``impl.get_child(node, key)``, or ``MISSING`` for a key the node lacks (user
    registered types may raise instead of returning ``MISSING``)."""
    try:
        return impl.get_child(node, key)
    except (KeyError, IndexError, AttributeError):
        return MISSING
