"""States: the leaves of a graph as a nested mapping that is a JAX pytree.

The package README maps the files; this package is Flax NNX's ``statelib`` module map.
"""

from flaxgraph.statelib.path_filters import ExtractValueFn as ExtractValueFn
from flaxgraph.statelib.path_filters import NestedStateRepr as NestedStateRepr
from flaxgraph.statelib.path_filters import SetValueFn as SetValueFn
from flaxgraph.statelib.path_filters import create_path_filters as create_path_filters
from flaxgraph.statelib.state import FlatState as FlatState
from flaxgraph.statelib.state import State as State
from flaxgraph.statelib.state import diff as diff
from flaxgraph.statelib.state import filter_state as filter_state
from flaxgraph.statelib.state import from_flat_state as from_flat_state
from flaxgraph.statelib.state import map_state as map_state
from flaxgraph.statelib.state import merge_state as merge_state
from flaxgraph.statelib.state import partition as partition
from flaxgraph.statelib.state import replace_by_pure_dict as replace_by_pure_dict
from flaxgraph.statelib.state import restore_int_paths as restore_int_paths
from flaxgraph.statelib.state import split_state as split_state
from flaxgraph.statelib.state import to_flat_state as to_flat_state
from flaxgraph.statelib.state import to_predicate as to_predicate
from flaxgraph.statelib.state import to_pure_dict as to_pure_dict
from flaxgraph.statelib.state import unmatched_message as unmatched_message

__all__ = [
    "ExtractValueFn",
    "NestedStateRepr",
    "SetValueFn",
    "create_path_filters",
    "State",
    "diff",
    "FlatState",
    "map_state",
    "to_predicate",
    "to_flat_state",
    "from_flat_state",
    "filter_state",
    "split_state",
    "merge_state",
    "to_pure_dict",
    "replace_by_pure_dict",
    "restore_int_paths",
]
