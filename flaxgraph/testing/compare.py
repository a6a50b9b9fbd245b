"""Graph isomorphism: are two object graphs the same up to object identity?

Types, static values (``3 != 3.0 != True``), array values (NaN equals NaN, NumPy equals
JAX, keys by key data), Variable metadata and the sharing pattern (objects met at the same
places pair up one to one, cycles included) must agree; containers compare by value.

Source: ``docs/design.md``, section "Tests" ("transformed == eager" properties).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from flaxgraph.graphlib.paths import step_str
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import (
    ARRAY,
    CONSTANT,
    DATA_LEAF,
    DICT,
    PYTREE,
    REGISTRY,
    SEQUENCE,
    STATIC_LEAF,
    VARIABLE,
    flatten_pytree,
    node_impl,
)
from flaxgraph.variablelib.variable import metadata_of


def graph_difference(a: Any, b: Any, *, rtol: float = 0.0, atol: float = 0.0) -> str | None:
    """Describes the first difference between two graphs, or returns ``None``.

    Args:
      a, b: any values holding graphs; arrays must be concrete (not tracers).
      rtol, atol: tolerances for array values (``np.allclose``); zero means exact.

    Returns:
      ``None`` if ``a`` and ``b`` are isomorphic, else one line naming the place
      (``a.layers[0].kernel`` / ``b.layers[0].kernel``) and what differs there.

    >>> from flaxgraph.testing import Node
    >>> from flaxgraph.testing.compare import graph_difference
    >>> graph_difference(Node(n=1), Node(n=2))
    'at a.n / b.n: static values differ: 1 != 2'
    """
    a_seen = RefMap[tuple[Any, str]]()  # object of a -> (its partner in b, first path)
    b_seen = RefMap[tuple[Any, str]]()
    stack: list[tuple[str, Any, Any]] = [("", a, b)]
    while stack:
        path, x, y = stack.pop()
        problem = _compare_one(path, x, y, a_seen, b_seen, stack, rtol, atol)
        if problem is not None:
            return f"at a{path} / b{path}: {problem}"
    return None


def graphs_equal(a: Any, b: Any, *, rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Whether ``a`` and ``b`` are isomorphic graphs; arguments as ``graph_difference``.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> from flaxgraph.testing import Node, graphs_equal
    >>> w = nnx.Param(jnp.ones(2))
    >>> shared = Node(a=w, b=w); shared.me = shared          # sharing and a cycle
    >>> copied = Node(a=w, b=nnx.Param(jnp.ones(2))); copied.me = copied
    >>> graphs_equal(shared, nnx.merge(*nnx.split(shared))), graphs_equal(shared, copied)
    (True, False)
    """
    return graph_difference(a, b, rtol=rtol, atol=atol) is None


def assert_graphs_equal(a: Any, b: Any, *, rtol: float = 0.0, atol: float = 0.0) -> None:
    """Asserts that ``a`` and ``b`` are isomorphic graphs; arguments as ``graph_difference``.

    Raises:
      AssertionError: the graphs differ; the message is ``graph_difference``'s line.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> from flaxgraph.testing import Node, assert_graphs_equal
    >>> m = Node(w=nnx.Param(jnp.ones(2)))
    >>> assert_graphs_equal(m, nnx.clone(m))
    """
    problem = graph_difference(a, b, rtol=rtol, atol=atol)
    if problem is not None:
        raise AssertionError(f"The graphs differ {problem}")


# -- one pair of values -------------------------------------------------------------------


def _compare_one(
    path: str,
    x: Any,
    y: Any,
    a_seen: RefMap[tuple[Any, str]],
    b_seen: RefMap[tuple[Any, str]],
    stack: list[tuple[str, Any, Any]],
    rtol: float,
    atol: float,
) -> str | None:
    # What each value is: the graph engine's classification (graphlib/registry.py).
    kx, ky = REGISTRY.kind_of(x), REGISTRY.kind_of(y)
    if kx <= VARIABLE or ky <= VARIABLE:  # a graph node or a Variable
        if type(x) is not type(y):
            return f"types differ: {_type_name(x)} != {_type_name(y)}"
        x_entry, y_entry = a_seen.get(x), b_seen.get(y)
        if x_entry is not None or y_entry is not None:
            if x_entry is not None and y_entry is not None and x_entry[0] is y:
                return None  # the same pair met again: a shared reference or a cycle
            return _alias_problem(x_entry, y_entry)
        a_seen[x] = (y, path)
        b_seen[y] = (x, path)
        if kx is VARIABLE:
            mx, my = metadata_of(x), metadata_of(y)
            if mx != my:
                return f"metadata differ: {mx!r} != {my!r}"
            stack.append((f"{path}.value", x.raw_value, y.raw_value))
            return None
        return _push_node_children(path, x, y, stack)
    if kx in _MARKS or ky in _MARKS:
        # nnx.data / nnx.static marks: the marks themselves are node metadata
        # (compared with the node); compare what they hold.
        stack.append((path, _unmark(x), _unmark(y)))
        return None
    # A ShapeDtypeStruct (static to the engine) is compared as an array: shape and dtype.
    x_array = kx is ARRAY or type(x) is jax.ShapeDtypeStruct
    y_array = ky is ARRAY or type(y) is jax.ShapeDtypeStruct
    if x_array or y_array:
        if not (x_array and y_array):
            return f"types differ: {_type_name(x)} != {_type_name(y)}"
        return _array_problem(x, y, rtol, atol)
    if type(x) is not type(y):
        return f"types differ: {_type_name(x)} != {_type_name(y)}"
    if kx is SEQUENCE:
        if len(x) != len(y):
            return f"lengths differ: {len(x)} != {len(y)}"
        for i in reversed(range(len(x))):
            stack.append((f"{path}[{i}]", x[i], y[i]))
        return None
    if kx is DICT:
        if set(x) != set(y):
            return f"dict keys differ: {sorted(map(repr, x))} != {sorted(map(repr, y))}"
        for k in reversed(list(x)):
            stack.append((f"{path}[{k!r}]", x[k], y[k]))
        return None
    if kx is CONSTANT:
        return None if x == y else f"static values differ: {x!r} != {y!r}"
    if kx is PYTREE or ky is PYTREE:
        if kx is not ky or (xc := flatten_pytree(x))[1] != (yc := flatten_pytree(y))[1]:
            return f"pytree structures differ: {x!r} != {y!r}"
        for (k, cx), (_, cy) in reversed(list(zip(xc[0], yc[0], strict=True))):
            stack.append((f"{path}[{k!r}]", cx, cy))
        return None
    return None if _static_equal(x, y) else f"static values differ: {x!r} != {y!r}"


def _push_node_children(path: str, x: Any, y: Any, stack: list[tuple[str, Any, Any]]) -> str | None:
    impl = node_impl(x)  # x is a graph node (its kind is NODE)
    x_items, x_meta = impl.flatten(x)
    y_items, y_meta = impl.flatten(y)
    x_items, y_items = list(x_items), list(y_items)
    if not _static_equal(x_meta, y_meta):
        return f"node metadata differ: {x_meta!r} != {y_meta!r}"
    x_keys, y_keys = [k for k, _ in x_items], [k for k, _ in y_items]
    if x_keys != y_keys:
        only_x = [k for k in x_keys if k not in y_keys]
        only_y = [k for k in y_keys if k not in x_keys]
        return (
            f"{type(x).__name__} attributes differ: only in a: {only_x}, only in b: {only_y}"
            if only_x or only_y
            else f"{type(x).__name__} attribute order differs: {x_keys} != {y_keys}"
        )
    for (k, cx), (_, cy) in reversed(list(zip(x_items, y_items, strict=True))):
        stack.append((path + step_str(k, True), cx, cy))
    return None


_MARKS = (DATA_LEAF, STATIC_LEAF)


def _unmark(x: Any) -> Any:
    return x.value if REGISTRY.kind_of(x) in _MARKS else x


def _alias_problem(x_entry: tuple[Any, str] | None, y_entry: tuple[Any, str] | None) -> str:
    a_part, b_part = (
        f"in {side} it is the object already seen at {side}{entry[1]}"
        if entry is not None
        else f"in {side} it is an object not seen before"
        for side, entry in (("a", x_entry), ("b", y_entry))
    )
    return f"sharing differs: {a_part}, but {b_part}"


def _array_problem(x: Any, y: Any, rtol: float, atol: float) -> str | None:
    x_shape, y_shape = tuple(np.shape(x)), tuple(np.shape(y))
    if x_shape != y_shape:
        return f"array shapes differ: {x_shape} != {y_shape}"
    x_dtype, y_dtype = x.dtype, y.dtype
    if x_dtype != y_dtype:
        return f"array dtypes differ: {x_dtype} != {y_dtype}"
    if isinstance(x, jax.ShapeDtypeStruct) or isinstance(y, jax.ShapeDtypeStruct):
        if type(x) is not type(y):
            return f"types differ: {_type_name(x)} != {_type_name(y)}"
        return None
    if jax.dtypes.issubdtype(x_dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(x)) != str(jax.random.key_impl(y)):
            return "PRNG key implementations differ"
        x, y = jax.random.key_data(x), jax.random.key_data(y)
    xv, yv = np.asarray(x), np.asarray(y)
    if rtol == 0 and atol == 0:
        equal = np.array_equal(xv, yv, equal_nan=xv.dtype.kind in "fc")
    else:
        equal = bool(np.allclose(xv, yv, rtol=rtol, atol=atol, equal_nan=True))
    if equal:
        return None
    return f"array values differ:\n{_short_array(xv)}\n!=\n{_short_array(yv)}"


def _short_array(x: np.ndarray) -> str:
    return np.array2string(x, threshold=20, edgeitems=3)


def _static_equal(x: Any, y: Any) -> bool:
    if type(x) is not type(y):
        return False
    if x is y:
        return True
    try:
        return bool(x == y)
    except Exception:  # an exotic __eq__ (e.g. returning an array): fall back to identity
        return False


def _type_name(x: Any) -> str:
    return type(x).__qualname__


__all__ = ["graph_difference", "graphs_equal", "assert_graphs_equal"]
