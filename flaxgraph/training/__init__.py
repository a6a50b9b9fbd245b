"""Training objects: ``Optimizer``/``ModelAndOptimizer`` over optax, ``TrainState``,
``metrics``, ``EMA``."""

from flaxgraph.training import metrics as metrics
from flaxgraph.training.ema import EMA as EMA
from flaxgraph.training.metrics import Metric as Metric
from flaxgraph.training.metrics import MetricState as MetricState
from flaxgraph.training.metrics import MultiMetric as MultiMetric
from flaxgraph.training.optimizer import ModelAndOptimizer as ModelAndOptimizer
from flaxgraph.training.optimizer import OptArray as OptArray
from flaxgraph.training.optimizer import Optimizer as Optimizer
from flaxgraph.training.optimizer import OptState as OptState
from flaxgraph.training.optimizer import OptVariable as OptVariable
from flaxgraph.training.train_state import TrainState as TrainState
