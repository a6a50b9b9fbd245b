"""``scan`` over objects, with ``Carry`` and ``StateAxes``; see the package README, "scan".

Source: ``jax.lax.scan``; ``Carry`` and ``StateAxes`` per the "JAX-style NNX
Transforms" FLIP flax#4107 and Flax NNX's "Transformations" guide.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from flaxgraph.graphlib.build import build_graph
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.graphlib.diff import graphdef_diff
from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE, is_node_or_variable
from flaxgraph.modes import Mode, resolve
from flaxgraph.partitioning import map_boxes
from flaxgraph.rnglib.rngs import RngState
from flaxgraph.transforms.aliasing import NamedRoots, PrefixSpec, PrefixWalk
from flaxgraph.transforms.calling_conventions import decorator, unbind
from flaxgraph.transforms.compilation import jit
from flaxgraph.transforms.control import CarryStructureError
from flaxgraph.transforms.jax_errors import mapped_input_error
from flaxgraph.transforms.lift import (
    IN,
    OUT,
    AuxValue,
    Call,
    HashedRecord,
    Inner,
    InStatic,
    Merged,
    OutStatic,
    Slots,
    split_inputs,
)
from flaxgraph.transforms.lift_types import StateAxes, reject_lift_types
from flaxgraph.transforms.prefix_groups import prefix_keys
from flaxgraph.transforms.rng_broadcast import warn_drawn, watch
from flaxgraph.transforms.scan_axes import (
    Carry,
    check_argument_count,
    resolve_positions,
    validate_scan_axes,
)
from flaxgraph.transforms.vmap import AxisHooks, args_prefix
from flaxgraph.typing import PathParts

__all__ = ["Carry", "scan"]


def _is_scan_prefix(p: object) -> bool:
    return p is None or p is Carry or (isinstance(p, int) and not isinstance(p, bool))


SCAN_SPEC = PrefixSpec(
    "in_axes",
    _is_scan_prefix,
    StateAxes,
    "give nnx.Carry, an int or None for the whole object, or nnx.StateAxes({filter: ...}).",
)
SCAN_OUT_SPEC = PrefixSpec("out_axes", _is_scan_prefix, StateAxes, SCAN_SPEC.fix)
_PLAIN = PrefixSpec("carry", lambda p: p is None, None)


def _carry_positions(prefix: object, n: int) -> tuple[int, ...]:
    if prefix is Carry:
        return tuple(range(n))
    if isinstance(prefix, tuple):
        return tuple(i for i, p in enumerate(prefix) if p is Carry)
    return ()


def _flatten_carry(value: object, graph: bool = True) -> tuple[GraphDef[Any], list[Any], list[Any]]:
    walk = PrefixWalk(_PLAIN, NamedRoots(("carry",), (value,)), graph=graph)
    graphdef, leaves, _ = walk.run_checked((value,), (None,))
    return (
        graphdef,
        [leaf.raw_value if REGISTRY.kind_of(leaf) is VARIABLE else leaf for _, leaf in leaves],
        list(walk.ref_index),
    )


def _split_output(out: object, out_axes: object) -> tuple[tuple[Any, ...], Any]:
    """Output -> (carry entries, the rest with None at carry places)."""
    if out_axes is Carry:
        return (out,), None
    if isinstance(out_axes, tuple):
        if not isinstance(out, tuple) or len(out) != len(out_axes):
            raise CarryStructureError(
                f"scan's out_axes has {len(out_axes)} entries, so the function must return a "
                f"tuple of {len(out_axes)}; it returned "
                f"{type(out).__name__ if not isinstance(out, tuple) else f'a tuple of {len(out)}'}."
            )
        carry = tuple(o for o, a in zip(out, out_axes) if a is Carry)
        return carry, tuple(None if a is Carry else o for o, a in zip(out, out_axes))
    return (), out


def _rest_axes(out_axes: object) -> object:
    """The prefix of the output's non-carry part (see ``_split_output``)."""
    if out_axes is Carry:
        return None
    if isinstance(out_axes, tuple):
        return tuple(None if a is Carry else a for a in out_axes)
    return out_axes


def _join_output(carry: tuple[Any, ...], rest: Any, out_axes: object) -> object:
    if out_axes is Carry:
        return carry[0]
    if isinstance(out_axes, tuple):
        it = iter(carry)
        return tuple(next(it) if a is Carry else r for r, a in zip(rest, out_axes))
    return rest


@decorator
def scan(
    f: Callable[..., Any],
    *,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    _split_transpose: bool = False,
    in_axes: object = (Carry, 0),
    out_axes: object = (Carry, 0),
    transform_metadata: Mapping[str, Any] = {},
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[..., Any]:
    """``jax.lax.scan`` for functions of objects.

    Args:
      f: the body, called once per step with the carry, slices of the scanned
        arguments and the broadcast ones.
      length: the number of steps (needed when nothing is scanned).
      reverse, unroll, _split_transpose: as in ``jax.lax.scan``.
      in_axes: per positional argument ``Carry``, an int axis, ``None`` or
        ``StateAxes``; keyword arguments are broadcast unless ``in_axes`` has
        entries for them. The default is ``jax.lax.scan``'s ``f(carry, x)``.
      out_axes: the same over the output; ``Carry`` marks the new carry, ``None``
        is an error.
      transform_metadata: as in ``vmap`` (e.g. ``{nnx.PARTITION_NAME: 'layers'}``).
      graph, graph_updates: the traversal mode (see ``jit``). Without graph
        updates the carry comes back as new nodes holding the caller's Variables,
        changed broadcast Variables are carried, and ``StateAxes`` is refused.

    Returns:
      The scanned function: the final carry where ``out_axes`` has ``Carry``, the
      stacked outputs elsewhere. Carried and scanned state is written back; a
      change to broadcast state is discarded. Outside a trace it runs as one
      ``nnx.jit`` of the whole scan (``cache_info()`` is ``jit``'s).

    Raises:
      ValueError: when applied, ``Carry`` is nested, twice or on one side only, or
        ``out_axes`` broadcasts; when called, ``in_axes=Carry`` with other than one
        argument, or the scanned sizes or ranks disagree (naming each path).
      CarryStructureError (``ValueError``): the body changes the carry's structure,
        shapes, dtypes or objects, or a broadcast raw leaf (naming the path).
      InconsistentAliasingError, PrefixError (``ValueError``): see ``vmap``.

    Warns:
      BroadcastChangeWarning: the body changed a broadcast Variable (not RNG state).
      RngBroadcastWarning: the body drew from a broadcast RNG stream.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
      ... def cumsum(total, x):
      ...   total = total + x
      ...   return total, total
      >>> total, ys = cumsum(jnp.array(0.0), jnp.arange(4.0))
      >>> float(total), ys.tolist()
      (6.0, [0.0, 1.0, 3.0, 6.0])
    """
    mode = resolve(graph, graph_updates)
    reject_lift_types(mode, "scan", "in_axes", in_axes, out_axes, plain="nnx.Carry, an int or None")
    validate_scan_axes(in_axes, out_axes)
    inner_f, bound = unbind(f, "scan")

    scanner = _Scanner(
        inner_f, mode, length, reverse, unroll, _split_transpose, in_axes, out_axes,
        transform_metadata,
    )  # fmt: skip

    # Wraps f: what nnx.jit traces and names (closure_reads.py).
    @functools.wraps(inner_f)
    def run(*args: object, **kwargs: object) -> Any:
        return scanner.run(*args, **kwargs)

    # One nnx.jit of the whole scan (fast path included).
    jitted = jit(run, graph=True, graph_updates=True)
    return jitted.partial(*bound) if bound else jitted


class _Scanner:
    """The scanned function of one ``nnx.scan``: its options, ``step`` and ``run``."""

    def __init__(
        self,
        inner_f: Callable[..., Any],
        mode: Mode,
        length: int | None,
        reverse: bool,
        unroll: int | bool,
        _split_transpose: bool,
        in_axes: object,
        out_axes: object,
        transform_metadata: Mapping[str, Any],
    ):
        self.inner_f, self.mode, self.length, self.reverse = inner_f, mode, length, reverse
        self.unroll, self._split_transpose = unroll, _split_transpose
        self.in_axes, self.out_axes = in_axes, out_axes
        self.transform_metadata = transform_metadata
        self.body = self.step  # one bound method, so JAX's caches recognise it

    def step(self, carry_in: Any, x: list[Any]) -> Any:
        """One step of ``jax.lax.scan``: lift steps 3-4 (``_ScanInner``) with the carry."""
        static, carry, broadcast_values = carry_in
        info: ScanInfo = static.value
        n_carry = info.n_carry
        carry_index: dict[int, Any] = {}
        carry_obj = build_graph(info.carry_graphdef, carry[:n_carry], index_ref=carry_index)[0]
        metadata = AxisHooks(self.transform_metadata)
        params = metadata.params
        seen: dict[str, Any] = {}  # what the hooks below see of the merged inputs

        def on_inputs(leaves: list[Any], prefixes: list[Any]) -> None:
            metadata.on_inputs(leaves, prefixes)
            seen["rngs"] = watch(info.in_static.graphdef.leaf_paths, leaves, prefixes)

        def call(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
            seen["roots"] = (args, kwargs)
            full_args = list(args)
            for i, c in zip(info.positions, carry_obj):
                full_args[i] = c
            full_args = map_boxes(
                info.a_prefix, full_args, lambda b, axis: b.remove_axis(axis, params)
            )
            out = f(*full_args, **kwargs)
            where = NamedRoots(("args", "kwargs"), (args, kwargs)).where
            warn_drawn(seen["rngs"], where, "scan", "in_axes")  # flax#4195
            out = map_boxes(self.out_axes, out, lambda b, axis: b.add_axis(axis, params))
            out_carry, out_rest = _split_output(out, self.out_axes)
            new_carry = _new_carry(info, carry, carry_index, tuple(out_carry), self.mode)
            return new_carry, out_rest

        inner = _ScanInner(
            self.inner_f,
            SCAN_OUT_SPEC,
            info.out_keys,
            on_inputs=on_inputs,
            on_output_leaf=metadata.on_output_leaf,
            mode=self.mode,
        )
        new_carry, out_static, out_groups = inner.run(
            info.in_static,
            (carry[n_carry:], x, broadcast_values),
            info.prefixes,
            (info.rest_prefix, info.kwargs_prefix),
            info.rest_axes,
            call,
        )
        carried = [k is Carry for k in info.out_keys]
        state_paths = [
            _as_input_path(path)
            for path, s in zip(out_static.graphdef.leaf_paths, out_static.sources)
            if s.origin == OUT and carried[s.at]
        ]
        if state_paths != list(info.expected_state_carry):
            raise CarryStructureError(
                "The body of scan changed which sub-states are carried (StateAxes ... "
                f"nnx.Carry): before {_fmt(list(info.expected_state_carry))}, after "
                f"{_fmt(state_paths)}.\nFix: keep the carried Variables; create them before "
                "the scan."
            )
        new_state_carry = [v for c, group in zip(carried, out_groups) if c for v in group]
        _check_carry_types(
            info.expected_state_carry,
            carry[n_carry:],
            new_state_carry,
            NamedRoots(("args", "kwargs"), seen["roots"]).where,
        )
        # The other groups come out stacked (one per scan axis).
        ys = [[] if c else group for c, group in zip(carried, out_groups)]
        return (static, [*new_carry, *new_state_carry], broadcast_values), (
            AuxValue(out_static),
            ys,
        )

    def run(self, *args: object, **kwargs: object) -> object:
        """One call: splits carry, scanned and broadcast state, scans, writes back."""
        args, kwargs = resolve_positions(self.inner_f, self.in_axes, args, kwargs)
        check_argument_count(self.in_axes, len(args))
        n = len(args)
        a_prefix = args_prefix(self.in_axes, n)
        positions = _carry_positions(a_prefix, n)
        carry_value = tuple(args[i] for i in positions)
        rest_args = tuple(None if i in positions else a for i, a in enumerate(args))
        rest_prefix = (
            tuple(None if i in positions else p for i, p in enumerate(a_prefix))
            if isinstance(a_prefix, tuple)
            else (None if a_prefix is Carry else a_prefix)
        )
        kwargs_prefix = None
        if not self.mode.updates:
            # As in Flax NNX 0.12: without graph updates, broadcast Variables that the
            # body changes are carried (unchanged ones pass through the carry as is).
            rest_prefix = _broadcast_as_carry(rest_prefix, rest_args)
            kwargs_prefix = Carry
        carry_graphdef, carry_values, carry_nodes = _flatten_carry(carry_value, self.mode.graph)
        call = split_inputs(rest_args, kwargs, (rest_prefix, kwargs_prefix), SCAN_SPEC, self.mode)
        _check_disjoint(carry_nodes, call.nodes)

        state_carry = [i for i, p in enumerate(call.prefixes) if p is Carry]
        scanned = [i for i, p in enumerate(call.prefixes) if isinstance(p, int) and p is not Carry]
        broadcast = [i for i, p in enumerate(call.prefixes) if p is None]
        try:
            xs = [_to_front(call.values[i], call.prefixes[i]) for i in scanned]
        except ValueError as error:
            raise _input_error(call, rest_args, kwargs, self.length) or error from None
        slot_groups = [0] * len(call.values)
        slot_positions = [0] * len(call.values)
        for g, members in enumerate((state_carry, scanned, broadcast)):
            for k, i in enumerate(members):
                slot_groups[i] = g
                slot_positions[i] = k
        slots = Slots(tuple(slot_groups), tuple(slot_positions))
        in_static = InStatic.make(graphdef=call.graphdef, slots=slots, extra=None)
        broadcast_values = [call.values[i] for i in broadcast]
        expected_state_carry = [call.graphdef.leaf_paths[i] for i in state_carry]
        rest_axes = _rest_axes(self.out_axes)
        info = ScanInfo.of(
            carry_graphdef=carry_graphdef,
            in_static=in_static,
            prefixes=tuple(call.prefixes),
            positions=positions,
            a_prefix=a_prefix,
            rest_prefix=rest_prefix,
            expected_state_carry=tuple(expected_state_carry),
            n_carry=len(carry_values),
            kwargs_prefix=kwargs_prefix,
            rest_axes=rest_axes,
            out_keys=tuple(prefix_keys(rest_prefix, kwargs_prefix, rest_axes, spec=SCAN_SPEC)),
        )
        n_carry = len(carry_values)
        init = (
            AuxValue(info),
            [*carry_values, *(call.values[i] for i in state_carry)],
            broadcast_values,
        )
        try:
            (_, final_carry, _), (out_static_box, ys) = jax.lax.scan(
                self.body,
                init,
                xs,
                length=self.length,
                reverse=self.reverse,
                unroll=self.unroll,
                _split_transpose=self._split_transpose,
            )
        except ValueError:
            better = _input_error(call, rest_args, kwargs, self.length)
            if better is not None:  # JAX counted flat leaves; this names the paths
                raise better from None
            raise
        out_static: OutStatic = out_static_box.value
        final_carry_obj = build_graph(
            carry_graphdef, final_carry[:n_carry], reuse=dict(enumerate(carry_nodes))
        )[0]
        if not self.mode.updates:  # as in Flax NNX 0.12: new graph nodes, the caller's Variables
            variables = {i: n for i, n in enumerate(carry_nodes) if REGISTRY.kind_of(n) is VARIABLE}
            final_carry_obj = build_graph(carry_graphdef, final_carry[:n_carry], reuse=variables)[0]
        state_final = final_carry[n_carry:]
        values = []
        out_keys = info.out_keys
        for s in out_static.sources:
            if s.origin == IN:
                values.append(call.values[s.at])
            elif out_keys[s.at] is Carry:  # the one carried group: the state carry
                values.append(state_final[s.position])
            else:
                axis = out_keys[s.at]
                stacked = ys[s.at][s.position]
                values.append(jnp.moveaxis(stacked, 0, axis) if axis != 0 else stacked)
        rest_out = call.finish_values(out_static, values)
        return _join_output(tuple(final_carry_obj), rest_out, self.out_axes)


def _new_carry(
    info: ScanInfo,
    carry: list[Any],
    carry_index: dict[int, Any],
    out_carry: tuple[Any, ...],
    mode: Mode,
) -> list[Any]:
    """The returned carry's leaf values, checked against the given one (``CarryStructureError``)."""
    carry_graphdef = info.carry_graphdef
    new_graphdef, new_carry, new_nodes = _flatten_carry(out_carry, mode.graph)
    if new_graphdef != carry_graphdef:
        diff = graphdef_diff(carry_graphdef, new_graphdef, roots=("carry",))
        raise CarryStructureError(
            f"The body of scan changed the structure of the carry: {diff} (first: "
            "the carry passed in, second: the carry returned).\nThe carry keeps one "
            "structure in every step.\nFix: return the carry with the same objects, "
            "attributes and shapes it came in with."
        )
    _check_carry_references(carry_index, new_nodes, out_carry, mode)
    _check_carry_types(
        carry_graphdef.leaf_paths,
        carry[: info.n_carry],
        new_carry,
        NamedRoots(("carry",), (out_carry,)).where,
    )
    return new_carry


class _ScanInner(Inner):
    """``Inner`` for a scan step: carried state always comes back, broadcast state never."""

    def input_kept(
        self, merged: Merged, output: object, path: PathParts, leaf: object, prefix: object
    ) -> int | None:
        if prefix is Carry:
            return None
        i = merged.unchanged_input(leaf)
        if prefix is None:
            return i if i is not None else _discard_broadcast_change(merged, leaf, output, path)
        return i if i is not None and merged.prefixes[i] == prefix else None


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class ScanInfo(HashedRecord):
    """The per-call structure a scan body needs, hashable (``make`` computes ``key_hash``)."""

    _fields: ClassVar[tuple[str, ...]] = (
        "carry_graphdef",
        "in_static",
        "prefixes",
        "positions",
        "a_prefix",
        "rest_prefix",
        "expected_state_carry",
        "n_carry",
        "kwargs_prefix",
        "rest_axes",
        "out_keys",
    )
    carry_graphdef: GraphDef[Any]
    in_static: InStatic[Any]
    prefixes: tuple[Any, ...]
    positions: Any
    a_prefix: object
    rest_prefix: object
    expected_state_carry: tuple[PathParts, ...]
    n_carry: int
    kwargs_prefix: object
    rest_axes: object
    out_keys: tuple[Any, ...]
    key_hash: int = dataclasses.field(repr=False)


def _input_error(call: Call, args: object, kwargs: object, length: int | None) -> ValueError | None:
    """The scanned inputs that make the scan fail, by path."""
    return mapped_input_error(
        call.graphdef.leaf_paths,
        call.values,
        [p if p is not Carry else None for p in call.prefixes],
        NamedRoots(("args", "kwargs"), (args, kwargs)).where,
        "scan",
        length,
    )


def _broadcast_as_carry(prefix: object, args: tuple[Any, ...]) -> object:
    """``prefix`` with ``None`` made ``Carry`` for every argument holding objects."""
    if isinstance(prefix, tuple):
        return tuple(Carry if p is None and a is not None else p for p, a in zip(prefix, args))
    return Carry if prefix is None else prefix


def _check_carry_types(
    paths: Any, old: list[Any], new: list[Any], where: Callable[[Any], str]
) -> None:
    """Raises ``CarryStructureError`` naming the first carried leaf whose shape or dtype changed."""
    pairs = [
        (path, a, b)
        for path, a_tree, b_tree in zip(paths, old, new)  # a Variable may hold a pytree (sow)
        for a, b in zip(jax.tree.leaves(a_tree), jax.tree.leaves(b_tree))
    ]
    for path, a, b in pairs:
        sa, sb = jnp.shape(a), jnp.shape(b)
        da, db = jax.dtypes.result_type(a), jax.dtypes.result_type(b)
        if sa != sb or da != db:
            raise CarryStructureError(
                f"The body of scan changed the carried leaf at {where(path)} from "
                f"{da}{list(sa)} to {db}{list(sb)}; a carry keeps its shapes and dtypes in "
                "every step.\nFix: return a value of the same shape and dtype (cast with "
                "`.astype`, or build the carry with its final shape before the scan)."
            )


def _discard_broadcast_change(merged: Merged, leaf: object, out_rest: object, path: object) -> int:
    """The input position of a changed broadcast Variable; warns, or raises for a raw leaf."""
    i = merged.in_leaf.get(leaf) if REGISTRY.kind_of(leaf) is VARIABLE else None
    where = _where(merged, out_rest, path)
    if i is None:
        raise CarryStructureError(
            f"The body of scan changed the broadcast (None) leaf at {where}; a broadcast "
            "value is the same in every step.\nFix: carry it (nnx.Carry, or "
            "StateAxes({...: nnx.Carry})) or scan it (an int axis)."
        )
    if not isinstance(leaf, RngState):
        warnings.warn(
            f"nnx.scan: the body changed the broadcast (None) {type(leaf).__name__} at "
            f"{where}; every step sees the value passed in and the change is discarded "
            "(as in Flax NNX 0.12).\nFix: to keep it, carry it (StateAxes({...: "
            "nnx.Carry})) or scan it (an int axis).",
            BroadcastChangeWarning,
            stacklevel=2,
        )
    typed: int = i
    return typed


class BroadcastChangeWarning(UserWarning):
    """``scan``'s body changed a broadcast (``None``) Variable; the change is discarded."""


def _check_carry_references(
    given: dict[int, Any], returned: list[Any], out_carry: tuple[Any, ...], mode: Mode
) -> None:
    """Raises if the body returned other objects in the carry than it received."""
    for i, node in enumerate(returned):
        before = given.get(i)
        if node is before or not (mode.updates or REGISTRY.kind_of(node) is VARIABLE):
            continue
        if not is_node_or_variable(node):
            continue
        path = next((p for p, v in iter_graph(out_carry, graph=mode.graph) if v is node), ())
        where = NamedRoots(("carry",), (out_carry,)).where((0, *path))
        raise CarryStructureError(
            f"Carry references must be the same between iterations: the body of scan "
            f"returned a new {type(node).__name__} at {where} in place of the one it "
            "received (scan Variable identity must be preserved across iterations).\n"
            "Fix: update the carried objects in place (`v[...] = new_value`) and return "
            "them, instead of creating new ones."
        )


def _check_disjoint(carry_nodes: list[Any], rest_nodes: list[Any]) -> None:
    ids = {id(n) for n in carry_nodes}
    shared = [n for n in rest_nodes if id(n) in ids]
    if shared:
        raise CarryStructureError(
            f"Inconsistent aliasing: a {type(shared[0]).__name__} is both in scan's carry "
            "and in a scanned or broadcast argument; an object is either carried or not.\nFix: pass it in one "
            "place only, or use StateAxes({...: nnx.Carry}) on the object to carry part of it."
        )


def _where(merged: Merged, out_rest: object, path: Any) -> str:
    return NamedRoots(("output", "args", "kwargs"), (out_rest, merged.args, merged.kwargs)).where(
        path
    )


def _as_input_path(path: Any) -> object:
    """An out-walk path (roots output, args, kwargs) as an input path (args, kwargs)."""
    root = {1: 0, 2: 1}.get(path[0])
    return path if root is None else (root, *path[1:])


def _fmt(paths: list[Any]) -> str:
    return "[" + ", ".join("/".join(map(str, p[1:])) for p in paths) + "]"


def _to_front(x: Any, axis: int) -> object:
    """``x`` with ``axis`` moved to the front (no copy when it already is)."""
    if axis == 0 or axis == -getattr(x, "ndim", 0):
        return x
    return jnp.moveaxis(x, axis, 0)
