"""What the all-reduce strategies should cost, and their measurements set beside it.

The strategies themselves are entries of the collectives registry
(`commbench.collectives.allreduce`, named in `commbench.collectives.specs.STRATEGIES`), run
by the worker like any op. This package sits above them and above the results: `model`
predicts each strategy with the alpha-beta cost model, `points` groups a run's measured
strategies once into `StrategyPoint` records beside the fitted model, and `report` lays them
out for the CLI (`report.strategy_tables` for the report). No torch here.
"""
