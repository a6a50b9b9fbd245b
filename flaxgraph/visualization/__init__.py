"""How flaxgraph objects look: text ``repr`` and treescope (Flax's ``nnx.visualization``
path); importing it fills ``flaxgraph.renderers.RENDERERS`` (the package README)."""

from flaxgraph.visualization.constructor import in_ipython as in_ipython
from flaxgraph.visualization.constructor import (
    render_object_constructor as render_object_constructor,
)
from flaxgraph.visualization.show import display as display
