"""The cost model: AWS requests counted per unit of work on the local stack, priced from a cited table.

`python -m tests.cost` imports the shared package's modules, which build their Powertools Metrics at import: the
template's Globals environment (the metrics namespace among it) is applied first, as the tests' conftest applies
it, or the endpoint's first request fails on a metric without a namespace."""

import os

from devstack.stack.template import globals_environment

for _name, _value in globals_environment().items():
    os.environ.setdefault(_name, _value)
