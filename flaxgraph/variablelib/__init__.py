"""Variables: the leaves of the object graph that hold arrays, with their kinds and metadata.

The package README maps the files; this package is Flax NNX's ``variablelib`` module map.
"""

from flaxgraph.mesh_context import use_eager_sharding as use_eager_sharding
from flaxgraph.mesh_context import using_eager_sharding as using_eager_sharding
from flaxgraph.variablelib.defaults import VarDefaults as VarDefaults
from flaxgraph.variablelib.defaults import VarDefaultsContext as VarDefaultsContext
from flaxgraph.variablelib.defaults import var_defaults as var_defaults
from flaxgraph.variablelib.hijax import HijaxVariable as HijaxVariable
from flaxgraph.variablelib.initial_metadata import VariableMetadata as VariableMetadata
from flaxgraph.variablelib.initial_metadata import with_metadata as with_metadata
from flaxgraph.variablelib.names import VariableTypeCache as VariableTypeCache
from flaxgraph.variablelib.names import register_variable_name as register_variable_name
from flaxgraph.variablelib.names import variable_name_from_type as variable_name_from_type
from flaxgraph.variablelib.names import variable_type_from_name as variable_type_from_name
from flaxgraph.variablelib.variable import PARTITION_NAME as PARTITION_NAME
from flaxgraph.variablelib.variable import BatchStat as BatchStat
from flaxgraph.variablelib.variable import Cache as Cache
from flaxgraph.variablelib.variable import Intermediate as Intermediate
from flaxgraph.variablelib.variable import Param as Param
from flaxgraph.variablelib.variable import Perturbation as Perturbation
from flaxgraph.variablelib.variable import Variable as Variable
from flaxgraph.variablelib.variable import is_variable as is_variable
