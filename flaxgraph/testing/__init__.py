"""Testing tools for object graphs: generators, an isomorphism check, mutation programs.

The strategies need ``hypothesis`` and import it on first access; ``import flaxgraph``
does not. What each module holds is in the package README.

  from hypothesis import given
  import flaxgraph as nnx
  from flaxgraph.testing import graphs, assert_graphs_equal

  @given(graphs())
  def test_clone_is_isomorphic(model):
      assert_graphs_equal(nnx.clone(model), model)
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
    "arrays", "attribute_values", "filters", "graphs", "modes", "mutations", "static_values",
    "variables",
)  # fmt: skip


def __getattr__(name: str) -> _Any:
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
