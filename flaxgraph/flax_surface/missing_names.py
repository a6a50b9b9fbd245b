"""What flaxgraph says when code reaches for a Flax NNX name it does not provide.

The ``AttributeError`` names the name, the Flax version that has it and where
``guides/from_flax.md`` ("Every public name of flax.nnx 0.12.8") lists it, instead of
Python's bare "has no attribute".

Source: the public names of Flax NNX 0.12.8 (``guides/from_flax.md``).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["FlaxOnlyName", "FLAX_ONLY_NAMES", "missing_name_error"]

TABLE = "guides/from_flax.md, section 'Every public name of flax.nnx 0.12.8'"


class FlaxOnlyName(NamedTuple):
    """A ``flax.nnx`` name flaxgraph does not provide."""

    flax_versions: str  # the Flax releases that have it
    what: str  # what it is in Flax, and what to use in flaxgraph
    where: str = TABLE  # where guides/from_flax.md lists it


FLAX_ONLY_NAMES: dict[str, FlaxOnlyName] = {}
"""Top-level ``flax.nnx`` names of some Flax release that flaxgraph lacks (none of 0.12.8's)."""


def missing_name_error(module: str, name: str) -> AttributeError:
    """The ``AttributeError`` for ``module.name``, naming ``name``, the Flax releases that have it
    and the migration table.

    Example:
      >>> import flaxgraph
      >>> flaxgraph.no_such_name
      Traceback (most recent call last):
        ...
      AttributeError: module 'flaxgraph' has no attribute 'no_such_name': flaxgraph provides ...
    """
    known = FLAX_ONLY_NAMES.get(name) if module == "flaxgraph" else None
    if known is not None:
        return AttributeError(
            f"module {module!r} has no attribute {name!r}: {known.flax_versions} has "
            f"`flax.nnx.{name}` ({known.what}); flaxgraph does not provide it ({known.where})."
        )
    return AttributeError(
        f"module {module!r} has no attribute {name!r}: flaxgraph provides the public names of "
        f"Flax NNX 0.12.8 and {name!r} is not one of them ({TABLE} lists them all)."
    )
