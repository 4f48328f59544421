"""matplotlib, headless, literal and without global state: how commbench's figures are made.

Figures are `matplotlib.figure.Figure` objects made directly, never through pyplot: pyplot
keeps a registry of open figures and a process-wide backend, and switching that backend to
Agg (as a headless tool must) would change a notebook's or a GUI's backend under the user of
the Python API. A Figure made directly needs no backend: `savefig` picks the writer for the
format (png, svg) by itself, and nothing has to be closed.

Every figure draws text a user chose (a run directory's name, a `--label`, a suite's name, a
host name): matplotlib would parse a `$...$` in any of it as mathtext (or hand it to LaTeX
when a user's matplotlibrc sets text.usetex), and raise on what does not parse (`\\frac{`).
`literal_text()` turns both off while a figure is drawn, for that figure's texts only (a text
keeps the setting it was made with), and leaves the user's rcParams as they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def new_figure(figsize: tuple[float, float]) -> Any:
    """A matplotlib Figure of that size in inches, in no pyplot registry."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


@contextmanager
def literal_text() -> Iterator[None]:
    """Texts made inside are drawn as written: no mathtext, no LaTeX."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        yield
