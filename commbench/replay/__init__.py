"""`commbench replay`: run a recorded trace's collectives on torchrun workers, step by step,
and compare the replayed communication time with the recorded one (docs/traces.md).

A package of its own, with this file: without it, `pip install .` left the directory out of the
wheel (setuptools finds only packages with an `__init__.py`, pyproject.toml says why), and every
command of such an install failed on importing `commbench.replay`.
"""
