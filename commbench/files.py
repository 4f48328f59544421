"""Reading the files users hand to commbench: every way it can fail is one clear line.

Snapshots, run files and suites come from other machines, CI artifacts and hand edits; a
directory, a missing file or a binary file given by mistake must say so, not raise.
"""

from __future__ import annotations

from pathlib import Path

from commbench.errors import UserError


def read_text(path: Path, what: str = "file", *, lenient: bool = False) -> str:
    """The text of `path` (UTF-8). `lenient` replaces undecodable bytes instead of refusing:
    for logs of other tools, whose stray bytes do not matter."""
    try:
        return path.read_text(encoding="utf-8", errors="replace" if lenient else "strict")
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a {what}") from None
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{path}: not a {what}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start]:#04x})"
        ) from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
