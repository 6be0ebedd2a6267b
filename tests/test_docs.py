"""The documentation's examples run as written, and its links lead somewhere.

A fenced block whose info string is `sql runnable` or `python runnable` (in README.md, README.new.md
while it exists, and docs/sql.md) is an example this file runs:

- `sql runnable`: statements separated by `;`, run in order against a fresh warehouse in a temporary
  folder (also the working directory). A comment line `-- => <Python literal>` after a statement
  asserts what that statement returns: `fetchall()` equals the literal, a list of row tuples
  (compared as a multiset unless the statement says ORDER BY). The literal may go on over the next
  comment lines (`--   (2, 'b')]`); it may use Decimal, date, datetime, time, timedelta and
  timezone. `-- => error: <text>` asserts that the statement raises a dagster_rw.Error whose message
  contains <text> (ignoring case).
- `python runnable`: the block is exec'd with a temporary working directory; it asserts what it
  means to prove itself.

Every relative link of README.md, README.new.md and docs/*.md must name a file or folder of the
repository, and a `#section` must name a heading of the file it points at.
"""
from __future__ import annotations

import bisect
import itertools
import re
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

import dagster_rw
from dagster_rw.sql.statements import split

ROOT = Path(__file__).resolve().parent.parent
RUNNABLE_FILES = [p for p in (ROOT / "README.md", ROOT / "README.new.md", ROOT / "docs" / "sql.md") if p.exists()]
LINKED_FILES = [p for p in (ROOT / "README.md", ROOT / "README.new.md") if p.exists()] + sorted(
    (ROOT / "docs").glob("*.md"))
EXPECT = "-- =>"
_LITERALS = {"Decimal": Decimal, "date": date, "datetime": datetime, "time": time, "timedelta": timedelta,
             "timezone": timezone, "None": None, "True": True, "False": False}


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    info: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced code block of a Markdown file (``` or ~~~, indented or not), dedented."""
    out: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j].lstrip())
            j += 1
        out.append(Block(path, i + 1, info, "\n".join(body) + "\n"))
        i = j + 1
    return out


def runnable_blocks() -> list:
    params = []
    for path in RUNNABLE_FILES:
        for block in fenced_blocks(path):
            if block.info.split()[-1:] == ["runnable"]:
                params.append(pytest.param(block, id=block.id))
    return params


# -- the SQL examples ------------------------------------------------------------------------------

@dataclass
class Step:
    statements: list[str]
    expected: str | None  # the text after `-- =>`, for the last statement; None: just run them
    line: int


def sql_steps(block: Block) -> list[Step]:
    """The block cut at its `-- =>` lines: statements to run, and what the last one must give."""
    steps: list[Step] = []
    pending: list[str] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped.startswith(EXPECT):
            pending.append(lines[i])
            i += 1
            continue
        start = i
        expected = stripped[len(EXPECT):].strip()
        while not _complete(expected):
            i += 1
            if i >= len(lines) or not lines[i].strip().startswith("--"):
                raise AssertionError(f"{block.id}: the expectation on line {block.line + 1 + start} never ends: "
                                     f"{expected!r}")
            expected += " " + lines[i].strip()[2:].strip()
        statements = split("\n".join(pending))
        if not statements:
            raise AssertionError(f"{block.id}: an expectation on line {block.line + 1 + start} follows no statement")
        steps.append(Step(statements, expected, block.line + 1 + start))
        pending = []
        i += 1
    rest = split("\n".join(pending))
    if rest:
        steps.append(Step(rest, None, block.line + len(lines)))
    return steps


def _complete(expected: str) -> bool:
    if expected.lower().startswith("error:"):
        return True
    try:
        _literal(expected)
        return True
    except SyntaxError:
        return False


def _literal(text: str):
    return eval(text, {"__builtins__": {}}, dict(_LITERALS))  # noqa: S307 - the repository's own docs


def _frozen(value):
    """A row value as something hashable (arrays come back as lists)."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _ordered(statement: str) -> bool:
    return re.search(r"\border\s+by\b", statement, re.IGNORECASE) is not None


def run_sql(block: Block, warehouse: str) -> None:
    with dagster_rw.connect(warehouse) as conn:
        for step in sql_steps(block):
            *before, last = step.statements
            for statement in before:
                conn.execute(statement)
            where = f"{block.id} (the statement before line {step.line}):\n{last}"
            if step.expected is not None and step.expected.lower().startswith("error:"):
                wanted = step.expected[len("error:"):].strip()
                with pytest.raises(dagster_rw.Error) as raised:
                    conn.execute(last)
                assert wanted.lower() in str(raised.value).lower(), \
                    f"{where}\nraised {str(raised.value)!r}, which does not say {wanted!r}"
                continue
            cursor = conn.execute(last)
            if step.expected is None:
                continue
            expected = _literal(step.expected)
            got = cursor.fetchall()
            if _ordered(last):
                assert [_frozen(r) for r in got] == [_frozen(tuple(r)) for r in expected], f"{where}\ngot {got!r}"
            else:
                assert Counter(_frozen(r) for r in got) == Counter(_frozen(tuple(r)) for r in expected), \
                    f"{where}\ngot {got!r}"


@pytest.mark.parametrize("block", runnable_blocks())
def test_runnable_example_runs_as_documented(block: Block, tmp_path, monkeypatch):
    language = block.info.split()[0]
    monkeypatch.chdir(tmp_path)  # what an example writes (a file sink's folder, say) goes there
    if language == "sql":
        run_sql(block, str(tmp_path / "wh"))
    elif language == "python":
        exec(compile(block.text, block.id, "exec"), {"__name__": "__docs__"})  # noqa: S102
    else:
        raise AssertionError(f"{block.id}: no runner for a runnable {language!r} block (sql or python)")


def test_the_sql_reference_proves_its_examples():
    blocks = [b for b in fenced_blocks(ROOT / "docs" / "sql.md") if b.info == "sql runnable"]
    asserted = [s for b in blocks for s in sql_steps(b) if s.expected is not None]
    assert len(blocks) >= 20 and len(asserted) >= 40, (len(blocks), len(asserted))


@pytest.mark.parametrize("path", [p for p in (ROOT / "README.md", ROOT / "README.new.md") if p.exists()],
                         ids=lambda p: p.name)
def test_readme_keeps_the_two_commands(path):
    text = path.read_text()
    assert "pip install -e . && dagster-rw demo" in text
    assert 'pip install -e ".[test]" && python -m pytest -q -p no:cacheprovider' in text


# -- the parser of examples itself ------------------------------------------------------------------

def test_expectations_attach_to_the_statement_before_them(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("text\n\n  ```sql runnable\n  CREATE TABLE t (a INT);\n  INSERT INTO t VALUES (1);\n"
                   "  FLUSH;\n  SELECT a FROM t;\n  -- => [(1,)\n  --   ]\n  SELECT b FROM t;\n"
                   "  -- => error: does not exist\n  FLUSH;\n  ```\n")
    (block,) = fenced_blocks(doc)
    assert block.info == "sql runnable" and block.line == 3 and block.text.startswith("CREATE TABLE")
    steps = sql_steps(block)
    assert [len(s.statements) for s in steps] == [4, 1, 1]
    assert [s.expected for s in steps] == ["[(1,) ]", "error: does not exist", None]


# -- links -----------------------------------------------------------------------------------------

_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")


def _prose_lines(path: Path, keep_code: bool = False) -> list[tuple[int, str]]:
    """The file's lines outside fenced code blocks (numbered), inline code spans removed unless
    `keep_code`."""
    out, fence = [], None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if m and (fence is None or (m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence))):
            fence = m.group(1) if fence is None else None
            continue
        if fence is None:
            out.append((n, line if keep_code else re.sub(r"(`+)(?:(?!\1).)+?\1", "", line)))
    return out


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the file's headings: lower case, punctuation dropped (the text of inline
    code kept), spaces as hyphens, a repeated heading numbered."""
    seen: Counter = Counter()
    out = set()
    for _, line in _prose_lines(path, keep_code=True):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        out.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return out


def relative_links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link to something in the repository (not http:, mailto:, ...): inline
    links, whose text may run over several lines, and reference definitions."""
    prose = _prose_lines(path)
    text = "\n".join(line for _, line in prose)
    starts = list(itertools.accumulate(len(line) + 1 for _, line in prose))
    found = []
    for m in _LINK.finditer(text):
        found.append((prose[bisect.bisect_right(starts, m.start())][0], m.group(1)))
    for n, line in prose:
        m = _REFERENCE.match(line)
        if m:
            found.append((n, m.group(1)))
    return [(n, t) for n, t in found if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", t)]


@pytest.mark.parametrize("path", LINKED_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_that_exist(path):
    broken = []
    for n, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"line {n}: {target} (no {dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"line {n}: {target} (no heading #{anchor} in {dest.name})")
    assert not broken, f"{path.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


def test_anchors_are_made_as_github_makes_them(tmp_path):
    doc = tmp_path / "a.md"
    doc.write_text("# Sinks and sources\n## `conn.status()` rows\n## FLUSH, SELECT\n## FLUSH, SELECT\n"
                   "```\n# not a heading\n```\n")
    assert anchors(doc) == {"sinks-and-sources", "connstatus-rows", "flush-select", "flush-select-1"}
    doc.write_text("See [the\n  sinks](b.md#sinks) and `[not](a link)`.\n\n[ref]: docs/x.md\n"
                   "[web](https://example.com)\n")
    assert relative_links(doc) == [(1, "b.md#sinks"), (4, "docs/x.md")]
