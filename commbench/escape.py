"""A user's string in a file commbench writes: one function per format, which escapes the
string so that it reads back as itself, or refuses it with one line.

A file commbench generates (a Kubernetes manifest, an sbatch script, a markdown report, a
CSV table) is read by something else: kubectl, bash and sbatch, a markdown renderer, a
spreadsheet. A string that came from a user (a wrapped command's argument, a flag, a value in
a run.json someone else wrote) must reach that reader as one value of the writer's choosing,
never as the reader's own syntax: a line break in a YAML comment ends the comment and starts
the user's own document; one in a markdown paragraph starts the user's own heading. So no
writer puts a user's string into its text itself; it calls the one function here for its
format, and what that returns reads back as the string, exactly (or the function refuses).

"A line break" is every character some reader breaks a line at: not only `\\n` and `\\r`
but `\\v`, `\\f`, `\\x1c`-`\\x1e` (`str.splitlines`), NEL (U+0085, a line break to YAML 1.1),
and the Unicode line and paragraph separators (U+2028, U+2029: line breaks to YAML and to
JavaScript). Every control character (Unicode's Cc: C0, DEL and C1) is refused or escaped
with them, and so are the bidirectional controls (text that displays in another order than
it reads), lone surrogates (undecodable bytes of a command line, which no UTF-8 file can
hold) and the noncharacters U+FFFE and U+FFFF. The HTML report escapes with `html.escape`;
the Prometheus exposition (`results.openmetrics`) has its own escaping, as its format
defines."""

from __future__ import annotations

import math
import re
import shlex
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, get_args

from commbench.errors import UserError, quoted

LINE_BREAKS = "\n\x0b\x0c\r\x1c\x1d\x1e\x85\u2028\u2029"
"""Every character that `str.splitlines`, YAML or a Unicode-aware reader breaks a line at."""

# Unicode's Cc (C0, DEL, C1: a stable set), Zl (U+2028) and Zp (U+2029), the surrogates, the
# bidirectional formatting characters (ALM, LRM, RLM, LRE..RLO, LRI..PDI), and U+FFFE, U+FFFF
# (noncharacters, which YAML, for one, refuses to read)
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
    "\ufffe\uffff]"
)
_LINE_BREAK = re.compile(f"[{re.escape(LINE_BREAKS)}]")


def unsafe_character(text: str) -> str | None:
    """The first character of `text` that no generated file takes as it is (a line break,
    another control character, a bidirectional control, a lone surrogate, U+FFFE or U+FFFF);
    None if none."""
    found = _UNSAFE.search(text)
    return found.group(0) if found else None


def has_line_break(text: str) -> bool:
    """Whether any reader (`str.splitlines`, YAML, a Unicode-aware one) sees a line break."""
    return _LINE_BREAK.search(text) is not None


_C0_NAMES = {"\n": "LINE FEED", "\r": "CARRIAGE RETURN", "\t": "TAB", "\x85": "NEXT LINE"}
"""Names of the controls Unicode's database leaves unnamed, where a message names them."""


def describe(char: str) -> str:
    """`U+2028 LINE SEPARATOR, a line break`: a character named for a one-line message."""
    name = unicodedata.name(char, "") or _C0_NAMES.get(char, "")
    if char in LINE_BREAKS:
        what = "a line break"
    elif "\ud800" <= char <= "\udfff":
        what = "a lone surrogate (bytes that are not UTF-8)"
    elif unicodedata.category(char) == "Cf":
        what = "a bidirectional control"
    elif unicodedata.category(char) == "Cn":
        what = "a noncharacter"
    else:
        what = "a control character"
    return f"U+{ord(char):04X}{' ' + name if name else ''}, {what}"


def refuse_unsafe(what: str, text: str) -> str:
    """`text` unchanged, or UserError naming `what` and its first unsafe character."""
    char = unsafe_character(text)
    if char is None:
        return text
    raise UserError(f"{what} {quoted(text)} holds {describe(char)}")


def visible(text: str) -> str:
    """`text` with every unsafe character written as its escape (`\\u2028`): for a comment or
    a message, which must stay one line and show what was given."""
    return _UNSAFE.sub(lambda m: repr(m.group(0))[1:-1], text)


# -- YAML ---------------------------------------------------------------------------------------


def yaml_documents(documents: Sequence[Mapping[str, Any]], comments: Sequence[str] = ()) -> str:
    """A YAML stream of `documents` under `comments` (one `#` line each, shown `visible`):
    written by yaml.safe_dump_all (every string a scalar it quotes as it needs, everything
    outside ASCII escaped), then read back with yaml.safe_load_all, and refused (UserError)
    unless it reads back as exactly `documents`, every string as given."""
    import yaml

    head = "".join(f"# {visible(line)}\n" for line in comments)
    body = yaml.safe_dump_all(
        list(documents), sort_keys=False, default_flow_style=False, allow_unicode=False
    )
    text = head + body
    try:
        back = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise UserError(f"the YAML written does not read back: {visible(str(exc))}") from None
    if _typed(back) != _typed(list(documents)):
        raise UserError("the YAML written does not read back as the values given; not written")
    return text


def _typed(value: Any) -> Any:
    """`value` with each scalar's type beside it: True and 1, or 1 and 1.0, differ here."""
    if isinstance(value, Mapping):
        return [(_typed(k), _typed(v)) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


# -- shell (sbatch) -----------------------------------------------------------------------------


def shell_words(args: Iterable[str], what: str = "an argument") -> str:
    """`args` as one line of bash words, each quoted (shlex.quote: single quotes, inside
    which bash takes every character as itself) where it needs it; UserError for an argument
    with an unsafe character: a line break would end the script's command line."""
    return " ".join(shlex.quote(refuse_unsafe(what, arg)) for arg in args)


def sbatch_directive(option: str, value: str | int, grammar: re.Pattern[str]) -> str:
    """`#SBATCH --option=value`, with `value` an int (not a bool) or a string `grammar`
    matches whole, as it is (nothing stripped); UserError otherwise. sbatch reads these
    lines before the script runs: a value it would read otherwise must not be written."""
    if type(value) is int:
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        raise UserError(f"#SBATCH --{option}: expected text or a whole number, got {value!r}")
    if unsafe_character(text) is not None or not grammar.fullmatch(text):
        raise UserError(f"#SBATCH --{option}={quoted(text)} is not a value sbatch takes")
    return f"#SBATCH --{option}={text}"


# -- markdown -----------------------------------------------------------------------------------

# Where a string sits in a markdown line decides what of it makes syntax:
#   block: a paragraph or a list item, which it starts;  bold: the same, inside `**...**`;
#   cell:  a table cell or a heading (no block starts there);
#   link:  a link's text or an image's alt text (in a cell).
MarkdownPlace = Literal["block", "bold", "cell", "link"]
MARKDOWN_PLACES: tuple[MarkdownPlace, ...] = get_args(MarkdownPlace)

# What makes syntax anywhere (CommonMark, GitHub's tables): each character matched is
# written with a backslash, which CommonMark takes as "this character itself" before any
# ASCII punctuation. Each is matched only where it would make syntax, so that `0->5`,
# `a < b`, `R&D`, `[0000:1b:00]` or `GPU#0` stay as they read.
_MD_ANYWHERE = "|".join(
    [
        r"\\",  # a backslash: it would escape what follows, or what this writes after it
        r"\|",  # a table cell's end
        r"<(?=[A-Za-z/!?])",  # an HTML tag, comment or autolink
        r"&(?=#|[A-Za-z0-9]+;)",  # a character reference
        r"\](?=[(\[:])",  # a link's or an image's end, a reference's, a definition's
        r"#(?=#*[ \t]*$)",  # a heading's closing sequence
    ]
)
# What makes syntax only in pairs (a code span, emphasis, GitHub's strikethrough and
# $math$, a fence of three): escaped where the text holds two or more of one of them
_MD_PAIRED = "`*~$"
# `_` opens emphasis only at a word's edge: snake_case names stay as they read
_MD_UNDERSCORE = r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])"
# What starts a block at the start of a paragraph or list item: a heading, a block quote, a
# list item (`- `, `+ `, `* `, `1. `, `1) `), a thematic break (`---`, `- - -`)
_MD_BLOCK_START = re.compile(
    r"^(?:#{1,6}(?=[ \t]|$)|>|[-+*](?=[ \t]|$)|-(?=[- \t]*$)|[0-9]{1,9}(?=[.)](?:[ \t]|$)))"
)


def markdown_text(text: str, *, where: MarkdownPlace = "block") -> str:
    """`text` as markdown inline text that renders as `text` and nothing else, at `where`
    (`MARKDOWN_PLACES`: a paragraph or list item, a bold one, a table cell or heading, a
    link's text): one line (every line break a space), the punctuation that would make
    syntax there backslash-escaped (no heading, list, quote, table cell, code span, link,
    emphasis or HTML of the text's own), other unsafe characters as numeric character
    references. For every string commbench did not write itself in a markdown file."""
    if where not in MARKDOWN_PLACES:
        raise ValueError(f"markdown_text: where is one of {MARKDOWN_PLACES}, not {where!r}")
    one_line = _LINE_BREAK.sub(" ", text)
    # inside `**...**` a lone `*` closes or opens; in a link's text a bracket ends it
    paired = [c for c in _MD_PAIRED if one_line.count(c) > 1 or (c == "*" and where == "bold")]
    syntax = [_MD_ANYWHERE, _MD_UNDERSCORE]
    if paired:
        syntax.append(f"[{re.escape(''.join(paired))}]")
    if where == "link":
        syntax.append(r"[\[\]]")
    escaped = re.sub("|".join(syntax), lambda m: "\\" + m.group(0), one_line)
    if where in ("block", "bold"):
        start = _MD_BLOCK_START.match(escaped)
        if start is not None:  # `\- x`, `1\. x`: the character that makes the block, escaped
            at = start.end() if start.group(0)[0].isdigit() else 0
            escaped = escaped[:at] + "\\" + escaped[at:]
        # leading blanks would make an indented code block, and a paragraph loses its
        # blanks at both ends: as references they are text
        body = escaped.strip(" \t")
        if body:
            head, tail = escaped[: escaped.index(body)], escaped[escaped.index(body) + len(body) :]
        else:
            head, tail = escaped, ""
        escaped = _references(head) + body + _references(tail)
    return _UNSAFE.sub(lambda m: _references(m.group(0)), escaped)


def _references(text: str) -> str:
    return "".join(f"&#x{ord(c):X};" for c in text)


def markdown_fence(text: str) -> str:
    """`text` as a fenced code block that shows it line for line: the fence longer than any
    run of backticks in it (so no line of it closes the block), every other line break and
    unsafe character written as its escape (`visible`), since a code block takes no
    character references."""
    lines = [visible(line) for line in text.split("\n")]
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return "\n".join([fence, *lines, fence])


# -- XML (JUnit) --------------------------------------------------------------------------------

# What XML 1.0 cannot hold at all, not even as a character reference
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str, *, attribute: bool = False) -> str:
    """`text` as XML character data (`attribute`: a quoted attribute value, quotes and
    line breaks included): `<`, `&`, `>` as references, and what XML 1.0 cannot hold at all
    (most C0 controls, lone surrogates) written as its escape (`\\x1b`), so that every XML
    reader (a CI server's JUnit reader) takes the file."""
    from xml.sax.saxutils import escape, quoteattr

    legal = _XML_ILLEGAL.sub(lambda m: repr(m.group(0))[1:-1], text)
    if attribute:
        return quoteattr(legal, {"\n": "&#10;", "\r": "&#13;", "\t": "&#9;"})
    return escape(legal, {"\r": "&#13;"})


# -- CSV ----------------------------------------------------------------------------------------

_CSV_QUOTE = re.compile(f'[,"]|{_UNSAFE.pattern}')


def csv_field(value: Any) -> str:
    """One CSV field (RFC 4180): None and a non-finite float empty (as null in JSON), any
    other value as `str` gives it, in double quotes (a quote doubled) when it holds a comma,
    a quote or any character some reader breaks a line at, so that every reader sees one
    field and one record per line."""
    if value is None or (type(value) is float and not math.isfinite(value)):
        return ""
    text = str(value)
    if _CSV_QUOTE.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_line(values: Iterable[Any]) -> str:
    """One CSV record, its fields through `csv_field`, ending in `\\n` (a record of one
    empty field is `""`: an empty line is no record to a reader)."""
    fields = [csv_field(v) for v in values]
    return (",".join(fields) if fields != [""] else '""') + "\n"
