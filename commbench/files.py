"""Reading the files users hand to commbench: every way it can fail is one clear line.

Snapshots, run files, suites and logs come from other machines, CI artifacts and hand edits;
a directory, a FIFO, a missing file, an over-long name, a binary file, JSON nested 20,000
levels deep or an integer of 5,000 digits given by mistake must say so in one line, never
raise or hang. Every file commbench reads goes through `read_text`, and every JSON or YAML
document through `parse_json` / `parse_yaml`, which bound its size, depth and numbers.
Every JSON document commbench writes goes through `dump_json`, which writes strict JSON.
"""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from commbench.errors import UserError

# Bounds on what is read. Nothing commbench writes comes near them (a run.json is kilobytes, a
# results.json of a full sweep with every sample a few megabytes); they only stop a wrong or
# hostile file from costing minutes and gigabytes before it is refused.
MAX_FILE_BYTES = 256 << 20
"""Largest file read: an nccl-tests log with NCCL_DEBUG=INFO from a big job fits easily."""
MAX_DEPTH = 64
"""Deepest nesting of a JSON or YAML document; commbench's own files nest under 10 levels."""
MAX_INT_DIGITS = 100
"""Longest integer literal; a byte count or a rank fits in 20 digits."""
MAX_CONTAINERS = 2_000_000
"""Objects and arrays in one JSON document: far more than any file commbench reads holds
(a run of thousands of points has some tens of thousands), and an empty `{}` costs three
bytes of text but about 100 of memory, so 256 MiB of them would take tens of GB to parse."""

_SHOWN_PATH = 200  # characters of a path an error message shows

_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def shown(path: Path | str) -> str:
    """`path` for an error message: shortened in the middle when it is absurdly long, so the
    message stays one readable line."""
    text = str(path)
    if len(text) <= _SHOWN_PATH:
        return text
    half = _SHOWN_PATH // 2 - 2
    return f"{text[:half]}...{text[-half:]}"


def os_error(path: Path | str, exc: OSError, what: str = "file") -> UserError:
    """One line for an OSError on `path` (missing, too long a name, a loop of links, ...)."""
    code = exc.errno
    if code == errno.ENOENT:
        return UserError(f"{shown(path)}: no such {what}")
    if code == errno.ENOTDIR:
        return UserError(f"{shown(path)}: no such {what} (a part of the path is not a directory)")
    if code == errno.ENAMETOOLONG:
        return UserError(f"{shown(path)}: file name too long (over 255 bytes in one part)")
    if code == errno.EISDIR:
        return UserError(f"{shown(path)}: is a directory, expected a {what}")
    return UserError(f"{shown(path)}: cannot read: {exc.strerror or exc}")


def _special(mode: int) -> str | None:
    """What a non-regular, non-directory file is ('a FIFO (named pipe)'), else None."""
    return next((name for test, name in _FILE_KINDS if test(mode)), None)


def path_kind(path: Path | str, what: str = "file") -> str:
    """'file', 'dir' or 'missing'; anything else (a FIFO, a device) or an OS error on the path
    (a name over 255 bytes, a loop of links, no permission) is a UserError.

    Use it instead of Path.is_file()/is_dir()/exists(), which raise on some of these errors
    and say "yes, a file" to a FIFO that then blocks the reader forever.
    """
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as exc:
        raise os_error(path, exc, what) from None
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    raise UserError(
        f"{shown(path)}: is {_special(mode) or 'not a regular file'}, expected a {what}"
    )


def read_bytes(path: Path | str, what: str = "file", *, limit: int | None = None) -> bytes:
    """The bytes of the regular file `path`, at most `limit` (MAX_FILE_BYTES) of them.

    Only a regular file is opened for reading: a FIFO would block the open (or, opened with
    O_NONBLOCK, read as empty or fail with EAGAIN, so its content would be wrong either way)
    and a device can be endless. `path_kind` refuses those before anything is opened, and the
    open itself is non-blocking and checked again with fstat, so a file swapped for a FIFO in
    between cannot hang us either.
    """
    limit = MAX_FILE_BYTES if limit is None else limit
    kind = path_kind(path, what)
    if kind == "missing":
        raise UserError(f"{shown(path)}: no such {what}")
    if kind == "dir":
        raise UserError(f"{shown(path)}: is a directory, expected a {what}")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise os_error(path, exc, what) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"{shown(path)}: is not a regular file, expected a {what}")
        if info.st_size > limit:
            raise _too_big(path, what, limit)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            # what the file holds and a byte more, not the limit: a read allocates its size
            data = fh.read(info.st_size + 1)
            if len(data) > info.st_size:  # it grew, or says 0 (/proc): on to the limit
                data += fh.read(limit + 1 - len(data))
    except OSError as exc:
        raise os_error(path, exc, what) from None
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while we read it
        raise _too_big(path, what, limit)
    return data


def _too_big(path: Path | str, what: str, limit: int) -> UserError:
    return UserError(f"{shown(path)}: larger than {limit >> 20} MiB: not a {what} commbench reads")


def decode(data: bytes, where: str, what: str = "file", *, lenient: bool = False) -> str:
    """UTF-8 text of `data`, without the byte-order mark an editor may put first (it is no
    part of the text, and a reader that looks at the first character would take it for
    one); `lenient` replaces undecodable bytes instead of refusing (for logs of other tools,
    whose stray bytes do not matter)."""
    try:
        text = data.decode("utf-8", errors="replace" if lenient else "strict")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{where}: not a {what}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start]:#04x})"
        ) from None
    return text.removeprefix("\ufeff")


def read_text(
    path: Path | str, what: str = "file", *, lenient: bool = False, limit: int | None = None
) -> str:
    """The UTF-8 text of the regular file `path` (see `read_bytes` and `decode`)."""
    return decode(read_bytes(path, what, limit=limit), shown(path), what, lenient=lenient)


def read_stdin(what: str, *, limit: int | None = None) -> str:
    """Standard input as text (lenient), at most `limit` (MAX_FILE_BYTES) bytes: `-` for a
    file name. Every reader of `-` comes here, so stdin closed (`0<&-`), a terminal (a read
    would wait for typing, a hang to whoever forgot the pipe) and empty input are each one
    line, UserError, like a file that is missing or empty."""
    limit = MAX_FILE_BYTES if limit is None else limit
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise UserError(f"- names stdin for the {what}, but stdin is closed: pipe the {what} in")
    try:
        if stream.isatty():
            raise UserError(
                f"- names stdin for the {what}, but stdin is a terminal: pipe the {what} in "
                "(... | commbench ... -) or give its path"
            )
        data = stream.read(limit + 1)
    except (OSError, ValueError) as exc:  # a closed or unreadable descriptor
        raise UserError(f"cannot read the {what} from stdin: {exc}") from None
    if len(data) > limit:
        raise _too_big("<stdin>", what, limit)
    if not data.strip():
        raise UserError(f"<stdin>: the {what} is empty")
    return decode(data, "<stdin>", what, lenient=True)


def write_text(path: Path | str, text: str) -> None:
    """Write `text` (UTF-8) to `path`: see `write_bytes`."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path | str, data: bytes) -> None:
    """Write `data` to `path` where a user asked for it (`--out FILE`): a regular file,
    or a FIFO or device such as /dev/stdout. A FIFO nobody reads would block the open forever,
    so it is opened non-blocking and refused at once; any OSError is one line naming `path`."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK
    flags |= getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UserError(
                f"cannot write {shown(path)}: it is a FIFO that no process is reading"
            ) from None
        raise UserError(f"cannot write {shown(path)}: {exc.strerror or exc}") from None
    try:
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb", closefd=False) as fh:
            fh.write(data)
    except OSError as exc:
        raise UserError(f"cannot write {shown(path)}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


# -- JSON --------------------------------------------------------------------------------------


class _Refused(ValueError):
    """Raised from inside the JSON decoder's hooks; `parse_json` turns it into one line."""


def _parse_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {digits} digits (more than {MAX_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None  # 1e400: as NaN and Infinity below


def _parse_constant(name: str) -> None:
    """NaN, Infinity, -Infinity are not JSON; older commbench and other tools wrote them.
    They read as null, which is how commbench writes a value that is not a finite number."""
    return None


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all different: JSON leaves a key given twice to the reader
    (Python keeps the last), so a file that says two things is refused, as YAML's are."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _Refused(f"the key {twice!r} given twice in one object")
    return data


def parse_json(text: str, where: str) -> Any:
    """A JSON document, bounded: UserError naming `where` when it is not strict enough JSON,
    nests deeper than MAX_DEPTH or holds an integer longer than MAX_INT_DIGITS. Non-finite
    numbers (NaN, Infinity, 1e400) read as None."""
    # counted in the text before parsing (an overcount: a brace inside a string counts too)
    containers = text.count("{") + text.count("[")
    if containers > MAX_CONTAINERS:
        raise UserError(
            f"{where}: more than {MAX_CONTAINERS:,} objects and arrays: not a file commbench reads"
        )
    try:
        data = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
            object_pairs_hook=_object,
        )
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except _Refused as exc:
        raise UserError(f"{where}: not a file commbench reads: {exc}") from None
    except RecursionError:
        raise _too_deep(where) from None
    # a document of at most MAX_DEPTH containers cannot nest deeper, nor can JSON hold a
    # value inside itself: the walk is left to the larger ones (it was a quarter of the time
    # replay took to read a trace, one small document a line)
    if containers > MAX_DEPTH:
        check_depth(data, where)
    return data


def _too_deep(where: str) -> UserError:
    return UserError(f"{where}: nested deeper than {MAX_DEPTH} levels: not a file commbench reads")


def check_depth(data: Any, where: str) -> None:
    """Refuse a parsed document nested deeper than MAX_DEPTH, or holding itself (YAML aliases
    can build both without nesting in the text). Walked without recursion, each container
    once (aliases share them), so neither this walk nor any recursive code that reads the
    document later can exhaust the stack or expand a billion laughs."""
    depth: dict[int, int] = {}  # id -> height of the container, once known
    open_: set[int] = set()  # containers whose children are still being measured
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        value, children_done = stack.pop()
        children = _children(value)
        if children is None:
            continue
        key = id(value)
        if children_done:
            height = 1 + max((depth.get(id(c), 0) for c in children), default=0)
            if height > MAX_DEPTH:
                raise _too_deep(where)
            depth[key] = height
            open_.discard(key)
            continue
        if key in depth:
            continue
        if key in open_:
            raise UserError(f"{where}: a value that contains itself: not a file commbench reads")
        open_.add(key)
        stack.append((value, True))
        stack.extend((c, False) for c in children if id(c) not in depth)


_SCALARS = frozenset({float, int, str, bool, type(None)})
_CONTAINERS = (dict, list)


def _children(value: Any) -> list[Any] | None:
    """The dicts and lists directly inside `value` (None if it is neither). A value of a
    scalar's exact type is passed over before `isinstance`: most of a run's values are the
    samples' floats, and `isinstance` against `dict | list` for each was most of the walk
    (the walk of a 60 KB results.json took 3.3 ms, 1.2 ms now)."""
    if isinstance(value, dict):
        values: Iterable[Any] = value.values()
    elif isinstance(value, list):
        values = value
    else:
        return None
    return [v for v in values if type(v) not in _SCALARS and isinstance(v, _CONTAINERS)]


def load_json(path: Path | str, what: str = "JSON file") -> Any:
    """`read_text` then `parse_json`: any JSON document, checked for nothing but its form."""
    return parse_json(read_text(path, what), shown(path))


def _finite(value: Any) -> Any:
    """A copy of `value` with every non-finite float replaced by None (only containers that
    hold one are rebuilt)."""
    if type(value) is float:
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def dump_json(data: Any, *, indent: int | None = 2) -> str:
    """Strict JSON text of `data`, ending in a newline: NaN and infinities are written as null
    (the one way commbench writes a value that is not a finite number, in every file; CSV
    files leave the cell empty), so any JSON reader, not only Python's, can load it."""
    try:  # most data holds no such float: the encoder checks that as it writes
        text = json.dumps(data, indent=indent, default=_json_default, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(data), indent=indent, default=_json_default, allow_nan=False)
    return text + "\n"


# -- YAML --------------------------------------------------------------------------------------


@functools.cache
def _yaml_loader() -> type:
    """A SafeLoader that keeps safe_load's semantics and also refuses duplicate keys (a second
    `topo:` silently replacing the first hides a mistake), documents nested deeper than
    MAX_DEPTH and integers longer than MAX_INT_DIGITS. Built on first use: yaml is imported
    lazily so that `import commbench` stays fast."""
    import yaml
    from yaml.constructor import ConstructorError
    from yaml.nodes import MappingNode, ScalarNode

    class BoundedSafeLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise ConstructorError(
                        None, None, f"nested deeper than {MAX_DEPTH} levels", mark
                    )
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue  # `<<:` merges; its keys may be overridden by design
                    key = self.construct_object(key_node, deep=True)
                    try:
                        duplicate = key in seen
                    except TypeError:
                        continue  # unhashable: SafeLoader refuses it with its own message
                    if duplicate:
                        raise ConstructorError(
                            "while constructing a mapping",
                            node.start_mark,
                            f"duplicate key {key!r}",
                            key_node.start_mark,
                        )
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_int(self, node: Any) -> Any:
            if isinstance(node, ScalarNode) and len(node.value) > MAX_INT_DIGITS:
                raise ConstructorError(
                    None,
                    None,
                    f"an integer of {len(node.value)} characters (more than {MAX_INT_DIGITS})",
                    node.start_mark,
                )
            return super().construct_yaml_int(node)

    BoundedSafeLoader.add_constructor("tag:yaml.org,2002:int", BoundedSafeLoader.construct_yaml_int)
    return BoundedSafeLoader


def parse_yaml(text: str, where: str) -> Any:
    """A YAML document read like `yaml.safe_load`, bounded (see `_yaml_loader`): UserError
    naming `where` and the line, in one line, for anything it refuses."""
    import yaml

    loader = None
    try:
        loader = _yaml_loader()(text)  # the reader checks the characters here already
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f" (line {mark.line + 1})" if mark is not None else ""
        problem = exc.problem or exc.context or "malformed"
        raise UserError(f"{where}: not valid YAML{at}: {_one_line(problem)}") from None
    except yaml.reader.ReaderError as exc:  # its str() spans two lines
        raise UserError(
            f"{where}: not valid YAML (character {exc.position}): {_one_line(exc.reason)}"
        ) from None
    except yaml.YAMLError as exc:
        raise UserError(f"{where}: not valid YAML: {_one_line(str(exc))}") from None
    except RecursionError:
        raise _too_deep(where) from None
    finally:
        if loader is not None:
            loader.dispose()
    check_depth(data, where)
    return data


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def load_yaml(path: Path | str, what: str = "YAML file") -> Any:
    """`read_text` then `parse_yaml`."""
    return parse_yaml(read_text(path, what), shown(path))
