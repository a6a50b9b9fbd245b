"""``nnx.graph``: Flax's older name of :mod:`flaxgraph.graphlib`, re-exporting its names.

Flax NNX keeps ``flax.nnx.graph`` for code written before the module became ``graphlib``
(``from flax.nnx.graph import GraphDef, split``); every public name of
:mod:`flaxgraph.graphlib` is here, the same object.

Example::

  >>> from flaxgraph import graph, graphlib
  >>> graph.split is graphlib.split and graph.GraphDef is graphlib.GraphDef
  True

Source: Flax NNX 0.12.8 ``flax.nnx.graph`` (a re-export of ``flax.nnx.graphlib``).
"""

from flaxgraph.graphlib import *  # noqa: F403 (the module is graphlib's names, by design)
