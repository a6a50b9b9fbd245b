"""What every client scenario of the contract shares: its registry and how it reports numbers.

A scenario is a function without arguments that drives a client's public API and returns its
numbers as ``{key: nested list}``; ``arrays`` makes that from any tree of arrays (an NNX State, a
pure dict, a checkpoint read back), with the tree path and the dtype in the key, so two runs agree
only when their trees have the same paths, dtypes and shapes, and the same values.

Example::

    SCENARIOS = Registry()

    @SCENARIOS.add(ci=True)
    def ptq() -> dict[str, Any]:
        ...
        return arrays(nnx.to_pure_dict(nnx.state(model)), "state/")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

Values = dict[str, Any]


class Scenario(NamedTuple):
    """One scenario: its name, whether the CI subset runs it, and its program."""

    name: str
    ci: bool
    run: Callable[[], Values]


class Registry(dict[str, Scenario]):
    """A client's scenarios by name, in the order they were defined."""

    def add(self, *, ci: bool = False) -> Callable[[Callable[[], Values]], Callable[[], Values]]:
        def register(fn: Callable[[], Values]) -> Callable[[], Values]:
            self[fn.__name__] = Scenario(fn.__name__, ci, fn)
            return fn

        return register


def arrays(tree: Any, prefix: str = "") -> Values:
    """``{"<prefix><path>[<dtype>]": nested list}`` for every array leaf of ``tree``.

    Variables are read through their ``value``; non-array leaves are left out; key arrays are
    reported by their key data. Values are float64 lists (integers and booleans exactly).
    """
    import jax
    import numpy as np

    out: Values = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        value = getattr(leaf, "value", leaf)
        if isinstance(value, jax.Array) and jax.dtypes.issubdtype(value.dtype, jax.dtypes.prng_key):
            value = jax.random.key_data(value)
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            continue
        array = np.asarray(value)
        if array.dtype.kind not in "fiub" and str(array.dtype) not in ("bfloat16", "int4", "uint4"):
            continue
        key = jax.tree_util.keystr(path, simple=True, separator="/")
        out[f"{prefix}{key}[{array.dtype}]"] = array.astype(np.float64).tolist()
    return out
