"""Random streams as objects: ``Rngs``, ``RngStream`` and their key/count Variables.

Flax NNX's ``rnglib`` module map (``SplitBackups`` is ``RngBackups``); see the package
README for what each file holds.
"""

from flaxgraph.rnglib.rngs import RngCount as RngCount
from flaxgraph.rnglib.rngs import RngKey as RngKey
from flaxgraph.rnglib.rngs import Rngs as Rngs
from flaxgraph.rnglib.rngs import RngState as RngState
from flaxgraph.rnglib.rngs import RngStream as RngStream
from flaxgraph.rnglib.splitting import RngBackups as RngBackups
from flaxgraph.rnglib.splitting import backup_keys as backup_keys
from flaxgraph.rnglib.splitting import fork_rngs as fork_rngs
from flaxgraph.rnglib.splitting import reseed as reseed
from flaxgraph.rnglib.splitting import restore_rngs as restore_rngs
from flaxgraph.rnglib.splitting import split_rngs as split_rngs
from flaxgraph.rnglib.stream_copy import with_rngs as with_rngs
from flaxgraph.rnglib.type_names import AxesValue as AxesValue
from flaxgraph.rnglib.type_names import Counts as Counts
from flaxgraph.rnglib.type_names import KeylessInitializer as KeylessInitializer
from flaxgraph.rnglib.type_names import NotKey as NotKey
from flaxgraph.rnglib.type_names import OutShardingType as OutShardingType
from flaxgraph.rnglib.type_names import RngValue as RngValue
from flaxgraph.rnglib.type_names import SplitPattern as SplitPattern
from flaxgraph.rnglib.type_names import StreamBackup as StreamBackup

SplitBackups = RngBackups  # Flax's name of what split_rngs/fork_rngs return in place
