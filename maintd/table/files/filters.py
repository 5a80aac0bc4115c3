"""Row filters of readers: predicates in disjunctive normal form, parsed, typed and evaluated.

A filter is an OR of ANDs of simple predicates (``column op value``), the form pyarrow's
``filters=`` argument and Spark's pushed filters take. It is kept as data rather than as an
opaque ``pyarrow.compute.Expression`` because readers *look into it*. Predicates on partition
columns skip whole (partition, bucket) groups, and equalities on every primary-key column name the
only buckets that can hold the key. Ranges on the leading key column skip files by their
``key_min`` / ``key_max`` (:mod:`maintd.table.read.scan`). Rows are filtered after the merge, so a
predicate on a value column never resurrects an older version of a row.

Accepted forms (:func:`parse_filter`)::

    "region = 'eu' and id >= 100"                   # SQL-like: and/or, = != <> < <= > >=,
    "id in (1, 2, 3) or name is null"               #   [not] in (...), is [not] null,
    "day >= date '2024-01-01'"                      #   'strings', numbers, true/false
    [("region", "=", "eu"), ("id", ">=", 100)]      # pyarrow style: AND of tuples
    [[("id", "<", 10)], [("id", ">", 90)]]          # OR of ANDs
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from maintd.errors import InvalidInputError
from maintd.table.files.lazy import lazy_module
from maintd.table.files.schema import TYPES
from maintd.table.log.actions import Metadata

if TYPE_CHECKING:
    import pyarrow.compute as pc
else:
    pc = lazy_module("pyarrow.compute")  # imported by the first call: see maintd.table.files.lazy

COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
OPERATORS = (*COMPARISONS, "in", "not in", "is null", "is not null")
_ALIASES = {"==": "=", "<>": "!=", "not_in": "not in", "notin": "not in", "is_null": "is null",
            "is_not_null": "is not null"}


@dataclass(frozen=True)
class Predicate:
    """``column op value``: ``value`` is a typed scalar (a tuple of them for ``in``; None for null tests)."""

    column: str
    op: str
    value: Any = None

    def __str__(self) -> str:
        if self.op in ("is null", "is not null"):
            return f"{self.column} {self.op}"
        if self.op in ("in", "not in"):
            return f"{self.column} {self.op} ({', '.join(repr(v) for v in self.value)})"
        return f"{self.column} {self.op} {self.value!r}"


@dataclass(frozen=True)
class RowFilter:
    """An OR of ANDs of predicates, typed against a table's schema."""

    conjunctions: tuple[tuple[Predicate, ...], ...]

    def __str__(self) -> str:
        return " or ".join(" and ".join(str(p) for p in c) for c in self.conjunctions)

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.column for c in self.conjunctions for p in c))

    def expression(self, types: dict[str, pa.DataType]) -> pc.Expression:
        """The filter as a pyarrow expression (SQL semantics: a comparison with null is not true)."""
        out: pc.Expression | None = None
        for conj in self.conjunctions:
            term: pc.Expression | None = None
            for p in conj:
                e = _predicate_expression(p, types[p.column])
                term = e if term is None else term & e
            assert term is not None
            out = term if out is None else out | term
        assert out is not None
        return out

    def apply(self, t: pa.Table) -> pa.Table:
        return t.filter(self.expression({f.name: f.type for f in t.schema}))


def _predicate_expression(p: Predicate, typ: pa.DataType) -> pc.Expression:
    f = pc.field(p.column)
    if p.op == "is null":
        return f.is_null()
    if p.op == "is not null":
        return f.is_valid()
    if p.op in ("in", "not in"):
        values = pa.array(list(p.value), typ)
        return f.isin(values) if p.op == "in" else (f.is_valid() & ~f.isin(values))
    v = pa.scalar(p.value, typ)
    return {"=": f == v, "!=": f != v, "<": f < v, "<=": f <= v, ">": f > v, ">=": f >= v}[p.op]


# -- typing --------------------------------------------------------------------------------
def typed_value(value: Any, typ: pa.DataType, *, column: str, where: str) -> Any:
    """``value`` converted to the Python value of ``typ`` (strings parse as dates, timestamps...)."""
    try:
        scalar = value if isinstance(value, pa.Scalar) else pa.scalar(value)
        if scalar.type != typ:
            scalar = scalar.cast(typ)
        return scalar.as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError) as exc:
        raise InvalidInputError(
            f"{where}: the value {value!r} cannot be compared with column {column!r} of type {typ} ({exc}); "
            "give a value of the column's type"
        ) from None


def typed(p: Predicate, types: dict[str, pa.DataType], *, where: str) -> Predicate:
    """A predicate with its column checked and its value converted to the column's type."""
    op = _ALIASES.get(p.op.strip().lower(), p.op.strip().lower())
    if op not in OPERATORS:
        raise InvalidInputError(f"{where}: unknown operator {p.op!r} in a filter; use one of {', '.join(OPERATORS)}")
    if p.column not in types:
        raise InvalidInputError(
            f"{where}: the filter names column {p.column!r}, which the table does not have "
            f"(columns: {', '.join(types)})"
        )
    typ = types[p.column]
    if op in ("is null", "is not null"):
        return Predicate(p.column, op)
    if op in ("in", "not in"):
        if isinstance(p.value, str | bytes) or not isinstance(p.value, Iterable):
            raise InvalidInputError(f"{where}: {p.column} {op} needs a list of values, got {p.value!r}")
        return Predicate(p.column, op, tuple(typed_value(v, typ, column=p.column, where=where) for v in p.value))
    if p.value is None:
        raise InvalidInputError(f"{where}: {p.column} {op} null is never true; use 'is null' or 'is not null'")
    return Predicate(p.column, op, typed_value(p.value, typ, column=p.column, where=where))


def parse_filter(spec: Any, metadata: Metadata, *, where: str) -> RowFilter | None:
    """A typed :class:`RowFilter` from a string, tuples (AND), lists of tuple lists (OR of ANDs) or None.

    Raises:
        InvalidInputError: naming the unknown column, operator or value, or the syntax error.
    """
    if spec is None:
        return None
    if isinstance(spec, RowFilter):
        raw = spec.conjunctions
    elif isinstance(spec, str):
        raw = _Parser(spec, where).parse()
    elif isinstance(spec, Sequence) and spec and all(isinstance(c, Sequence) and not isinstance(c, str) for c in spec):
        raw = _tuples(spec, where)
    else:
        raise InvalidInputError(
            f"{where}: a filter is a string such as \"region = 'eu' and id > 10\", a list of (column, op, value) "
            f"tuples, or a list of such lists (OR of ANDs); got {type(spec).__name__}"
        )
    types = {f.name: TYPES[f.type] for f in metadata.fields}
    return RowFilter(tuple(tuple(typed(p, types, where=where) for p in conj) for conj in raw))


def _tuples(spec: Sequence[Any], where: str) -> tuple[tuple[Predicate, ...], ...]:
    def one(t: Any) -> Predicate:
        if not isinstance(t, Sequence) or isinstance(t, str) or len(t) not in (2, 3):
            raise InvalidInputError(f"{where}: a filter term must be a (column, op, value) tuple, got {t!r}")
        return Predicate(str(t[0]), str(t[1]), t[2] if len(t) == 3 else None)

    nested = all(isinstance(c, Sequence) and c and not isinstance(c[0], str) for c in spec)
    groups = spec if nested else [spec]
    out = tuple(tuple(one(t) for t in g) for g in groups)
    if not all(out):
        raise InvalidInputError(f"{where}: a filter has an empty group of terms")
    return out


# -- the SQL-like syntax --------------------------------------------------------------------
_TOKEN = re.compile(r"""\s*(?:
    (?P<str>'(?:[^']|'')*')
  | (?P<num>[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<op><=|>=|<>|!=|==|=|<|>)
  | (?P<punct>[(),])
  | (?P<qid>`[^`]+`|"[^"]+")
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
)""", re.VERBOSE)


class _Parser:
    """``pred (and pred)* (or pred (and pred)*)*``: a small recursive-descent parser of the filter syntax."""

    def __init__(self, text: str, where: str) -> None:
        self.text, self.where = text, where
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            if not text[pos:].strip():
                break
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                self._fail(f"unexpected text at {text[pos:].strip()[:20]!r}")
            assert m is not None and m.lastgroup is not None
            self.tokens.append((m.lastgroup, m.group(m.lastgroup)))
            pos = m.end()
        self.i = 0

    def _fail(self, why: str) -> None:
        raise InvalidInputError(
            f"{self.where}: cannot parse the filter {self.text!r}: {why}. Write predicates such as "
            "\"region = 'eu' and id >= 10\", \"id in (1, 2)\" or \"name is not null\", joined by and/or"
        )

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _next(self, what: str) -> tuple[str, str]:
        tok = self._peek()
        if tok is None:
            self._fail(f"expected {what} at the end")
        assert tok is not None
        self.i += 1
        return tok

    def _word(self, *words: str) -> bool:
        tok = self._peek()
        if tok is not None and tok[0] == "word" and tok[1].lower() in words:
            self.i += 1
            return True
        return False

    def parse(self) -> tuple[tuple[Predicate, ...], ...]:
        if not self.tokens:
            self._fail("it is empty")
        out = [self._conjunction()]
        while self._word("or"):
            out.append(self._conjunction())
        if self._peek() is not None:
            self._fail(f"unexpected {self._peek()[1]!r}")  # type: ignore[index]
        return tuple(out)

    def _conjunction(self) -> tuple[Predicate, ...]:
        preds = [self._predicate()]
        while self._word("and"):
            preds.append(self._predicate())
        return tuple(preds)

    def _predicate(self) -> Predicate:
        kind, text = self._next("a column name")
        if kind not in ("word", "qid"):
            self._fail(f"expected a column name, got {text!r}")
        column = text[1:-1] if kind == "qid" else text
        if self._word("is"):
            negated = self._word("not")
            if not self._word("null"):
                self._fail(f"expected null after {column} is")
            return Predicate(column, "is not null" if negated else "is null")
        negated = self._word("not")
        if self._word("in"):
            return Predicate(column, "not in" if negated else "in", self._list())
        if negated:
            self._fail(f"expected in after {column} not")
        kind, op = self._next("an operator")
        if kind != "op":
            self._fail(f"expected an operator after {column}, got {op!r}")
        return Predicate(column, op, self._literal())

    def _list(self) -> tuple[Any, ...]:
        if self._next("(") != ("punct", "("):
            self._fail("expected ( after in")
        values = [self._literal()]
        while True:
            tok = self._next(") or ,")
            if tok == ("punct", ")"):
                return tuple(values)
            if tok != ("punct", ","):
                self._fail(f"expected , or ) in a list, got {tok[1]!r}")
            values.append(self._literal())

    def _literal(self) -> Any:
        kind, text = self._next("a value")
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "word":
            low = text.lower()
            if low in ("true", "false"):
                return low == "true"
            if low == "null":
                return None
            if low in ("date", "timestamp"):  # a typed literal: the string is cast to the column's type
                kind, text = self._next("a quoted value")
                if kind == "str":
                    return text[1:-1]
        self._fail(f"expected a value ('text', a number, true/false, date '...'), got {text!r}")
        return None
