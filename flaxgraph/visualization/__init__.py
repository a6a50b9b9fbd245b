"""How flaxgraph objects look: plain-text ``repr`` and treescope (see ``show``).

Above the core: importing this package fills ``flaxgraph.renderers.RENDERERS``,
through which the core's ``__repr__`` and notebook hooks reach it. This package is
Flax NNX's ``visualization`` module map (``nnx.display``).
"""

from flaxgraph.visualization.constructor import in_ipython as in_ipython
from flaxgraph.visualization.constructor import (
    render_object_constructor as render_object_constructor,
)
from flaxgraph.visualization.show import display as display
