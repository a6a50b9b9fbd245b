"""One lifted call for transforms without prefixes: ``make_jaxpr``, ``checkify``,
``transform_metadata``.

These transforms treat every leaf alike (there is no ``in_axes``-like prefix), so
they share one small use of the lifting machine (``lift.py``), the one
``eval_shape`` in ``control.py`` makes: split the inputs (step 1), run a pure
function of ``(Static, values)`` under the JAX transform (steps 2 to 4), then
write the updates back and build the output (step 5).

This file is also the one place where these transforms hand their traversal
mode (``graph=``/``graph_updates=``, resolved with ``flaxgraph.modes.resolve``)
to the lifting machine: see ``LiftedCall.__init__`` and ``LiftedCall.split``.

Source: the JAX-style NNX transforms design note (seed 002).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flaxgraph.modes import Mode
from flaxgraph.transforms.aliasing import PrefixSpec
from flaxgraph.transforms.lift import IN, Call, Inner, InStatic, OutStatic, Static, split_inputs

SPEC = PrefixSpec("arguments", lambda p: p is None, None)


def _never(a: Any, b: Any) -> bool:
    return False


class LiftedCall:
    """Steps 1, 3-4 and 5 of one prefix-less transform of ``f``.

    Attributes:
      f: the user's function (unbound).
      mode: the resolved traversal mode of the transform.
      inner: steps 3-4 (``lift.Inner``).
    """

    __slots__ = ("f", "mode", "inner")

    def __init__(
        self,
        f: Callable[..., Any],
        mode: Mode,
        on_inputs: Callable[[list[Any], list[Any]], None] | None = None,
        on_output_leaf: Callable[[Any, Any], None] | None = None,
    ):
        self.f = f
        self.mode = mode
        # MODE WIRING (1 of 2): when `lift.Inner` takes the traversal mode, pass
        # `mode=self.mode` here.
        self.inner = Inner(
            f,
            SPEC,
            [None],
            same_prefix=_never,
            on_inputs=on_inputs,
            on_output_leaf=on_output_leaf,
        )

    def split(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Call, Static, list[Any]]:
        """Step 1: ``(call, static, values)``; ``pure(static, values)`` runs the call.

        Raises:
          SharedReferenceError, InconsistentAliasingError (``ValueError``): see
            ``lift.split_inputs``.
        """
        # MODE WIRING (2 of 2): when `lift.split_inputs` takes the traversal mode,
        # pass `mode=self.mode` here.
        call = split_inputs(args, kwargs, (None, None), SPEC)
        slots, (values,) = call.groups([None])
        return call, Static(InStatic(call.graphdef, slots, None)), values

    def pure(self, static: Static, values: list[Any]) -> tuple[Static, list[Any]]:
        """Steps 3-4 as a function of arrays: merge, call ``f``, re-split. Returns
        ``(Static(OutStatic), changed leaf values)``."""
        in_static: InStatic = static.value
        _, out_static, (out_values,) = self.inner.run(
            in_static, (values,), [None] * len(values), (None, None), None
        )
        return Static(out_static), out_values

    @staticmethod
    def out_leaves(out_static: OutStatic, in_values: list[Any], out_values: list[Any]) -> list[Any]:
        """Every leaf value of ``(output, args, kwargs)`` in out-GraphDef order."""
        return [in_values[a] if tag == IN else out_values[b] for tag, a, b in out_static.sources]

    @staticmethod
    def finish(call: Call, out: tuple[Static, list[Any]]) -> Any:
        """Step 5: updates the caller's objects and returns the output."""
        out_static, out_values = out
        return call.finish(out_static.value, (out_values,))
