"""The public names added for Flax NNX 0.12.8 compatibility have Flax's parameters.

Compares parameter names and kinds (positional-only, keyword-only…) with the
installed Flax; skipped when Flax is absent (it is only in the ``bench`` extra).
``fork_rngs`` additionally takes ``only=`` (a flaxgraph extension).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import flaxgraph as nnx

NAMES = [
    "with_rngs",
    "make_jaxpr",
    "checkify",
    "capture",
    "view",
    "view_info",
    "with_attributes",
    "transform_metadata",
    "split_rngs",
    "fork_rngs",
    "Rngs.fork",
    "Rngs.split",
    "Rngs.broadcast",
    "RngStream.fork",
    "RngStream.split",
    "RngStream.broadcast",
]
EXTENSIONS = {"fork_rngs": {"only"}}


def resolve(root: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        root = getattr(root, part)
    return root


def params(fn: Any, skip: set[str] = frozenset()) -> list[tuple[str, Any]]:  # type: ignore[assignment]
    return [
        (p.name, p.kind) for p in inspect.signature(fn).parameters.values() if p.name not in skip
    ]


@pytest.mark.parametrize("name", NAMES)
def test_same_parameters_as_flax(name: str) -> None:
    flax_nnx = pytest.importorskip("flax.nnx")
    ours = params(resolve(nnx, name), EXTENSIONS.get(name, set()))
    assert ours == params(resolve(flax_nnx, name))
