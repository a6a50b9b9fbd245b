"""Control flow and shape evaluation over objects: cond, switch, loops, eval_shape.

Source: ``jax.lax.cond``, ``jax.lax.switch``, ``jax.lax.while_loop``,
``jax.lax.fori_loop``, ``jax.eval_shape``; lifting per the "JAX-style NNX
Transforms" FLIP flax#4107; the loops' returned carry: Flax NNX 0.12.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Sequence
from typing import Any, cast

import jax

from flaxgraph.errors import FlaxgraphError, TraceContextError
from flaxgraph.graphlib.build import build_graph
from flaxgraph.graphlib.diff import graphdef_diff
from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE
from flaxgraph.modes import DEFAULT, Mode, resolve
from flaxgraph.tracing import current_trace
from flaxgraph.transforms.aliasing import NamedRoots, PrefixSpec, PrefixWalk
from flaxgraph.transforms.calling_conventions import decorator, unbind
from flaxgraph.transforms.lift import (
    AuxValue,
    Call,
    Inner,
    InStatic,
    OutStatic,
    created_outside,
    split_inputs,
)
from flaxgraph.transforms.transformed import Wrapped

_SPEC = PrefixSpec("operands", lambda p: p is None, None)


class CarryStructureError(FlaxgraphError, ValueError):
    """A branch or loop body changed the structure of the objects it carries."""


def _never(a: object, b: object) -> bool:
    return False


def memoized(fun: object, name: str, make: Callable[[Any], Any]) -> Any:
    """``make(fun)``, kept on a plain ``fun`` so JAX's caches see one wrapper per function."""
    cache = getattr(fun, "__dict__", None)
    if cache is None or not isinstance(fun, types.FunctionType):
        return make(fun)
    lifted = cache.get(name)
    if lifted is None:
        lifted = cache[name] = make(fun)
    return lifted


def _make_branch(fun: Callable[..., Any], mode: Mode) -> Callable[..., Any]:
    """A pure branch of ``cond``/``switch`` that returns every leaf, so branches agree."""
    inner = Inner(fun, _SPEC, [None], same_prefix=_never, mode=mode)

    def pure(operand: tuple[AuxValue[Any], list[Any]]) -> object:
        static, values = operand
        in_static: InStatic[Any] = static.value
        _, out_static, (out_values,) = inner.run(
            in_static, (values,), [None] * len(values), (None, None), None
        )
        return AuxValue(out_static), out_values

    return pure


def _branch(fun: Callable[..., Any], mode: Mode) -> Callable[..., Any]:
    typed: Callable[..., Any] = memoized(
        fun, f"_flaxgraph_branch_{mode.graph}_{mode.updates}", lambda f: _make_branch(f, mode)
    )
    return typed


def _structure_error(what: str, statics: Sequence[OutStatic]) -> CarryStructureError | None:
    first = statics[0]
    for i, other in enumerate(statics[1:], 1):
        diff = graphdef_diff(first.graphdef, other.graphdef, roots=("output", "args", "kwargs"))
        if diff is not None:
            return CarryStructureError(
                f"The {what} leave the objects with different structures: branch 0 and "
                f"branch {i} differ at {diff}.\nJAX compiles one "
                "program for all of them, so every branch must add, delete and share the "
                "same attributes and return the same kinds of values.\nFix: make the same "
                "structural changes in every branch (or none), e.g. create the attribute "
                "before the cond."
            )
    return None


def _lifted_branches(
    kind: str,
    index_or_pred: object,
    branches: Sequence[Callable[..., Any]],
    operands: tuple[Any, ...],
    select: Callable[..., Any],
    mode: Mode,
) -> object:
    call = split_inputs(operands, {}, (None, None), _SPEC, mode)
    slots, (values,) = call.groups([None])
    operand = (AuxValue(InStatic.make(graphdef=call.graphdef, slots=slots, extra=None)), values)
    pures = [_branch(b, mode) for b in branches]
    try:
        out_static, out_values = select(index_or_pred, pures, operand)
    except TypeError as e:
        # Diagnose only now: trace each branch on its own and compare structures.
        try:
            statics = [jax.eval_shape(p, operand)[0].value for p in pures]
        except Exception:
            raise e from None
        error = _structure_error(kind, statics)
        if error is not None:
            raise error from e
        raise
    return call.finish(out_static.value, (out_values,))


def cond(
    pred: object,
    true_fun: Callable[..., Any],
    false_fun: Callable[..., Any],
    *operands: object,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``jax.lax.cond`` whose operands may be objects.

    Args:
      pred: a boolean scalar.
      true_fun, false_fun: called with ``*operands``, may mutate the objects among
        them (alike structurally), and return the same kind of output.
      *operands: the operands.
      graph, graph_updates: the traversal mode (see ``jit``).

    Returns:
      The output of the branch taken; the operands' objects hold its changes.

    Raises:
      CarryStructureError (``ValueError``): the branches leave the objects with
        different structures; the message names the first differing path.
    """
    return _lifted_branches(
        "branches of cond",
        pred,
        [true_fun, false_fun],
        operands,
        lambda p, fs, v: jax.lax.cond(p, fs[0], fs[1], v),
        resolve(graph, graph_updates),
    )


def switch(
    index: object,
    branches: Sequence[Callable[..., Any]],
    *operands: object,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> object:
    """``jax.lax.switch`` whose operands may be objects (see ``cond``)."""
    return _lifted_branches(
        "branches of switch",
        index,
        list(branches),
        operands,
        lambda i, fs, v: jax.lax.switch(i, fs, v),
        resolve(graph, graph_updates),
    )


def _merge_carry(graphdef: GraphDef[Any], values: list[Any]) -> tuple[Any, list[Any]]:
    """The carry built from ``values``, and its Variables in leaf order."""
    sink: list[Any] = []
    (val,), _ = build_graph(graphdef, values, leaf_sink=sink)
    return val, sink


def _check_same_variables(
    leaves: list[tuple[Any, Any]], given: list[Any], val: object, what: str
) -> None:
    """Raises if a loop body's carry holds another Variable where it received one."""
    for (path, leaf), before in zip(leaves, given):
        if REGISTRY.kind_of(before) is VARIABLE and leaf is not before:
            raise CarryStructureError(
                f"The {what} replaced the {type(before).__name__} at "
                f"{NamedRoots(('carry',), (val,)).where((0, *path[2:]))} with a new object; a loop carry must have the same "
                "reference structure in every iteration (Variable identity must be "
                "preserved across iterations).\nFix: update the Variable in place "
                "(`v[...] = new_value` or `v.value = new_value`) instead of assigning a "
                "new Variable."
            )


def _split_carry(
    graphdef: GraphDef[Any],
    val: object,
    what: str,
    graph: bool = True,
    given: list[Any] | None = None,
) -> list[Any]:
    """The carry's leaves after an iteration, checked to keep ``graphdef``'s structure."""
    walk = PrefixWalk(_SPEC, NamedRoots(("carry", "kwargs"), ((val,), {})), graph=graph)
    new_graphdef, leaves, _ = walk.run_checked(((val,), {}), (None, None))
    if given is not None and new_graphdef == graphdef:
        _check_same_variables(leaves, given, val, what)
    trace = current_trace()
    for node in walk.ref_index:
        if created_outside(node, trace):
            raise TraceContextError(
                f"The {what} returned a {type(node).__name__} that was created outside the "
                "loop and captured by closure; the carry must be built from the objects "
                "the body received.\nFix: pass the object in the carry (init_val) instead "
                "of capturing it."
            )
    if new_graphdef != graphdef:
        # Name paths from the carry itself (the walk wraps it as ((carry,), {})).
        inner: list[GraphDef[Any]] = [
            GraphDef(cast(Any, g.root).children[0].children[0], ())
            for g in (graphdef, new_graphdef)
        ]
        diff = graphdef_diff(inner[0], inner[1], "carry")
        raise CarryStructureError(
            f"The {what} changed the structure of the loop carry: {diff} (first: before "
            "the iteration, second: after).\nA loop carry keeps one structure in every "
            "iteration.\nFix: create attributes before the loop, and return the carry "
            "with the same objects and shapes."
        )
    return [leaf.raw_value if REGISTRY.kind_of(leaf) is VARIABLE else leaf for _, leaf in leaves]


def _start(init_val: object, mode: Mode) -> tuple[Call, tuple[AuxValue[Any], list[Any]]]:
    call = split_inputs((init_val,), {}, (None, None), _SPEC, mode)
    return call, (AuxValue(call.graphdef), call.values)


def _finish(call: Call, carry: tuple[AuxValue[Any], list[Any]], mode: Mode) -> object:
    # As in Flax NNX 0.12: with graph updates the returned carry is the caller's
    # objects; without, its graph nodes are new but its Variables are the caller's.
    reuse = {
        i: n for i, n in enumerate(call.nodes) if mode.updates or REGISTRY.kind_of(n) is VARIABLE
    }
    (val,), _ = build_graph(call.graphdef, carry[1], reuse=reuse)
    return val


def _make_cond(cond_fun: Callable[[Any], Any]) -> Callable[..., Any]:
    def cond(carry: tuple[AuxValue[Any], list[Any]]) -> object:
        static, values = carry
        return cond_fun(_merge_carry(static.value, values)[0])

    return cond


def _make_while_body(body_fun: Callable[[Any], Any], graph: bool) -> Callable[..., Any]:
    def body(carry: tuple[AuxValue[Any], list[Any]]) -> object:
        static, values = carry
        val, given = _merge_carry(static.value, values)
        val = body_fun(val)
        return static, _split_carry(static.value, val, "body of while_loop", graph, given)

    return body


def _make_fori_body(body_fun: Callable[[Any, Any], Any], graph: bool) -> Callable[..., Any]:
    def body(i: object, carry: tuple[AuxValue[Any], list[Any]]) -> object:
        static, values = carry
        val, given = _merge_carry(static.value, values)
        val = body_fun(i, val)
        return static, _split_carry(static.value, val, "body of fori_loop", graph, given)

    return body


def while_loop(
    cond_fun: Callable[[Any], Any],
    body_fun: Callable[[Any], Any],
    init_val: object,
    *,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """``jax.lax.while_loop`` whose carry may contain objects.

    ``body_fun`` may change the carry's values and returns the carry; the caller's
    objects then hold the final values and the returned carry is built on them
    (without graph updates: new graph nodes holding the caller's Variables).

    Raises:
      CarryStructureError (``ValueError``): ``body_fun`` changes the carry's
        structure or replaces one of its Variables; the message names the path.
      TraceContextError (``ValueError``): ``body_fun`` returns an object it captured.
    """
    mode = resolve(graph, graph_updates)
    call, carry = _start(init_val, mode)
    cond = memoized(cond_fun, "_flaxgraph_while_cond", _make_cond)
    body = memoized(
        body_fun,
        f"_flaxgraph_while_body_{mode.graph}",
        lambda f: _make_while_body(f, mode.graph),
    )
    return _finish(call, jax.lax.while_loop(cond, body, carry), mode)


def fori_loop(
    lower: object,
    upper: object,
    body_fun: Callable[[Any, Any], Any],
    init_val: object,
    *,
    unroll: int | bool | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> object:
    """``jax.lax.fori_loop`` whose carry may contain objects (see ``while_loop``)."""
    mode = resolve(graph, graph_updates)
    call, carry = _start(init_val, mode)
    body = memoized(
        body_fun, f"_flaxgraph_fori_body_{mode.graph}", lambda f: _make_fori_body(f, mode.graph)
    )
    return _finish(call, jax.lax.fori_loop(lower, upper, body, carry, unroll=unroll), mode)


@decorator
def _eval_shape_transform(f: Callable[..., Any], mode: Mode = DEFAULT) -> Callable[..., Any]:
    inner_f, bound = unbind(f, "eval_shape")
    inner = Inner(inner_f, _SPEC, [None], same_prefix=_never, mode=mode, captured_out=True)

    def pure(static: AuxValue[Any], values: list[Any]) -> object:
        in_static: InStatic[Any] = static.value
        _, out_static, (out_values,) = inner.run(
            in_static, (values,), [None] * len(values), (None, None), None
        )
        return AuxValue(out_static), out_values

    @functools.wraps(inner_f)
    def wrapper(*args: object, **kwargs: object) -> object:
        call = split_inputs(args, kwargs, (None, None), _SPEC, mode)
        slots, (values,) = call.groups([None])
        out_static, out_values = jax.eval_shape(
            pure, AuxValue(InStatic.make(graphdef=call.graphdef, slots=slots, extra=None)), values
        )
        out: OutStatic = out_static.value
        leaves = [out_values[s.position] for s in out.sources]
        output, _args, _kwargs = build_graph(out.graphdef, leaves)
        return output

    return Wrapped(inner_f, wrapper, bound)


def eval_shape(
    f: Callable[..., Any],
    *args: object,
    graph: bool | None = None,
    graph_updates: bool | None = None,
    **kwargs: object,
) -> Any:
    """``f(*args, **kwargs)`` evaluated abstractly: outputs with ``jax.ShapeDtypeStruct`` leaves.

    Nothing is computed or allocated, and the arguments are left unchanged.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class W(nnx.Module):
      ...   def __init__(self): self.w = nnx.Param(jnp.ones((1000, 1000)))
      >>> nnx.eval_shape(lambda: W()).w.value
      ShapeDtypeStruct(shape=(1000, 1000), dtype=float32)
    """
    return _eval_shape_transform(f, resolve(graph, graph_updates))(*args, **kwargs)
