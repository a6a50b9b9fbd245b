"""The graph engine: object graphs <-> (GraphDef, State).

The package README says how the files are cut; ``docs/design.md``, "The graph engine",
is the overview. This package is Flax NNX's ``graphlib`` module map.
"""

from flaxgraph.graphlib.contexts import MergeContext as MergeContext
from flaxgraph.graphlib.contexts import SplitContext as SplitContext
from flaxgraph.graphlib.contexts import UpdateContext as UpdateContext
from flaxgraph.graphlib.contexts import current_update_context as current_update_context
from flaxgraph.graphlib.contexts import merge_context as merge_context
from flaxgraph.graphlib.contexts import split_context as split_context
from flaxgraph.graphlib.contexts import update_context as update_context
from flaxgraph.graphlib.descendants import find_duplicates as find_duplicates
from flaxgraph.graphlib.descendants import iter_children as iter_children
from flaxgraph.graphlib.descendants import iter_graph as iter_graph
from flaxgraph.graphlib.descendants import iter_module_children as iter_module_children
from flaxgraph.graphlib.descendants import recursive_map as recursive_map
from flaxgraph.graphlib.diff import graphdef_diff as graphdef_diff
from flaxgraph.graphlib.functional import as_pure as as_pure
from flaxgraph.graphlib.functional import flatten as flatten
from flaxgraph.graphlib.functional import map as map
from flaxgraph.graphlib.functional import pure as pure
from flaxgraph.graphlib.functional import unflatten as unflatten
from flaxgraph.graphlib.functional import unpack as unpack
from flaxgraph.graphlib.graph_state import GraphState as GraphState
from flaxgraph.graphlib.graph_state import PureState as PureState
from flaxgraph.graphlib.graphdefs import GraphDef as GraphDef
from flaxgraph.graphlib.graphdefs import NodeDef as NodeDef
from flaxgraph.graphlib.graphdefs import NodeRef as NodeRef
from flaxgraph.graphlib.graphdefs import TreeNodeDef as TreeNodeDef
from flaxgraph.graphlib.graphdefs import VariableDef as VariableDef
from flaxgraph.graphlib.inplace import pop as pop
from flaxgraph.graphlib.inplace import update as update
from flaxgraph.graphlib.pure_methods import call as call
from flaxgraph.graphlib.ref_outputs import ArrayRefOutput as ArrayRefOutput
from flaxgraph.graphlib.ref_outputs import NoUpdate as NoUpdate
from flaxgraph.graphlib.refmap import IndexMap as IndexMap
from flaxgraph.graphlib.refmap import RefMap as RefMap
from flaxgraph.graphlib.registry import is_node_module as is_node_module
from flaxgraph.graphlib.split_merge import clone as clone
from flaxgraph.graphlib.split_merge import graphdef as graphdef
from flaxgraph.graphlib.split_merge import merge as merge
from flaxgraph.graphlib.split_merge import split as split
from flaxgraph.graphlib.split_merge import state as state
from flaxgraph.graphlib.split_merge import variables as variables
from flaxgraph.graphlib.variable_views import set_metadata as set_metadata
from flaxgraph.graphlib.variable_views import vars_as as vars_as
from flaxgraph.graphlib.variable_views import with_vars as with_vars
from flaxgraph.modes import set_graph_mode as set_graph_mode
from flaxgraph.modes import set_graph_updates as set_graph_updates
from flaxgraph.statelib import FlatState as FlatState
