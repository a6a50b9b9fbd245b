"""Pytree/Object: the reference-semantics base class, a graph node *and* a JAX pytree.

The package README maps the files; this package is Flax NNX's ``pytreelib`` module map
(``nnx.object`` is an alias, as in Flax).
"""

from flaxgraph.pytreelib.attribute_kinds import AttributeStatus as AttributeStatus
from flaxgraph.pytreelib.attribute_kinds import Data as Data
from flaxgraph.pytreelib.attribute_kinds import DataAnnotation as DataAnnotation
from flaxgraph.pytreelib.attribute_kinds import Static as Static
from flaxgraph.pytreelib.attribute_kinds import StaticAnnotation as StaticAnnotation
from flaxgraph.pytreelib.attribute_kinds import data as data
from flaxgraph.pytreelib.attribute_kinds import has_data as has_data
from flaxgraph.pytreelib.attribute_kinds import is_data as is_data
from flaxgraph.pytreelib.attribute_kinds import register_data_type as register_data_type
from flaxgraph.pytreelib.attribute_kinds import static as static
from flaxgraph.pytreelib.declarations import check_pytree as check_pytree
from flaxgraph.pytreelib.declarations import dataclass as dataclass
from flaxgraph.pytreelib.objects import Object as Object
from flaxgraph.pytreelib.objects import Pytree as Pytree
from flaxgraph.pytreelib.pytree_state import PytreeState as PytreeState
