"""A user's string in every file commbench generates (`commbench.escape`): the Kubernetes
manifest, the sbatch script, the markdown (and HTML) report, CSV. Each writer is given the
same hostile strings (every line and paragraph separator, every control character, quotes,
YAML's and markdown's and the shell's syntax, non-BMP characters) and must write a file that
reads back, by the reader it is written for, with the string as itself and nothing of the
string's own making; or refuse it with one line and exit 2."""

from __future__ import annotations

import csv
import functools
import html
import io
import itertools
import json
import random
import re
import shlex
import shutil
import subprocess
import tempfile
import unicodedata
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from markdown_it import MarkdownIt
from markdown_it.token import Token
from typer.testing import CliRunner

from commbench.cli import app
from commbench.errors import UserError
from commbench.escape import (
    LINE_BREAKS,
    MARKDOWN_PLACES,
    csv_line,
    has_line_break,
    markdown_fence,
    markdown_text,
    sbatch_directive,
    shell_words,
    unsafe_character,
    visible,
    yaml_documents,
)
from commbench.launch.slurm import TIME_GRAMMAR, parse_time
from commbench.report.blocks import Bullets, Contents, Heading, Image, Para, Pre, Table
from commbench.report.writers import to_html, to_markdown
from commbench.tables import Document, csv_document

IMAGE = "ghcr.io/acme/commbench:0.1"
GOLDEN = Path(__file__).parent / "fixtures" / "runs" / "cpu-gloo-a"

EVERY = "".join(map(chr, range(0x110000)))
"""Every code point, once, in order: the sets below are read off it in C loops (a Python
loop over 1.1 million code points, three times, was half a second of collection)."""
_CATEGORIES = list(map(unicodedata.category, EVERY))
SEPARATORS = list(itertools.compress(EVERY, map({"Zl", "Zp"}.__contains__, _CATEGORIES)))
CONTROLS = list(itertools.compress(EVERY, map("Cc".__eq__, _CATEGORIES)))
"""Unicode's Cc: C0, DEL and the C1 controls (NEL, U+0085, among them)."""
SPLITLINES = [line[-1] for line in EVERY.splitlines(keepends=True)[:-1]]
"""What `str.splitlines` breaks at: each line of EVERY but the last ends in one (none in
a CR LF pair: LF, U+000A, comes before CR, U+000D)."""

SYNTAX = [
    "",
    " ",
    "  lead and trail  ",
    "---",
    "...",
    "--- !!python/object/apply:os.system ['id']",
    "kind: Secret",
    "{a: 1}",
    "[1, 2]",
    "*alias",
    "&anchor x",
    "!!binary aGk=",
    "? key",
    "yes",
    "null",
    "~",
    "0x1F",
    "1e3",
    "'single'",
    '"double"',
    "a'b\"c",
    "# comment",
    "a # not a comment",
    "- item",
    "1. item",
    "| pipe | table |",
    "> quote",
    "```fence",
    "~~~",
    "`code`",
    "**bold** _em_ ~~strike~~ $math$",
    "[link](javascript:alert(1))",
    "![img](http://x/y.png)",
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "&amp; &#x41; &lt;",
    "\\escaped\\",
    "$(id)",
    "${HOME}",
    "$HOME $$ $((1+1))",
    "`id`",
    "; rm -rf / #",
    "&& true || false",
    "a | b > c < d",
    "#SBATCH --nodes=99",
    "%x %j %%",
    "ü é 中文",
    "😀 \U0001f600 \U0010fffd",
    "\ufeffbom",
    "x" * 300,
]
"""Strings every reader takes as they are, which a writer must quote as its format says."""

HOSTILE_BREAKS = [
    *(f"x{c}---{c}kind: Pod{c}spec: {{hostPID: true}}" for c in SEPARATORS),
    *(f"x{c}# heading{c}<script>alert(1)</script>" for c in ("\n", "\r", "\x85", *SEPARATORS)),
    *(f"a{c}b" for c in CONTROLS),
    "bidi \u202eevil\u202c",
    "surrogate \udcff",
    "nonchar \uffff",
]
"""Strings that hold what some reader takes as a line break or as a control."""

HOSTILE = SYNTAX + HOSTILE_BREAKS
CLI_BREAKS = [t for t in HOSTILE_BREAKS if len(t) > 3 or ord(t[1]) % 5 == 0]
"""What a command line is tried with (each is refused by one check, which
`test_every_line_break_and_control_of_any_reader_is_unsafe` tries on every character): the
separators, YAML's and markdown's breaks, and every fifth control."""


def one_line_error(result: Any) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("commbench: error: ") and result.stderr.count("\n") == 1
    assert len(result.stderr.splitlines()) == 1  # no character of the input broke it


# -- the characters ------------------------------------------------------------------------------


def test_every_line_break_and_control_of_any_reader_is_unsafe() -> None:
    """Unicode's Cc, Zl and Zp, everything str.splitlines breaks at, and YAML's own breaks."""
    yaml_breaks = [c for c in "\r\n\x85\u2028\u2029" if len(yaml.safe_load(f"a: 1{c}b: 2")) == 2]
    assert yaml_breaks == list("\r\n\x85\u2028\u2029")  # what YAML 1.1 breaks a line at
    breaks = {*SEPARATORS, *SPLITLINES, *yaml_breaks}
    assert breaks == set(LINE_BREAKS)
    for char in breaks:
        assert has_line_break(f"a{char}b") and unsafe_character(f"a{char}b") == char
    for char in [*CONTROLS, "\ud800", "\udfff", "\u202e", "\u2066", "\ufffe", "\uffff"]:
        assert unsafe_character(f"a{char}b") == char
    for text in SYNTAX:
        assert unsafe_character(text) is None and not has_line_break(text)
    assert "\n" not in visible("".join(HOSTILE_BREAKS)) and visible("a\u2028b") == "a\\u2028b"


# -- YAML: the Kubernetes manifest ---------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE, ids=ascii)
def test_yaml_reads_back_every_string_as_given_under_any_comment(text: str) -> None:
    documents = [
        {"kind": "ConfigMap", "data": {text: text, "list": [text, {"n": text}]}},
        {"kind": "Pod", "args": [text]},
    ]
    written = yaml_documents(documents, [f"made from {text}", text])
    assert list(yaml.safe_load_all(written)) == documents  # exactly these two, each as given
    lines = written.splitlines()  # every reader's line breaks
    assert lines[0].startswith("# made from ") and lines[1].startswith("#")
    assert not any(line.startswith("#") for line in lines[2:])


def test_yaml_that_does_not_read_back_is_refused() -> None:
    with pytest.raises(UserError, match="does not read back"):
        yaml_documents([{"a": float("nan")}])  # read back as a NaN, which equals nothing


def k8s(*args: str) -> Any:
    return CliRunner().invoke(app, ["k8s-manifest", "--image", IMAGE, *args])


@pytest.mark.parametrize(
    ("kind", "text"),
    [*(("job", t) for t in SYNTAX + CLI_BREAKS), *(("jobset", t) for t in SYNTAX)],
    ids=ascii,
)
def test_the_manifest_holds_an_argument_exactly_or_refuses_it(kind: str, text: str) -> None:
    out = f"results/{text}"
    result = k8s("--kind", kind, "--gpus-per-node", "0", "--", "collectives", "--out", out)
    if unsafe_character(text) is not None:
        one_line_error(result)
        # a NUL is refused where the arguments enter (commbench.arguments), before the writer
        assert "argument 2 holds U+" in result.stderr or "holds a NUL" in result.stderr
        return
    assert result.exit_code == 0, result.output
    documents = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in documents] == (
        ["JobSet"] if kind == "jobset" else ["Service", "Job"]
    )
    spec = documents[-1]["spec"]
    if kind == "jobset":
        spec = spec["replicatedJobs"][0]["template"]["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    args = container["args"]
    # Kubernetes turns `$$` into `$` and expands nothing else of the user's
    assert args[args.index("--out") + 1] == out.replace("$", "$$")
    assert args[0] == "collectives" and container["command"] == ["commbench"]


# -- sbatch: the script --------------------------------------------------------------------------


def slurm(*args: str) -> Any:
    return CliRunner().invoke(app, ["slurm-script", *args])


SRUN = ["srun", "--ntasks-per-node=1", "--cpu-bind=none", "commbench"]
SRUN_STUB = 'srun() { printf "%s\\0" "$@"; }'
DIRECTIVE = re.compile(r"#SBATCH --[a-z-]+=[A-Za-z0-9_.,:%-]+|#SBATCH --[a-z]+")


@functools.cache
def sbatch(text: str) -> str:
    result = slurm("-p", "gpu", "--", "collectives", "--out", f"results/{text}")
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("text", SYNTAX, ids=ascii)
def test_the_script_s_command_line_is_the_wrapped_command_word_for_word(text: str) -> None:
    script = sbatch(text)
    assert script.endswith("\n") and not script.endswith("\n\n")  # one newline at the end
    lines = script.splitlines()
    assert len(lines) == len(sbatch("x").splitlines())  # no line of the string's own
    assert all(DIRECTIVE.fullmatch(line) for line in lines if line.startswith("#SBATCH"))
    command = shlex.split(lines[-1])  # a POSIX shell's words
    assert command == [*SRUN, "collectives", "--out", f"results/{text}"]


@pytest.mark.parametrize("text", CLI_BREAKS, ids=ascii)
def test_a_wrapped_argument_with_a_line_break_or_control_is_refused(text: str) -> None:
    one_line_error(slurm("--", "collectives", "--out", f"results/{text}"))


@pytest.mark.integration
def test_bash_runs_the_script_s_command_line_with_the_arguments_as_given(tmp_path: Path) -> None:
    """bash itself parses each script (`bash -n`), then runs it with `srun` a function that
    prints its arguments: they are the wrapped command's, word for word. (`commbench` a
    function too, for the script's check that the nodes have it on their PATH.)"""
    bash = shutil.which("bash")
    assert bash is not None
    for i, text in enumerate(SYNTAX):
        path = tmp_path / f"job{i}.sbatch"
        path.write_text(sbatch(text))
        subprocess.run([bash, "-n", str(path)], check=True, timeout=30)
        argv = subprocess.run(
            [bash, "-c", f'commbench() {{ :; }}; {SRUN_STUB}; source "$1"', "bash", str(path)],
            check=True,
            capture_output=True,
            timeout=30,
        ).stdout
        words = argv.decode("utf-8", "surrogateescape").split("\0")[:-1]
        assert words == [*SRUN[1:], "collectives", "--out", f"results/{text}"], text


TIMES = ["30", "00:30:00", "90:00", "1-00", "1-23:59", "2-12:00:00", "365-00", "INFINITE"]
BLANKS = [" ", "\t", "\u00a0", "\u3000"]


@pytest.mark.parametrize("time_limit", [*TIMES, "infinite", "Unlimited"])
def test_every_slurm_time_form_is_written_as_given(time_limit: str) -> None:
    result = slurm("--time", time_limit)
    assert result.exit_code == 0, result.output
    assert f"\n#SBATCH --time={time_limit}\n" in result.stdout


@pytest.mark.parametrize(
    "time_limit",
    ["10\x1f", "10\u2028", "\x8510", " 10", "10 ", "10\n", "\n10", "1-\u20282", "1:2\x00"],
    ids=ascii,
)
def test_a_time_with_anything_around_it_is_refused(time_limit: str) -> None:
    """The issue's cases: the parser stripped what the script then wrote."""
    result = slurm("--time", time_limit)
    one_line_error(result)
    assert "is not a SLURM time" in result.stderr or "holds a NUL" in result.stderr


def test_no_separator_or_blank_anywhere_in_a_time_is_taken() -> None:
    for time_limit in TIMES:
        for char in [*CONTROLS, *SEPARATORS, *BLANKS, "\ufeff", "\u0663"]:
            for wrong in (
                time_limit + char,
                char + time_limit,
                time_limit[:1] + char + time_limit[1:],
            ):
                assert TIME_GRAMMAR.fullmatch(wrong) is None, ascii(wrong)
                with pytest.raises(UserError, match="is not a SLURM time"):
                    parse_time(wrong)
    # Unicode's case folding is not sbatch's: a dotless i is no i
    for wrong in ("\u0131nf\u0131n\u0131te", "INF\u0130N\u0130TE", "\u212a"):
        with pytest.raises(UserError):
            parse_time(wrong)


@pytest.mark.parametrize(("flag", "good"), [("--job-name", "bench_1.a"), ("-p", "gpu,debug")])
def test_names_on_sbatch_lines_are_matched_whole(flag: str, good: str) -> None:
    assert slurm(flag, good).exit_code == 0
    for char in [*SEPARATORS, "\n", "\x85", "\x1f", " ", "\u00a0", "=", "'", "$"]:
        for wrong in (good + char, char + good):
            one_line_error(slurm(flag, wrong))


def test_every_sbatch_value_is_checked_where_it_is_written() -> None:
    """The writer's own check, whatever its caller checked: a bool is no node count, None is
    no job name, and a value sbatch would read otherwise is not written."""
    grammar = re.compile(r"[0-9]+")
    assert sbatch_directive("nodes", 4, grammar) == "#SBATCH --nodes=4"
    for value in [True, None, 2.5, "4\n", " 4", "4\u2028", "\u0664"]:
        with pytest.raises(UserError, match="#SBATCH --nodes"):
            sbatch_directive("nodes", value, grammar)  # type: ignore[arg-type]
    from commbench import slurm_script

    for keywords in ({"job_name": None}, {"time_limit": None}, {"partition": "gpu\u2028"}):
        with pytest.raises(UserError):
            slurm_script(["collectives"], **keywords)  # type: ignore[arg-type]


def test_shell_words_read_back_as_the_arguments() -> None:
    for text in SYNTAX:
        assert shlex.split(shell_words([text, "x"])) == [text, "x"]
    for text in HOSTILE_BREAKS:
        with pytest.raises(UserError, match="holds U\\+"):
            shell_words([text])


# -- markdown: the report ------------------------------------------------------------------------

MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])
INVALID_REFERENCE = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def shown(text: str) -> str:
    """What a markdown renderer shows of `text` in a paragraph: every line break a space,
    what no character reference may stand for the replacement character."""
    return INVALID_REFERENCE.sub("\ufffd", re.sub(f"[{re.escape(LINE_BREAKS)}]", " ", text))


def blocks_of(text: str) -> list[Any]:
    return [
        Heading(1, text),
        Contents(),
        Heading(2, text),
        Para(text),
        Para(text, bold=True),
        Bullets([text, "fixed"]),
        Table([text, "value"], [[text, "1.5"], ["-", text]], numeric=False),
        Pre(f"first\n{text}"),
        Image(text, b"\x89PNG"),
    ]


def structure(tokens: list[Token]) -> list[tuple[str, str, int]]:
    """The blocks, without their text: what a string may not change."""
    return [(t.type, t.tag, t.level) for t in tokens if t.type != "inline"]


def inline_texts(tokens: list[Token]) -> list[str]:
    """Each inline run's text, with the only markup a block makes (bold, a link, an image)."""
    texts = []
    for token in tokens:
        if token.type != "inline":
            continue
        parts = []
        for child in token.children or []:
            assert child.type in (
                "text",
                "strong_open",
                "strong_close",
                "link_open",
                "link_close",
                "image",
            ), child
            parts.append(child.content)
        texts.append("".join(parts))
    return texts


@pytest.mark.parametrize("text", HOSTILE, ids=ascii)
def test_a_markdown_report_shows_any_string_as_text_and_nothing_more(text: str) -> None:
    plain = MARKDOWN.parse(to_markdown(blocks_of("plain" if text else "")).text)
    written = to_markdown(blocks_of(text)).text
    tokens = MARKDOWN.parse(written)
    assert structure(tokens) == structure(plain)
    assert not any(t.type.startswith("html") for t in tokens)
    if not text:
        return  # no paragraph, an empty list item: nothing to show
    want = shown(text)
    texts = inline_texts(tokens)
    # heading, the contents' link, heading, para, bold para, 2 items, the table's cells
    assert texts[0] == want.strip(" ") and texts[3] == want and texts[4] == want
    assert texts[5] == want and texts[6] == "fixed"
    bold = [
        c
        for c in [t for t in tokens if t.type == "inline"][4].children or []
        if c.markup or c.content
    ]
    assert [c.type for c in bold if c.type != "text"] == ["strong_open", "strong_close"]
    assert bold[0].type == "strong_open" and bold[-1].type == "strong_close"
    assert texts[7] == want.strip(" ") and texts[9] == want.strip(" ")
    (fence,) = [t for t in tokens if t.type == "fence"]
    assert fence.content == "first\n" + "\n".join(visible(line) for line in text.split("\n")) + "\n"


def test_markdown_text_renders_any_mix_of_syntax_as_itself() -> None:
    """Strings made at random of the pieces of markdown syntax, each written by
    `markdown_text` where commbench writes one: a paragraph, a list item, a bold paragraph, a
    table cell, a heading, a link's text. Each renders as exactly the string, in exactly the
    element commbench made."""
    pieces = [
        "#", "# ", "## ", "-", "- ", "+ ", "* ", "*", "**", "_", "__", "`", "```", "~", "~~",
        "~~~", "$", "|", "<", ">", "&", "&amp;", "&#x41;", "[", "]", "](", "(", ")", "!", "![",
        "\\", " ", "    ", "\t", "1.", "1)", "1. ", "=", "---", "***", "<b>", "</b>", "x", "a_b",
        ":", "[a]: /u", "<!--", "-->", "http://x", "\n", "\u2028", "\x85", "\x1b", "\x00",
        "\u202e", "😀",
    ]  # fmt: skip
    rng = random.Random(33)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
        want = html.escape(shown(text)).replace("&#x27;", "'")
        cell = want.strip(" ")
        written = {place: markdown_text(text, where=place) for place in MARKDOWN_PLACES}
        rendered = {
            "block": MARKDOWN.render(written["block"]),
            "item": MARKDOWN.render(f"- {written['block']}"),
            "bold": MARKDOWN.render(f"**{written['bold']}**"),
            "cell": MARKDOWN.render(f"| h |\n|---|\n| {written['cell']} |\n"),
            "heading": MARKDOWN.render(f"## {written['cell']}"),
            "link": MARKDOWN.render(f"- [{written['link']}](#x) after"),
        }
        assert rendered == {
            "block": f"<p>{want}</p>\n",
            "item": f"<ul>\n<li>{want}</li>\n</ul>\n",
            "bold": f"<p><strong>{want}</strong></p>\n",
            "cell": f"<table>\n<thead>\n<tr>\n<th>h</th>\n</tr>\n</thead>\n<tbody>\n<tr>\n"
            f"<td>{cell}</td>\n</tr>\n</tbody>\n</table>\n",
            "heading": f"<h2>{cell}</h2>\n",
            "link": f'<ul>\n<li><a href="#x">{want}</a> after</li>\n</ul>\n',
        }, ascii(text)


def test_what_is_not_syntax_is_left_as_it_reads() -> None:
    """A table cell of `0->5`, `a < b`, `[0000:1b:00]`, `GPU#0`, `all_reduce`, `ok *`."""
    for text in ["0->5", "a < b", "R&D", "[0000:1b:00]", "GPU#0", "all_reduce", "ok *", "~60%"]:
        assert markdown_text(text, where="cell") == text


def test_a_fence_is_longer_than_any_backticks_inside() -> None:
    text = "a\n````\nb"
    tokens = MARKDOWN.parse(markdown_fence(text) + "\nafter\n")
    assert [t.type for t in tokens][:1] == ["fence"] and tokens[0].content == text + "\n"


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.mark.parametrize("text", HOSTILE, ids=ascii)
def test_an_html_report_shows_any_string_as_text(text: str) -> None:
    pages = []
    for value in ("plain", text):
        parser = Tags()
        parser.feed(to_html(blocks_of(value)).text)
        pages.append(parser)
    assert pages[1].tags == pages[0].tags  # no element of the string's own
    assert text in "".join(pages[1].text)


def storable(text: str) -> bool:
    """Whether run.json may hold `text` in a free-text field (`fields.text`: lines and tabs,
    no other control)."""
    return unsafe_character(text.replace("\n", "").replace("\t", "")) is None


STORED = [t for t in HOSTILE if storable(t)]


def hostile_run(tmp_path: Path, text: str) -> Path:
    """A stored run whose free-text fields (its failure, a replay's trace and notes) hold
    `text`, as someone else's run.json may."""
    run = tmp_path / "run"
    shutil.copytree(GOLDEN, run)
    record = json.loads((run / "run.json").read_text())
    record["failure"] = text
    record["replay"] = {
        "trace": text,
        "traced_world": 2,
        "world": 2,
        "steps": 1,
        "complete": True,
        "notes": [text, "fixed"],
    }
    (run / "run.json").write_text(json.dumps(record))
    return run


@functools.cache
def plain_report(text: str) -> list[tuple[str, str, int]]:
    """The structure of the report of a run whose free-text fields hold a plain `text`."""
    with tempfile.TemporaryDirectory() as tmp:
        run = hostile_run(Path(tmp), text)
        result = CliRunner().invoke(app, ["report", str(run), "--images", "none"])
    assert result.exit_code == 0, result.output
    return structure(MARKDOWN.parse(result.stdout))


@pytest.mark.parametrize(
    "text",
    ["\n# heading\n<script>alert(1)</script>", *STORED[::4], *HOSTILE_BREAKS[::7]],
    ids=ascii,
)
def test_the_report_of_a_hostile_run_json_has_no_line_of_its_own(tmp_path: Path, text: str) -> None:
    """The issue's case: a replay's trace of "\\n# heading\\n<script>" became a heading and a
    script of the markdown report."""
    result = CliRunner().invoke(
        app, ["report", str(hostile_run(tmp_path / "b", text)), "--images", "none"]
    )
    if not storable(text):  # a control character: the reader refuses the file
        one_line_error(result)
        return
    assert result.exit_code == 0, result.output
    tokens = MARKDOWN.parse(result.stdout)
    # an empty string makes an empty list item: the same, not the same as a word's
    assert structure(tokens) == plain_report("plain" if text else "")
    assert not any(t.type.startswith("html") for t in tokens)
    texts = inline_texts(tokens)
    assert f"The trace {shown(text)}, replayed on 2 ranks" in "\n".join(texts)


# -- CSV ----------------------------------------------------------------------------------------


def test_csv_reads_back_every_field_as_given() -> None:
    values: list[Any] = [*HOSTILE, 1, 2.5, True, None, float("nan")]
    written = csv_document(
        Document(records=[{"a": v, "b": "x"} for v in values], columns=["a", "b"])
    )
    rows = list(csv.reader(io.StringIO(written, newline="")))
    assert rows[0] == ["a", "b"] and len(rows) == len(values) + 1
    expected = [str(v) if v is not None and v == v else "" for v in values]
    assert [r[0] for r in rows[1:]] == expected and all(r[1] == "x" for r in rows[1:])
    # a field that holds a line break of any reader is quoted: a reader that splits lines
    # first still finds each quote closed on a later line
    for text in HOSTILE_BREAKS:
        assert csv_line([text]).startswith('"')
    assert csv_line([""]) == '""\n'  # one empty field is a record, not an empty line


def test_a_suite_comparison_as_csv_keeps_its_entry_names_in_their_column() -> None:
    from commbench.compare import compare_runs
    from commbench.report.comparison import render_many
    from commbench.results.exporters import Format
    from commbench.results.runs import load_run

    run = load_run(GOLDEN)
    comparison = compare_runs(run, run)
    names = ["a,b", 'q"uote', "line\nbreak", "x\u2028y"]
    written = render_many([(n, comparison) for n in names], Format.csv)
    rows = list(csv.DictReader(io.StringIO(written, newline="")))
    assert {r["entry"] for r in rows} == set(names)
    assert len(rows) == len(names) * len(comparison.points)


# -- a diagnosis: markdown and JUnit XML ---------------------------------------------------------


def diagnosis_of(host: str) -> Any:
    from commbench.diagnose.verdict import DEGRADED, Diagnosis, NodeVerdict
    from commbench.results.record import RunStatus

    node = NodeVerdict(host=host, node=0, verdict=DEGRADED, evidence=[host, "fixed"])
    return Diagnosis(path=Path("run"), status=RunStatus.COMPLETE, nodes=[node], stages=[])


@pytest.mark.parametrize("text", HOSTILE, ids=ascii)
def test_a_diagnosis_shows_any_host_name_as_text(text: str) -> None:
    """A node's host name and evidence (what another node sent) in the markdown table, and
    in the JUnit XML a CI server reads: any XML reader takes it, the name as given."""
    import xml.etree.ElementTree as ElementTree

    from commbench.diagnose.render import render_diagnosis

    host = text or "h"
    tokens = MARKDOWN.parse(render_diagnosis(diagnosis_of(host), "md"))
    assert structure(tokens) == structure(MARKDOWN.parse(render_diagnosis(diagnosis_of("h"), "md")))
    cells = [t.children or [] for t in tokens if t.type == "inline"]
    assert {c.type for c in cells[3]} <= {"text"}
    assert "".join(c.content for c in cells[3]) == shown(host).strip(" ")
    assert [c.content for c in cells[5] if c.type != "text"] == ["<br>"]  # commbench's own
    (case,) = ElementTree.fromstring(render_diagnosis(diagnosis_of(host), "junit"))
    illegal = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
    legal = illegal.sub(lambda m: visible(m.group(0)), host)
    assert case.get("name") == legal
    (failure,) = case
    assert failure.text == f"{legal}\nfixed" and failure.get("message") == f"degraded: {legal}"


# -- every registered format over the hostile strings (issue 44) ------------------------------


def hostile_sample(what: Any, text: str, tmp: Path) -> tuple[Any, ...]:
    """What a writer of `what` takes, with `text` in every free-text place it has."""
    from dataclasses import replace

    from commbench.formats import Writes
    from commbench.report.options import Images
    from commbench.tables import Headline, Notes, TitledTable

    if what is Writes.TABLES:
        doc = Document(
            [TitledTable(text, [text, "n"], [[text, "1"]]), Notes([text])],
            records=[{"a": text, "n": 1}],
            columns=["a", "n"],
            data={"a": text},
            headline=Headline(text, [text]),
        )
        return (doc,)
    if what is Writes.DIAGNOSIS:
        return (diagnosis_of(text or "h"),)
    if what is Writes.TOPOLOGY:
        from commbench.topology import load_snapshot

        snapshot = load_snapshot(Path(__file__).parent / "fixtures/p2p/snapshot_puzzle8.json")
        return (replace(snapshot, warnings=[text]),)
    if what is Writes.REPORT:
        return (blocks_of(text), Images.none, "f")
    from commbench.report.export import ExportSource
    from commbench.results.runs import load_run

    run = hostile_run(tmp / str(len(list(tmp.iterdir()))), text)
    record = json.loads((run / "run.json").read_text())
    record["context"]["host"] = text  # a label of every exported run
    (run / "run.json").write_text(json.dumps(record))
    return (ExportSource(load_run(run)),)


def no_line_of_its_own(text: str, written: str) -> None:
    """A line format: the string adds no line, by any reader's idea of a line."""
    assert written.splitlines() == written.split("\n")[: len(written.splitlines())]


def valid_json(text: str, written: str) -> None:
    def refuse(constant: str) -> None:
        raise ValueError(constant)

    json.loads(written, parse_constant=refuse)
    no_line_of_its_own(text, written)


def valid_csv(text: str, written: str) -> None:
    rows = list(csv.reader(io.StringIO(written, newline="")))
    if rows and rows[0] == ["a", "n"]:  # a table document's records
        assert rows[1] == [text, "1"]


def valid_xml(text: str, written: str) -> None:
    import xml.etree.ElementTree as ElementTree

    ElementTree.fromstring(written)  # XML's own line ends are its reader's, not lines


def valid_html(text: str, written: str) -> None:
    parser, plain = Tags(), Tags()
    parser.feed(written)
    from commbench.report.options import Images

    plain.feed(to_html(blocks_of("plain"), Images.none, "f").text)
    assert parser.tags == plain.tags


def valid_markdown(text: str, written: str) -> None:
    assert not any(t.type.startswith("html") for t in MARKDOWN.parse(written))
    no_line_of_its_own(text, written)


VALID = {
    "json": valid_json,
    "nccl-tests-json": valid_json,
    "csv": valid_csv,
    "junit": valid_xml,
    "html": valid_html,
    "md": valid_markdown,
}
"""What each format's reader needs of it; any other is a line format (`no_line_of_its_own`)."""


def every_writer() -> list[tuple[str, Any]]:
    from commbench.formats import FORMATS

    return [(name, what) for name, f in FORMATS.items() for what in f.writers]


@pytest.mark.parametrize(("fmt", "what"), every_writer(), ids=lambda v: str(getattr(v, "value", v)))
def test_every_format_writes_any_string_as_its_reader_takes_it(
    fmt: str, what: Any, tmp_path: Path
) -> None:
    """Every registered format's writer of each thing it writes, over the hostile strings:
    strict JSON parses, CSV reads back the cell as given, XML parses, HTML and markdown have no
    element of the string's own, and no line format gets a line from it. A writer may refuse a
    string (a `UserError`: one line, exit 2); it may not write it wrong."""
    from commbench.formats import Writes, write

    texts = HOSTILE if what in (Writes.TABLES, Writes.DIAGNOSIS) else HOSTILE[::3]
    check = VALID.get(fmt, no_line_of_its_own)
    for text in texts:
        try:
            written = write(what, fmt, *hostile_sample(what, text, tmp_path))
        except UserError:
            continue
        if what is Writes.REPORT:
            written = written.text
        check(text, written)
