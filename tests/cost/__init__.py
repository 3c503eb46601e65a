"""The cost model: AWS requests counted per unit of work on the local stack, priced from a cited table."""
