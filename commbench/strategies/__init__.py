"""What the all-reduce strategies should cost, and their measurements set beside it.

The strategies themselves are entries of the collectives registry
(`commbench.collectives.allreduce`, named in `commbench.collectives.specs.STRATEGIES`), run
by the worker like any op. This package sits above them and above the results: `model`
predicts each strategy with the alpha-beta cost model, and `report` sets measurement and
prediction side by side. No torch here.
"""
