"""What a repeated call of a transformed function runs: its fast-path plan's generated source.

``python -m flaxgraph.transforms.explain [--layers N]`` prints the plan of a small training
step (how to read it: ``guides/performance.md``; ``docs/design.md``, "The fast path").
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp

from flaxgraph.containers import List
from flaxgraph.module_class import Module
from flaxgraph.transforms.compilation import jit
from flaxgraph.variablelib.variable import Param


def explain(f: Callable[..., Any], *args: object, **kwargs: object) -> str:
    """The generated source of the fast-path plan ``f`` runs for these arguments.

    Args:
      f: a transformed function with a fast path (``nnx.jit(...)``, ``nnx.vmap(...)``…).
      *args, **kwargs: a call's arguments; ``f`` is called with them (effects
        included) once or twice, until a fast call shows its plan.

    Returns:
      The plan's Python source (a ``def run(args, kwargs, statics):``).

    Raises:
      TypeError: ``f`` has no fast path.
      ValueError: the arguments do not qualify for the fast path (e.g. a pytree
        argument other than a list, tuple, dict or dataclass).

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> from flaxgraph.transforms.explain import explain
      >>> f = nnx.jit(lambda m, x: m.w * x)
      >>> class M(nnx.Module):
      ...   def __init__(self): self.w = nnx.Param(jnp.ones(2))
      >>> print(explain(f, M(), jnp.ones(2)).splitlines()[0])
      def run(args, kwargs, statics):
    """
    plans = getattr(f, "plans", None)
    if plans is None:
        raise TypeError(f"{f!r} has no fast path to explain (it keeps no plans).")
    for attempt in range(2):
        # A fast call's plan is the most recent; its first fast call writes in the write-back.
        general = plans.general_calls
        f(*args, **kwargs)
        plan = plans.recent()
        if plans.general_calls == general and plan is not None and plan.source:
            if plan.last_out is not None or attempt == 1:
                return str(plan.source)
    raise ValueError(
        "These arguments take the general path on every call (no fast-path plan is made "
        "for them), so there is no plan source to show.\nFix: pass objects, arrays, and "
        "lists, tuples, dicts or dataclasses of them (see guides/performance.md)."
    )


class _Layer(Module):
    def __init__(self, width: int):
        self.kernel = Param(jnp.eye(width))
        self.bias = Param(jnp.zeros(width))


class _Model(Module):
    def __init__(self, layers: int, width: int):
        self.layers = List([_Layer(width) for _ in range(layers)])


def _step(model: _Model, x: Any) -> object:
    for layer in model.layers:
        x = x @ layer.kernel[...] + layer.bias[...]
        layer.bias[...] = layer.bias[...] + 0.1
    return x.sum()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m flaxgraph.transforms.explain``: prints the plan of a small step."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2, help="layers of the demo model")
    options = parser.parse_args(argv)
    print(explain(jit(_step), _Model(options.layers, 4), jnp.ones(4)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
