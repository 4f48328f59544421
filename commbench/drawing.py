"""matplotlib, headless and literal: the one way commbench's figures get pyplot.

Every figure draws text a user chose (a run directory's name, a `--label`, a suite's name, a
host name): matplotlib would parse a `$...$` in any of it as mathtext, and raise on what does
not parse (`\\frac{`). Here mathtext is off, so every text is drawn as written; commbench's own
labels use none.
"""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """`matplotlib.pyplot` on the Agg backend (no display needed), mathtext off."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt
