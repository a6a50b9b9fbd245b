"""flaxgraph: reference-semantics neural-network objects for JAX.

Write ``import flaxgraph as nnx``: the public names follow Flax NNX.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from flaxgraph import filters as filters
from flaxgraph import spmd as spmd
from flaxgraph import testing as testing
from flaxgraph.config import Flag as Flag
from flaxgraph.display import display as display
from flaxgraph.errors import FlaxgraphError as FlaxgraphError
from flaxgraph.errors import GraphStructureError as GraphStructureError
from flaxgraph.errors import InvalidFilterError as InvalidFilterError
from flaxgraph.errors import StaticAttributeError as StaticAttributeError
from flaxgraph.errors import TraceContextError as TraceContextError
from flaxgraph.errors import UnmatchedLeafError as UnmatchedLeafError
from flaxgraph.filters import All as All
from flaxgraph.filters import Any as Any
from flaxgraph.filters import Everything as Everything
from flaxgraph.filters import Not as Not
from flaxgraph.filters import Nothing as Nothing
from flaxgraph.filters import OfType as OfType
from flaxgraph.filters import PathContains as PathContains
from flaxgraph.filters import WithTag as WithTag
from flaxgraph.graph.api import call as call
from flaxgraph.graph.api import clone as clone
from flaxgraph.graph.api import find_duplicates as find_duplicates
from flaxgraph.graph.api import graphdef as graphdef
from flaxgraph.graph.api import iter_graph as iter_graph
from flaxgraph.graph.api import merge as merge
from flaxgraph.graph.api import merge_context as merge_context
from flaxgraph.graph.api import pop as pop
from flaxgraph.graph.api import recursive_map as recursive_map
from flaxgraph.graph.api import split as split
from flaxgraph.graph.api import split_context as split_context
from flaxgraph.graph.api import state as state
from flaxgraph.graph.api import update as update
from flaxgraph.graph.diff import graphdef_diff as graphdef_diff
from flaxgraph.graph.graphdef import GraphDef as GraphDef
from flaxgraph.graph.registry import register_graph_node_type as register_graph_node_type
from flaxgraph.helpers import Dict as Dict
from flaxgraph.helpers import List as List
from flaxgraph.helpers import Sequential as Sequential
from flaxgraph.module import Module as Module
from flaxgraph.objects import Object as Object
from flaxgraph.objects import data as data
from flaxgraph.objects import static as static
from flaxgraph.rngs import RngBackups as RngBackups
from flaxgraph.rngs import RngCount as RngCount
from flaxgraph.rngs import RngKey as RngKey
from flaxgraph.rngs import Rngs as Rngs
from flaxgraph.rngs import RngState as RngState
from flaxgraph.rngs import RngStream as RngStream
from flaxgraph.rngs import fork_rngs as fork_rngs
from flaxgraph.rngs import reseed as reseed
from flaxgraph.rngs import restore_rngs as restore_rngs
from flaxgraph.rngs import split_rngs as split_rngs
from flaxgraph.spmd import AxisMetadata as AxisMetadata
from flaxgraph.spmd import Partitioned as Partitioned
from flaxgraph.spmd import get_named_sharding as get_named_sharding
from flaxgraph.spmd import get_partition_spec as get_partition_spec
from flaxgraph.spmd import with_partitioning as with_partitioning
from flaxgraph.spmd import with_sharding_constraint as with_sharding_constraint
from flaxgraph.state import FlatState as FlatState
from flaxgraph.state import State as State
from flaxgraph.state import map_state as map_state
from flaxgraph.transforms.aliasing import InconsistentAliasingError as InconsistentAliasingError
from flaxgraph.transforms.aliasing import PrefixError as PrefixError
from flaxgraph.transforms.autodiff import checkpoint as checkpoint
from flaxgraph.transforms.autodiff import grad as grad
from flaxgraph.transforms.autodiff import jvp as jvp
from flaxgraph.transforms.autodiff import remat as remat
from flaxgraph.transforms.autodiff import value_and_grad as value_and_grad
from flaxgraph.transforms.autodiff import vjp as vjp
from flaxgraph.transforms.control import CarryStructureError as CarryStructureError
from flaxgraph.transforms.control import cond as cond
from flaxgraph.transforms.control import eval_shape as eval_shape
from flaxgraph.transforms.control import fori_loop as fori_loop
from flaxgraph.transforms.control import switch as switch
from flaxgraph.transforms.control import while_loop as while_loop
from flaxgraph.transforms.custom_vjp import custom_vjp as custom_vjp
from flaxgraph.transforms.jit import jit as jit
from flaxgraph.transforms.lift_types import DiffState as DiffState
from flaxgraph.transforms.lift_types import StateAxes as StateAxes
from flaxgraph.transforms.lift_types import StateSharding as StateSharding
from flaxgraph.transforms.scan import Carry as Carry
from flaxgraph.transforms.scan import scan as scan
from flaxgraph.transforms.vmap import pmap as pmap
from flaxgraph.transforms.vmap import vmap as vmap
from flaxgraph.variables import PARTITION_NAME as PARTITION_NAME
from flaxgraph.variables import BatchStat as BatchStat
from flaxgraph.variables import Cache as Cache
from flaxgraph.variables import Intermediate as Intermediate
from flaxgraph.variables import Param as Param
from flaxgraph.variables import Perturbation as Perturbation
from flaxgraph.variables import Variable as Variable
from flaxgraph.variables import register_variable_name as register_variable_name
from flaxgraph.variables import variable_name_from_type as variable_name_from_type
from flaxgraph.variables import variable_type_from_name as variable_type_from_name

try:
    __version__ = _version("flaxgraph")
except _PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"
