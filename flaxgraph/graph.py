"""``nnx.graph``: Flax's older name of :mod:`flaxgraph.graphlib`, re-exporting its names.

Example::

  >>> from flaxgraph import graph, graphlib
  >>> graph.split is graphlib.split and graph.GraphDef is graphlib.GraphDef
  True

Source: Flax NNX 0.12.8 ``flax.nnx.graph`` (a re-export of ``flax.nnx.graphlib``).
"""

from flaxgraph.graphlib import *  # noqa: F403 (the module is graphlib's names, by design)
