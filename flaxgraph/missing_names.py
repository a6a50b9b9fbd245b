"""What flaxgraph says when code reaches for a Flax NNX name it does not provide.

flaxgraph provides the public names of Flax NNX 0.12.8 (``guides/from_flax.md``, section
"Every public name of flax.nnx 0.12.8", lists each with its status). A program written for
Flax, often run through :func:`flaxgraph.install_as_flax_nnx`, may still reach for a name
flaxgraph lacks: a Flax-internal module, or a name of another Flax release. The
``AttributeError`` then names the name, the Flax version that has it and where the migration
table lists it, instead of Python's bare "has no attribute".
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
"""Top-level ``flax.nnx`` names of some Flax release that flaxgraph does not provide, with
what they are (none for Flax NNX 0.12.8: every one of its names is provided)."""


def missing_name_error(module: str, name: str) -> AttributeError:
    """The ``AttributeError`` for ``module.name`` (``module`` is ``'flaxgraph'``).

    Args:
      module: the dotted name of the flaxgraph module that lacks ``name``.
      name: the attribute that was looked up.

    Returns:
      An ``AttributeError`` (with ``.name`` and ``.obj`` unset) whose message names ``name``,
      the Flax releases that have it, and the migration table (``guides/from_flax.md``).

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
