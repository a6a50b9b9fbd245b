"""The operations an oracle program runs, and what is observed of each.

``run(library, program, op)`` builds the program's graph afresh on ``library``, runs
the operation ``op`` on it and returns an ``Outcome``: either ``ok`` with plain,
comparable data (``canonical`` values, State paths as tuples) or the error raised.
Warnings are not errors here (both libraries warn about different things).

The program's *method* (``step``) reads and writes the graph, walking it by its
description so that it does the same thing on either library: a numeric Variable
gets ``2 * v + 1`` (``v + 1`` for ints), a raw array attribute likewise, a key attribute
``fold_in(k, 1)``, an ``Rngs`` draws from its ``draw`` stream, and every numeric
scalar attribute is read in a Python branch (``if float(x) > 0.5``), which only works
if it is static. It returns the float32 sum of what it read.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from oracle_library import Library
from oracle_programs import (
    Container,
    Marked,
    NodeSpec,
    Program,
    Raw,
    RngsItem,
    Share,
    Sub,
    Var,
    build,
    prng_context,
)

from flaxgraph.testing import values
from flaxgraph.testing.values import canonical


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one operation gave: ``value`` if ``ok``, else the ``error`` it raised."""

    ok: bool
    value: Any = None
    error: str = ""
    error_type: type | None = None


# -- the program's method ------------------------------------------------------------------


def _bump(x: Any) -> Any:
    x = jnp.asarray(x)
    if x.dtype == jnp.bool_:
        return ~x
    if jnp.issubdtype(x.dtype, jnp.floating):
        return x * 2 + 1
    return x + 1


def _read(x: Any) -> Any:
    return jnp.sum(jnp.asarray(x, dtype=jnp.float32))


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float | np.integer | np.floating | np.bool_) or (
        isinstance(x, jax.Array | np.ndarray) and x.shape == () and x.dtype.kind in "biuf"
    )


def _read_value(description: values.Description, value: Any, acc: Any) -> Any:
    """Reads a raw attribute value (no write): arrays summed, scalars branched on."""
    if isinstance(description, values.ArrayValue):
        return acc + _read(value)
    if isinstance(description, values.KeyValue):
        return acc
    if isinstance(description, values.PyScalar | values.NpScalar):
        if _is_number(value) and not isinstance(value, complex):
            if float(value) > 0.5:  # a Python branch: needs a static value
                acc = acc + 1.0
        return acc
    if isinstance(description, values.SeqValue):
        for item, v in zip(description.items, value):
            acc = _read_value(item, v, acc)
        return acc
    if isinstance(description, values.MapValue):
        for key, item in description.items:
            acc = _read_value(item, value[key], acc)
    return acc


def _step_item(item: Any, value: Any, put: Callable[[Any], None] | None, acc: Any) -> Any:
    """Reads and writes one item whose current value is ``value``; ``put`` replaces it
    (``None`` in a tuple: no write)."""
    if isinstance(item, Raw | Marked):
        description = item.value
        acc = _read_value(description, value, acc)
        if put is not None and isinstance(description, values.ArrayValue):
            put(_bump(value))
        elif put is not None and isinstance(description, values.KeyValue):
            put(jax.random.fold_in(value, 1) if description.kind == "typed" else value + 1)
    elif isinstance(item, Var):
        current = value.get_value()
        acc = acc + _read(current)
        value.set_value(_bump(current))
    elif isinstance(item, RngsItem):
        acc = acc + jax.random.uniform(getattr(value, item.draw)())
    elif isinstance(item, Sub):
        acc = step_node(item.node, value, acc)
    elif isinstance(item, Container):
        for key, element in zip(item.keys(), item.items):
            if not isinstance(element, Share):
                setter = None if item.kind == "tuple" else functools.partial(_put, value, key)
                acc = _step_item(element, value[key], setter, acc)
    return acc


def _put(container: Any, key: Any, new: Any) -> None:
    container[key] = new


def step_node(spec: NodeSpec, node: Any, acc: Any) -> Any:
    for name, item in spec.attrs:
        if not isinstance(item, Share):
            put = functools.partial(setattr, node, name)
            acc = _step_item(item, getattr(node, name), put, acc)
    return acc


def step(program: Program, root: Any) -> Any:
    """The program's method: reads and writes ``root``; returns a float32 scalar."""
    return step_node(program.root, root, jnp.zeros((), jnp.float32))


# -- observations ----------------------------------------------------------------------------


def _path(path: Any) -> tuple[Any, ...]:
    return tuple(k if isinstance(k, int) else str(k) for k in path)


def _leaf(library: Library, leaf: Any, metadata_keys: tuple[str, ...] = ("tag",)) -> Any:
    if isinstance(leaf, library.nnx.Variable):
        meta = leaf.get_metadata()
        kept = tuple(sorted((k, canonical(meta[k])) for k in metadata_keys if k in meta))
        return (type(leaf).__name__, canonical(leaf.get_value()), kept)
    return canonical(leaf)


def flat_state(library: Library, state: Any) -> list[Any]:
    """``[(path, leaf)]`` of a State, sorted by path; leaves canonical."""
    flat = [(_path(p), _leaf(library, leaf)) for p, leaf in library.nnx.to_flat_state(state)]
    return sorted(flat, key=lambda pl: repr(pl[0]))


def _attributes(library: Library, spec: NodeSpec, node: Any, seen: dict[int, Any], at: Any) -> Any:
    return tuple(
        (name, _observe_item(library, item, getattr(node, name), seen, (*at, name)))
        for name, item in spec.attrs
    )


def _observe_item(library: Library, item: Any, value: Any, seen: dict[int, Any], here: Any) -> Any:
    if isinstance(item, Share):
        return ("shares", seen.get(id(value), "<not seen>"))
    seen.setdefault(id(value), here)
    if isinstance(item, Sub):
        return (type(value).__name__, _attributes(library, item.node, value, seen, here))
    if isinstance(item, Container):
        elements = tuple(
            _observe_item(library, element, value[key], seen, (*here, key))
            for key, element in zip(item.keys(), item.items)
        )
        return (type(value).__name__, elements)
    if isinstance(item, Var | RngsItem):
        return type(value).__name__
    return canonical(value)


def observe(library: Library, program: Program, root: Any) -> Any:
    """The graph as data: its State (paths, Variable types, values, metadata) and every
    attribute the program set (static values by value, sharing by first path)."""
    state = flat_state(library, library.nnx.state(root))
    attributes = _attributes(library, program.root, root, {id(root): ()}, ())
    return {"state": state, "attributes": attributes}


# -- operations ------------------------------------------------------------------------------


def _construct(library: Library, program: Program) -> Any:
    return observe(library, program, build(library, program))


def _split_merge(library: Library, program: Program) -> Any:
    nnx = library.nnx
    graphdef, state = nnx.split(build(library, program))
    merged = nnx.merge(graphdef, state)
    return {"split": flat_state(library, state), "merged": observe(library, program, merged)}


def _split_filters(library: Library, program: Program) -> Any:
    nnx = library.nnx
    root = build(library, program)
    _, params, rngs, rest = nnx.split(root, nnx.Param, nnx.RngState, ...)
    return [flat_state(library, s) for s in (params, rngs, rest)]


def _update(library: Library, program: Program) -> Any:
    nnx = library.nnx
    root = build(library, program)
    target = build(library, program)
    state = nnx.state(root)
    bumped = jax.tree.map(
        lambda x: _bump(x) if _is_numeric_array(x) else x,
        state,
    )
    nnx.update(target, bumped)
    return observe(library, program, target)


def _is_numeric_array(x: Any) -> bool:
    if not isinstance(x, jax.Array | np.ndarray):
        return False
    return not jnp.issubdtype(x.dtype, jax.dtypes.prng_key) and x.dtype.kind in "biuf"


def _hash(library: Library, program: Program) -> Any:
    nnx = library.nnx
    first = nnx.split(build(library, program))[0]
    second = nnx.split(build(library, program))[0]
    hash(first)
    equal = first == second
    return {"equal": equal, "same_hash": hash(first) == hash(second) if equal else None}


def _jit(library: Library, program: Program) -> Any:
    nnx = library.nnx
    root = build(library, program)
    f = nnx.jit(lambda m: step(program, m))
    first = canonical(f(root))
    after_first = observe(library, program, root)
    second = canonical(f(root))
    return {"out": [first, second], "after": [after_first, observe(library, program, root)]}


def _grad(library: Library, program: Program) -> Any:
    nnx = library.nnx
    root = build(library, program)
    grads = nnx.grad(lambda m: step(program, m))(root)
    return {"grads": flat_state(library, grads), "after": observe(library, program, root)}


def _vmap(library: Library, program: Program) -> Any:
    nnx = library.nnx
    root = build(library, program)
    f = nnx.vmap(lambda m, x: step(program, m) + x, in_axes=(None, 0))
    out = canonical(f(root, jnp.arange(2.0, dtype=jnp.float32)))
    return {"out": out, "after": observe(library, program, root)}


def _scan(library: Library, program: Program) -> Any:
    nnx = library.nnx
    root = build(library, program)

    def body(m: Any, x: Any) -> Any:
        return m, step(program, m) + x

    f = nnx.scan(body, in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
    _, ys = f(root, jnp.arange(2.0, dtype=jnp.float32))
    return {"out": canonical(ys), "after": observe(library, program, root)}


def _display(library: Library, program: Program) -> Any:
    nnx = library.nnx
    root = build(library, program)
    repr(root)
    graphdef, state = nnx.split(root)
    repr(graphdef)
    repr(state)
    return None


def _pickle(library: Library, program: Program) -> Any:
    root = build(library, program)
    loaded = pickle.loads(pickle.dumps(root))
    return observe(library, program, loaded)


def _pytree(library: Library, program: Program) -> Any:
    root = build(library, program)
    return [canonical(leaf) for leaf in jax.tree.leaves(root)]


OPERATIONS: dict[str, Callable[[Library, Program], Any]] = {
    "construct": _construct,
    "split_merge": _split_merge,
    "split_filters": _split_filters,
    "update": _update,
    "hash": _hash,
    "jit": _jit,
    "grad": _grad,
    "vmap": _vmap,
    "scan": _scan,
    "display": _display,
    "pickle": _pickle,
    "pytree": _pytree,
}
"""Every operation, by name, in the order the oracle runs them (construct first)."""


def run(library: Library, program: Program, op: str) -> Outcome:
    """Runs operation ``op`` of ``program`` on ``library``; never raises for the program's errors."""
    with warnings.catch_warnings(), prng_context(program):
        warnings.simplefilter("ignore")
        try:
            return Outcome(True, OPERATIONS[op](library, program))
        except Exception as e:  # the outcome is what is compared
            return Outcome(False, error=f"{type(e).__name__}: {e}"[:600], error_type=type(e))
