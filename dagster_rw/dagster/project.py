"""A SQL project: a folder of `.sql` files declaring tables, sources, materialized views and sinks.

`RwProject` reads the folder the way dagster-dbt reads a dbt project: statements may come in any
order and several per file; the project orders them by the relations each one reads, then plans them
once in a scratch warehouse so every object's columns, types, keys and dependencies are known before
any data exists. What it learns is an `RwObject` per statement, which the translator turns into an
asset spec. Expectations for the Great Expectations checks live beside the SQL in `expectations.yaml`.

A statement's documentation is the comment block directly above it (`--` lines or `/* ... */`, no
blank line between the block and the statement, nor inside the block):

    -- Products nobody visited yet.        <- documents `unvisited`
    CREATE MATERIALIZED VIEW unvisited AS ...

A file's header, followed by a blank line, documents no object, and neither does a comment after a
statement on the same line as its semicolon.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from sqlglot import errors as sqlglot_errors
from sqlglot import exp
from sqlglot.lineage import lineage as sqlglot_lineage

from ..errors import ProgrammingError
from ..sql import statements as st
from ..sql.syntax import relation_tables
from ..storage.catalog import TABLE
from . import plan_cache as _plan_cache

EXPECTATIONS_FILE = "expectations.yaml"


@dataclass
class RwColumn:
    name: str
    type: str
    nullable: bool = True


@dataclass
class RwObject:
    """One object of a SQL project, as planned from its statement alone (no warehouse needed)."""

    name: str
    kind: str  # 'table', 'materialized_view', and the kinds of later statements ('source', 'sink')
    sql: str
    path: str  # the file it was declared in, relative to the project folder
    deps: list[str] = field(default_factory=list)  # objects it reads, in the order the SQL names them
    columns: list[RwColumn] = field(default_factory=list)
    primary_key: list[str] = field(default_factory=list)
    stream_key: list[str] = field(default_factory=list)
    column_lineage: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # col -> [(object, col)]
    expectations: list[dict] = field(default_factory=list)  # [{"type": ..., "kwargs": {...}}]
    append_only: bool = False
    comment: str = ""  # the comment block directly above the statement, without comment markers
    # the statement as written, secrets included, to create the object; `sql` is what users see
    deploy_sql: str = field(default="", repr=False)


class Declared(NamedTuple):
    """A statement of the project: its file, the parsed statement, and its text as written (secrets
    included, to create the object; CREATE SINK's parsed `sql` is redacted)."""

    path: str
    statement: st.Statement
    text: str


def references(statement: st.Statement) -> list[str]:
    """The relations a CREATE statement reads (CTE names excluded), in the order they appear."""
    query = getattr(statement, "query", None) or getattr(statement, "as_query", None)
    names: list[str] = []
    for attr in ("from_name", "into"):  # CREATE SINK ... FROM name / INTO table
        value = getattr(statement, attr, None)
        if isinstance(value, str) and value:
            names.append(value)
    if query is not None:
        for t in relation_tables(query):  # (`WITH t AS (SELECT * FROM t)` reads the relation t)
            if t.name not in names:
                names.append(t.name)
    return names


def _object_name(statement: st.Statement) -> str | None:
    return getattr(statement, "name", None) or None


def _name_secrets(conn, declared) -> None:
    """Enter in the scratch warehouse the secrets the project's statements refer to (`option = secret
    name`), by name only: planning delivers nothing, and the deployed warehouse holds their values."""
    from ..storage import catalog as catalogs

    names = {v for d in declared for k, v in (getattr(d.statement, "options", None) or {}).items()
             if k in (getattr(d.statement, "secret_options", None) or ())}
    if names:
        current = conn.wh.catalog(reload=True)
        catalogs.commit(conn.wh.store, catalogs.Catalog(
            version=current.version, objects=current.objects, functions=current.functions,
            secrets={n: {"name": n, "backend": "meta", "value": ""} for n in names}), "the project's secrets")
        conn.wh.sync()


class RwProject:
    """The SQL files under `project_dir`, read once and planned into `RwObject`s in topological order.

    The plan is kept in the folder `plan_cache` (by default `$DAGSTER_RW_PLAN_CACHE`, else
    `dagster_rw/plans` in the user's cache folder; `None` keeps none), keyed by the hash of the
    project's files and of the planner, so that another process loading the same definitions (a
    run worker) reads it instead of planning the folder again."""

    def __init__(self, project_dir: str | os.PathLike, name: str | None = None,
                 plan_cache: str | os.PathLike | None = _plan_cache.DEFAULT):
        self.project_dir = Path(project_dir).resolve()
        if not self.project_dir.is_dir():
            raise ProgrammingError(f"SQL project folder {str(self.project_dir)!r} does not exist")
        self.name = name or self.project_dir.name
        if plan_cache is _plan_cache.DEFAULT:
            plan_cache = _plan_cache.default_dir()
        self.plan_cache = Path(plan_cache) if plan_cache is not None else None
        self._objects: dict[str, RwObject] | None = None
        self._comments: dict[tuple[str, str], str] = {}  # (file, statement text) -> its doc comment

    # -- reading -------------------------------------------------------------------------------
    def sql_files(self) -> list[Path]:
        return sorted(p for p in self.project_dir.rglob("*.sql") if p.is_file())

    def declared(self) -> list[Declared]:
        """Every CREATE statement of the project (objects and SQL functions), in file order."""
        out = []
        self._comments = {}
        for path in self.sql_files():
            rel = str(path.relative_to(self.project_dir))
            script = path.read_text()
            texts = st.split(script)
            for text, comment in zip(texts, doc_comments(script, texts)):
                self._comments[(rel, text)] = comment
                try:
                    statement = st.parse(text)
                except ProgrammingError as e:
                    raise ProgrammingError(f"{rel}: {e}") from None
                if type(statement).__name__ == "CreateSecret":  # the file would hold the value in clear
                    raise ProgrammingError(
                        f"{rel}: a SQL project does not declare secrets (CREATE SECRET {statement.name}): create "
                        "it once on the warehouse (dagster-rw sql) and write `option = secret name`")
                if type(statement).__name__ == "CreateIndex":  # not an asset: it serves batch lookups
                    raise ProgrammingError(
                        f"{rel}: not supported in a SQL project: CREATE INDEX {statement.name} (an index is not "
                        "an asset of its own; declare a materialized view ordered as needed instead)")
                if not type(statement).__name__.startswith("Create"):
                    raise ProgrammingError(
                        f"{rel}: a SQL project declares objects only (CREATE ...); found: {text[:60]!r}")
                out.append(Declared(rel, statement, text))
        return out

    def statements(self) -> list[Declared]:
        """The CREATE statements of the project's objects (its assets), in file order."""
        return [d for d in self.declared() if not isinstance(d.statement, st.CreateFunction)]

    def functions(self) -> list[Declared]:
        """The project's SQL functions (CREATE FUNCTION), in file order: created before its objects,
        which may call them; not assets themselves."""
        found = [d for d in self.declared() if isinstance(d.statement, st.CreateFunction)]
        seen: dict[str, str] = {}
        for d in found:
            name = d.statement.function.name
            if name in seen:
                raise ProgrammingError(f"{d.path}: the function {name} is declared twice (also in {seen[name]})")
            seen[name] = d.path
        return found

    def ordered_statements(self) -> list[Declared]:
        """Statements ordered so that every object comes after the objects it reads."""
        found = self.statements()
        by_name: dict[str, Declared] = {}
        for d in found:
            name = _object_name(d.statement)
            if name in by_name:
                raise ProgrammingError(f"{d.path}: {name!r} is declared twice (also in {by_name[name].path})")
            by_name[name] = d
        ordered: list[Declared] = []
        state: dict[str, str] = {}

        def visit(name: str, trail: list[str]):
            if state.get(name) == "done":
                return
            if state.get(name) == "visiting":
                raise ProgrammingError("the project's objects read each other in a cycle: "
                                       + " -> ".join(trail + [name]))
            state[name] = "visiting"
            d = by_name[name]
            for dep in references(d.statement):
                if dep not in by_name:
                    raise ProgrammingError(f'{d.path}: {name!r} reads "{dep}", which the project does not declare')
                visit(dep, trail + [name])
            state[name] = "done"
            ordered.append(d)

        for d in found:
            visit(_object_name(d.statement), [])
        return ordered

    # -- planning ------------------------------------------------------------------------------
    @property
    def objects(self) -> dict[str, RwObject]:
        if self._objects is None:
            if self.plan_cache is None:
                self._objects = self._plan()
            else:
                files = self.sql_files() + [p for p in [self.project_dir / EXPECTATIONS_FILE] if p.is_file()]
                key = _plan_cache.plan_key(self.project_dir, files)
                self._objects = self._planned(_plan_cache.load(self.plan_cache, key))
                if self._objects is None:
                    self._objects = self._plan()
                    _plan_cache.store(self.plan_cache, key, [_stored(o) for o in self._objects.values()])
        return self._objects

    def _planned(self, stored: list[dict] | None) -> dict[str, RwObject] | None:
        """A kept plan with the statements' text as written read back from the files, or None when
        there is none or it does not name exactly the statements the files declare."""
        if stored is None:
            return None
        written = {(d.path, _object_name(d.statement)): d.text for d in self.statements()}
        try:
            objects = {o.name: o for o in map(_loaded, stored)}
        except (KeyError, TypeError, ValueError):
            return None
        if {(o.path, o.name) for o in objects.values()} != set(written):
            return None
        for o in objects.values():
            o.deploy_sql = written[(o.path, o.name)]
        return objects

    def get(self, name: str) -> RwObject:
        return self.objects[name]

    def downstream(self, names) -> list[str]:
        """`names` and every object reading them, directly or not, in topological order."""
        wanted = set(names)
        for obj in self.objects.values():
            if wanted.intersection(obj.deps):
                wanted.add(obj.name)
        return [n for n in self.objects if n in wanted]

    def upstream(self, names) -> list[str]:
        """`names` and every object they read, directly or not, in topological order."""
        wanted: set[str] = set()
        stack = list(names)
        while stack:
            n = stack.pop()
            if n not in wanted:
                wanted.add(n)
                stack.extend(self.objects[n].deps)
        return [n for n in self.objects if n in wanted]

    def _plan(self) -> dict[str, RwObject]:
        """Create every object in an empty scratch warehouse: the engine's own planner checks the SQL
        (unsupported constructs fail here, at definition time) and tells columns and keys."""
        from .. import dbapi

        expectations = load_expectations(self.project_dir / EXPECTATIONS_FILE)
        scratch = tempfile.mkdtemp(prefix="rw-project-")
        objects: dict[str, RwObject] = {}
        try:
            with dbapi.connect(scratch, engine="duckdb") as conn:
                for rel, _, written in self.functions():
                    try:
                        conn.execute(written)
                    except ProgrammingError as e:
                        raise ProgrammingError(f"{rel}: {e}") from None
                _name_secrets(conn, self.ordered_statements())
                for rel, statement, written in self.ordered_statements():
                    name = _object_name(statement)
                    try:
                        conn.execute(written)
                    except ProgrammingError as e:
                        raise ProgrammingError(f"{rel}: {e}") from None
                    cat = conn.wh.catalog()
                    c = cat.get(name)
                    deps = _visible_inputs(cat, c) if c else references(statement)
                    obj = RwObject(name=name, kind=c.kind if c else type(statement).__name__[6:].lower(),
                                   sql=statement.sql, path=rel, deps=deps, deploy_sql=written,
                                   comment=self._comments.get((rel, written), ""))
                    if c is not None:
                        obj.columns = [RwColumn(col.name, col.type, col.name not in c.pk) for col in c.visible_columns]
                        obj.primary_key = list(c.pk)
                        hidden = {col.name for col in c.columns if col.hidden}
                        obj.stream_key = [k for k in c.stream_key if k not in hidden]
                        obj.append_only = c.append_only
                        if c.kind != TABLE:
                            obj.column_lineage = column_lineage(statement, obj, objects)
                    objects[name] = obj
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        unknown = set(expectations) - set(objects)
        if unknown:
            raise ProgrammingError(f"{EXPECTATIONS_FILE}: expectations for objects the project does not declare: "
                                   + ", ".join(sorted(unknown)))
        for name, items in expectations.items():
            objects[name].expectations = items
        return objects


def _stored(obj: RwObject) -> dict:
    """A planned object as the plan cache keeps it: everything but the statement as written."""
    return {k: v for k, v in dataclasses.asdict(obj).items() if k != "deploy_sql"}


def _loaded(item: dict) -> RwObject:
    item = dict(item)
    item["columns"] = [RwColumn(**c) for c in item["columns"]]
    item["column_lineage"] = {k: [tuple(x) for x in v] for k, v in item["column_lineage"].items()}
    return RwObject(**item)


def _comment_spans(script: str, start: int) -> tuple[list[tuple[int, int]], int]:
    """The comments from `start` up to the first token of a statement, as (start, end) offsets, and
    that token's offset."""
    spans, i = [], start
    while True:
        while i < len(script) and script[i].isspace():
            i += 1
        if script.startswith("--", i):
            end = script.find("\n", i)
            end = len(script) if end < 0 else end
        elif script.startswith("/*", i):
            end = script.find("*/", i + 2)
            if end < 0:
                return spans, i
            end += 2
        else:
            return spans, i
        spans.append((i, end))
        i = end


def _comment_text(script: str, span: tuple[int, int]) -> list[str]:
    raw = script[span[0]:span[1]]
    if raw.startswith("--"):
        return [raw[2:].removeprefix(" ").rstrip()]
    lines = [line.strip() for line in raw[2:-2].splitlines()]
    lines = [line[1:].removeprefix(" ") if line.startswith("*") else line for line in lines]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def doc_comments(script: str, texts: list[str]) -> list[str]:
    """For each statement of `script` (as `statements.split` cut it), the comment block directly above
    it: no blank line between the block and the statement nor inside it, and none of it on the line
    where the previous statement ends."""
    out, cursor, previous_end = [], 0, None
    for text in texts:
        start = script.find(text, cursor)
        if start < 0:  # split() only strips whitespace, so every text is found; be safe anyway
            out.append("")
            continue
        cursor = start + len(text)
        spans, body = _comment_spans(script, start)
        block: list[tuple[int, int]] = []
        following = body
        for span in reversed(spans):
            if script.count("\n", span[1], following) > 1:
                break  # a blank line: what is above belongs to something else
            if previous_end is not None and "\n" not in script[previous_end:span[0]]:
                break  # on the line where the previous statement ends: a comment about that one
            block.insert(0, span)
            following = span[0]
        previous_end = cursor
        out.append("\n".join(line for span in block for line in _comment_text(script, span)).strip())
    return out


def statement_body(sql: str) -> str:
    """The statement without the comments above it."""
    return sql[_comment_spans(sql, 0)[1]:].strip()


def _visible_inputs(cat, c) -> list[str]:
    """An object's inputs, seen through internal objects (the view planned for CREATE SINK ... AS)."""
    out: list[str] = []
    for name in c.inputs:
        inner = cat.get(name)
        names = _visible_inputs(cat, inner) if inner is not None and (inner.options or {}).get("internal_of") \
            else [name]
        out.extend(n for n in names if n not in out)
    return out


def column_lineage(statement: st.Statement, obj: RwObject, known: dict[str, RwObject]) -> dict:
    """Per output column, the (object, column) pairs it is computed from, traced by sqlglot."""
    query = getattr(statement, "query", None) or getattr(statement, "as_query", None)
    if query is None:
        return {}
    schema = {name: {c.name: c.type for c in o.columns} for name, o in known.items()}
    out: dict[str, list[tuple[str, str]]] = {}
    for col in obj.columns:
        try:
            root = sqlglot_lineage(col.name, query, schema=schema, dialect=st.DIALECT)
        except (sqlglot_errors.SqlglotError, KeyError, ValueError):
            continue  # sqlglot cannot trace every expression (e.g. some window frames): leave it out
        deps: list[tuple[str, str]] = []
        for node in root.walk():
            if isinstance(node.expression, exp.Table) and not node.downstream:
                source = node.expression.name
                column = node.name.split(".")[-1].strip('"')
                if source in known and (source, column) not in deps:
                    deps.append((source, column))
        out[col.name] = deps
    return out


def load_expectations(path: Path) -> dict[str, list[dict]]:
    """`expectations.yaml`: per object, a list of Great Expectations expectations.

        orders:
          - expect_column_values_to_not_be_null: {column: order_id}
          - expect_column_values_to_be_between: {column: amount, min_value: 0}
    """
    if not path.exists():
        return {}
    import yaml

    doc = yaml.safe_load(path.read_text()) or {}
    if not isinstance(doc, dict):
        raise ProgrammingError(f"{path.name}: expected a mapping of object name to a list of expectations")
    out: dict[str, list[dict]] = {}
    for name, items in doc.items():
        parsed = []
        for item in items or []:
            if isinstance(item, str):
                item = {item: {}}
            if not isinstance(item, dict) or len(item) != 1:
                raise ProgrammingError(f"{path.name}: {name}: each expectation is one `expect_...: {{kwargs}}` entry")
            (etype, kwargs), = item.items()
            if not str(etype).startswith("expect_"):
                raise ProgrammingError(f"{path.name}: {name}: {etype!r} is not a Great Expectations expectation")
            parsed.append({"type": etype, "kwargs": dict(kwargs or {})})
        out[str(name)] = parsed
    return out
