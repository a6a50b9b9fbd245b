"""Testing tools for object graphs: generators, an isomorphism check, mutation programs.

Use them to write property tests of your own models and graph code::

  from hypothesis import given
  import flaxgraph as nnx
  from flaxgraph.testing import graphs, assert_graphs_equal

  @given(graphs())
  def test_clone_is_isomorphic(model):
      assert_graphs_equal(nnx.clone(model), model)

What is here:

* **strategies** (need ``hypothesis``): ``graphs()`` (random object graphs
  with shared Variables and sub-nodes, cycles, containers, mixed Variable kinds,
  metadata, static attributes), ``arrays()``, ``variables()``,
  ``static_values()``, ``filters()``, ``mutations()`` (mutation programs) and
  ``modes()`` (the three traversal modes, as transform keyword arguments);
* **comparison**: ``graphs_equal(a, b)`` and ``assert_graphs_equal(a, b)`` check
  that two graphs are isomorphic: same types, static values, array values,
  Variable metadata and sharing pattern (cycles included);
* **mutation programs**: plain-data steps (``SetValue``, ``AddAttribute``,
  ``DeleteAttribute``, ``ShareAttribute``, ``SwapAttributes``) and
  ``apply_mutations(root, steps)``, deterministic given the graph, for
  differential tests (eager vs. inside a transform);
* **generic types** graphs are built from: ``Node``, ``Block`` (Modules),
  ``Record`` (a Pytree that is not a Module), ``CustomVariable`` (a Variable kind).

``hypothesis`` is a test-only dependency: ``import flaxgraph`` does not import
it; the strategies import it when first accessed (``flaxgraph.testing.graphs``).
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from flaxgraph.testing.compare import assert_graphs_equal as assert_graphs_equal
from flaxgraph.testing.compare import graph_difference as graph_difference
from flaxgraph.testing.compare import graphs_equal as graphs_equal
from flaxgraph.testing.nodes import Block as Block
from flaxgraph.testing.nodes import CustomVariable as CustomVariable
from flaxgraph.testing.nodes import Node as Node
from flaxgraph.testing.nodes import Record as Record
from flaxgraph.testing.programs import AddAttribute as AddAttribute
from flaxgraph.testing.programs import DeleteAttribute as DeleteAttribute
from flaxgraph.testing.programs import MutationStep as MutationStep
from flaxgraph.testing.programs import SetValue as SetValue
from flaxgraph.testing.programs import ShareAttribute as ShareAttribute
from flaxgraph.testing.programs import SwapAttributes as SwapAttributes
from flaxgraph.testing.programs import apply_mutations as apply_mutations

if _TYPE_CHECKING:
    from flaxgraph.testing.strategies import arrays as arrays
    from flaxgraph.testing.strategies import attribute_values as attribute_values
    from flaxgraph.testing.strategies import filters as filters
    from flaxgraph.testing.strategies import graphs as graphs
    from flaxgraph.testing.strategies import modes as modes
    from flaxgraph.testing.strategies import mutations as mutations
    from flaxgraph.testing.strategies import static_values as static_values
    from flaxgraph.testing.strategies import variables as variables

_STRATEGIES = (
    "arrays",
    "attribute_values",
    "filters",
    "graphs",
    "modes",
    "mutations",
    "static_values",
    "variables",
)


def __getattr__(name: str) -> _Any:
    # The strategies need hypothesis, a test-only dependency: import it on first use.
    if name in _STRATEGIES or name == "strategies":
        try:
            strategies = _importlib.import_module("flaxgraph.testing.strategies")
        except ModuleNotFoundError as e:
            if (e.name or "").partition(".")[0] != "hypothesis":
                raise
            raise ImportError(
                f"flaxgraph.testing.{name} needs hypothesis, a test-only dependency.\n"
                "Fix: pip install hypothesis (or pip install 'flaxgraph[test]')."
            ) from e
        return strategies if name == "strategies" else getattr(strategies, name)
    raise AttributeError(f"module 'flaxgraph.testing' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_STRATEGIES})
