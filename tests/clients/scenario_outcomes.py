"""One scenario's outcome in the client contract: what ``make clients`` reports per client.

``tests/clients/contract.py`` collects these from every client's scenarios (Tunix's and qwix's
programs, MaxText's ``maxtext_trainer.check(venv, subset)``) and prints them as one table per
client; any record with ``agreed=False`` makes the run fail.

Example::

    ScenarioOutcome("qwix", "ptq", True, "12 arrays equal at rtol 1e-5", 3.2)
"""

from __future__ import annotations

from typing import NamedTuple


class ScenarioOutcome(NamedTuple):
    """A scenario run on real Flax 0.12.8 and on flaxgraph (``flax.nnx`` bound by the drop-in).

    Fields:
      client: the client it drives ("tunix", "qwix", "maxtext").
      name: the scenario's name, unique within the client.
      agreed: both runs completed and their numbers (and checkpoint trees) agree.
      detail: what was compared, or what differed / which side failed and how.
      seconds: wall time of the scenario on both libraries together.
    """

    client: str
    name: str
    agreed: bool
    detail: str
    seconds: float
