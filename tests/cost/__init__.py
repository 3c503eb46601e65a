"""The cost model: AWS requests counted per unit of work on the local stack, priced from a cited table.

`python -m tests.cost` imports the shared package's modules, which build their Powertools Metrics at import: the
template's Globals environment (the metrics namespace among it) is applied first, as the tests' conftest applies
it, or the endpoint's first request fails on a metric without a namespace."""

import tests.conftest  # noqa: F401 - applies the Globals environment on import
