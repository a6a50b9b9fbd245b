"""One lifted call for transforms without prefixes (``make_jaxpr``, ``checkify``…).

Source: the "JAX-style NNX Transforms" FLIP flax#4107.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flaxgraph.modes import Mode
from flaxgraph.transforms.aliasing import PrefixSpec
from flaxgraph.transforms.lift import (
    AuxValue,
    Call,
    Inner,
    InStatic,
    OutStatic,
    leaf_values,
    split_inputs,
)

SPEC = PrefixSpec("arguments", lambda p: p is None, None)


def _never(a: object, b: object) -> bool:
    return False


class LiftedCall:
    """Steps 1, 3-4 and 5 of one transform of ``f`` whose JAX transform sees groups of leaves."""

    __slots__ = ("f", "mode", "in_spec", "keys", "inner")

    def __init__(
        self,
        f: Callable[..., Any],
        mode: Mode,
        *,
        in_spec: PrefixSpec = SPEC,
        out_spec: PrefixSpec = SPEC,
        keys: Sequence[Any] = (None,),
        on_inputs: Callable[[list[Any], list[Any]], None] | None = None,
        on_output_leaf: Callable[[Any, Any], None] | None = None,
    ):
        self.f = f
        self.mode = mode
        self.in_spec = in_spec
        self.keys = list(keys)
        self.inner = Inner(
            f,
            out_spec,
            self.keys,
            same_prefix=_never,
            on_inputs=on_inputs,
            on_output_leaf=on_output_leaf,
            mode=mode,
        )

    def split(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], in_prefix: object = (None, None)
    ) -> tuple[Call, AuxValue[Any], tuple[list[Any], ...]]:
        """Step 1: ``(call, static, groups)``; raises as ``lift.split_inputs`` does."""
        call = split_inputs(args, kwargs, in_prefix, self.in_spec, self.mode)
        slots, groups = call.groups(self.keys)
        return (
            call,
            AuxValue(InStatic.make(graphdef=call.graphdef, slots=slots, extra=in_prefix)),
            groups,
        )

    def pure(
        self, static: AuxValue[Any], groups: Sequence[list[Any]], out_prefix: object = None
    ) -> tuple[AuxValue[Any], tuple[list[Any], ...]]:
        """Steps 3-4 as a function of arrays: ``(AuxValue(OutStatic), out groups)``."""
        in_static: InStatic[Any] = static.value
        in_prefixes = [self.keys[g] for g in in_static.slots.groups]
        _, out_static, out_groups = self.inner.run(
            in_static, groups, in_prefixes, in_static.extra, out_prefix
        )
        return AuxValue(out_static), out_groups

    @staticmethod
    def out_leaves(
        static: AuxValue[Any],
        groups: Sequence[list[Any]],
        out: tuple[AuxValue[Any], Sequence[list[Any]]],
    ) -> list[Any]:
        """Every leaf value of ``(output, args, kwargs)`` in out-GraphDef order."""
        in_static: InStatic[Any] = static.value
        in_values = [
            groups[g][i] for g, i in zip(in_static.slots.groups, in_static.slots.positions)
        ]
        out_static: OutStatic = out[0].value
        return leaf_values(out_static.sources, in_values, out[1])

    @staticmethod
    def finish(call: Call, out: tuple[AuxValue[Any], Sequence[list[Any]]]) -> object:
        """Step 5: updates the caller's objects and returns the output."""
        out_static, out_groups = out
        return call.finish(out_static.value, out_groups)
