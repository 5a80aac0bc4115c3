"""Named table features: the registry, and the one answer to "does this table's protocol support feature F"
(docs/format.md, "Table features").

A table of a *legacy* protocol (versions 1 to 6) supports the bundle its number implies: every feature whose
``legacy_version`` is at most both its reader and its writer version (3: ``pins``; 4: also ``priorRows``; 5: also
``lookedUpPriorRows``; 6: also ``addedColumns``). A table of the *table-features* protocol (version 7,
:data:`~maintd.table.log.actions.FEATURES_VERSION`) supports exactly the features its ``protocol`` action lists.
Every other module asks here (:func:`supports`, :func:`require`, :func:`commit_format`, ...) rather than comparing
version numbers, so that both kinds of table follow one rule.

Enabling a feature (:func:`require`) keeps a legacy table legacy: it is raised to the version that implies the
feature (a first pin raises a protocol-2 table to 3, as before), so that tables of older protocols keep the
readers they had. A table on named features gains exactly the feature and what it depends on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from maintd.errors import InvalidInputError
from maintd.table.log.actions import FEATURES_VERSION, READER_VERSION, WRITER_VERSION, Protocol

LEGACY_FORMAT = 6
"""The newest commit-file and checkpoint format of a legacy table (its format is its protocol version)."""
FEATURES_FORMAT = FEATURES_VERSION
"""The commit-file and checkpoint format of every table-features table: maintd that knows no named features
refuses its files by this number before it meets anything it does not know."""

FeatureKind = Literal["reader-writer", "writer"]


@dataclass(frozen=True)
class Feature:
    """One named feature.

    ``kind``: ``reader-writer`` if a reader must know it to read the table correctly (it is then listed in both
    ``reader_features`` and ``writer_features``), ``writer`` if only writers must (``writer_features`` only).
    ``requires``: the features it depends on (enabling it enables them). ``legacy_version``: the legacy protocol
    version from which on a table implies it. ``description``: one line, used in errors and listings.
    """

    name: str
    kind: FeatureKind
    requires: tuple[str, ...]
    legacy_version: int
    description: str

    @property
    def reader(self) -> bool:
        return self.kind == "reader-writer"


PINS = "pins"
PRIOR_ROWS = "priorRows"
LOOKED_UP_PRIOR_ROWS = "lookedUpPriorRows"
ADDED_COLUMNS = "addedColumns"

REGISTRY: Mapping[str, Feature] = MappingProxyType({f.name: f for f in (
    Feature(PINS, "reader-writer", (), 3,
            "pinned versions: pin, unpin and expire actions, honoured by reclamation"),
    Feature(PRIOR_ROWS, "reader-writer", (), 4,
            "prior-rows files that compactions store for the change feed"),
    Feature(LOOKED_UP_PRIOR_ROWS, "reader-writer", (PRIOR_ROWS,), 5,
            "looked-up prior-rows files that clusterings add while their BaseFiles stay live"),
    Feature(ADDED_COLUMNS, "reader-writer", (), 6,
            "columns added to the schema after create, which older data files lack and read as nulls"),
)})
"""Every feature this code implements, by name."""


def known(names: Iterable[str], *, table: str) -> tuple[str, ...]:
    """``names`` checked against the registry, sorted and without duplicates.

    Raises:
        InvalidInputError: a name is not a feature this maintd knows (naming it and the known ones).
    """
    names = sorted(set(names))
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        listed = "; ".join(f"{f.name} ({f.description})" for f in REGISTRY.values())
        raise InvalidInputError(f"table {table}: unknown table feature{'s' if len(unknown) > 1 else ''} "
                                f"{', '.join(unknown)}; the features this maintd knows are: {listed}")
    return tuple(names)


def closure(names: Iterable[str]) -> frozenset[str]:
    """``names`` with every feature they depend on, transitively (names must be known)."""
    out: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(REGISTRY[name].requires)
    return frozenset(out)


def implied_by_legacy(version: int) -> frozenset[str]:
    """The features a legacy protocol of ``version`` implies."""
    return frozenset(f.name for f in REGISTRY.values() if f.legacy_version <= version)


def features_of(protocol: Protocol) -> frozenset[str]:
    """Every feature ``protocol`` supports: the listed ones at version 7 (unknown names too), the implied ones below
    (a feature is implied when both the reader and the writer version imply it)."""
    if protocol.table_features:
        return frozenset(protocol.writer_features or ()) | frozenset(protocol.reader_features or ())
    return implied_by_legacy(min(protocol.min_reader_version, protocol.min_writer_version))


def supports(protocol: Protocol, feature: str) -> bool:
    """Whether a table of ``protocol`` supports (may hold what needs) ``feature``."""
    return feature in features_of(protocol)


def unsupported_version(protocol: Protocol, *, write: bool) -> int | None:
    """The reader (``write``: writer) version ``protocol`` requires when it is newer than this code implements (the
    table is refused by that number), else None."""
    required = protocol.min_writer_version if write else protocol.min_reader_version
    return required if required > (WRITER_VERSION if write else READER_VERSION) else None


def unknown_reader_features(protocol: Protocol) -> tuple[str, ...]:
    """The reader features of ``protocol`` this code does not know (a reader must refuse the table)."""
    return tuple(n for n in protocol.reader_features or () if n not in REGISTRY) if protocol.table_features else ()


def unknown_writer_features(protocol: Protocol) -> tuple[str, ...]:
    """Every feature of ``protocol`` this code does not know, reader ones included (a writer must refuse)."""
    if not protocol.table_features:
        return ()
    listed = dict.fromkeys([*(protocol.reader_features or ()), *(protocol.writer_features or ())])
    return tuple(n for n in listed if n not in REGISTRY)


def named(features: Iterable[str]) -> Protocol:
    """The table-features protocol listing ``features`` (known names) and what they depend on."""
    full = closure(features)
    reader = tuple(sorted(n for n in full if REGISTRY[n].reader))
    return Protocol(min_reader_version=FEATURES_VERSION, min_writer_version=FEATURES_VERSION,
                    reader_features=reader, writer_features=tuple(sorted(full)))


def require(protocol: Protocol, feature: str) -> Protocol | None:
    """The protocol a table of ``protocol`` needs to use ``feature``; None when it supports it already.

    A legacy table is raised to the legacy version that implies the feature (never lowered); a table on named
    features gains exactly the feature and what it depends on.
    """
    if supports(protocol, feature):
        return None
    if protocol.table_features:
        extra = closure([feature]) - features_of(protocol)
        return _with(protocol, extra)
    needed = REGISTRY[feature].legacy_version
    return Protocol(min_reader_version=max(protocol.min_reader_version, needed),
                    min_writer_version=max(protocol.min_writer_version, needed))


def _with(protocol: Protocol, extra: Iterable[str]) -> Protocol:
    """``protocol`` (version 7) with features ``extra`` (known, dependencies included) added to its lists."""
    extra = set(extra)
    reader = {*(protocol.reader_features or ()), *(n for n in extra if REGISTRY[n].reader)}
    writer = {*(protocol.writer_features or ()), *extra}
    return Protocol(min_reader_version=FEATURES_VERSION, min_writer_version=FEATURES_VERSION,
                    reader_features=tuple(sorted(reader)), writer_features=tuple(sorted(writer)))


def upgrade(protocol: Protocol, features: Iterable[str] = ()) -> Protocol | None:
    """The table-features protocol a table of ``protocol`` is upgraded to: every feature it supports (a legacy
    table: the bundle its version implied, so nothing is lost) plus ``features`` (known names) and what they
    depend on; None when ``protocol`` is on named features already and supports them all."""
    extra = closure(features)
    if protocol.table_features:
        missing = extra - features_of(protocol)
        return _with(protocol, missing) if missing else None
    return named(features_of(protocol) | extra)


def for_new_table(features: Iterable[str] | None, needed: Iterable[str] = ()) -> Protocol:
    """The protocol of a new table: legacy (the base version 2, or the one that implies every feature of ``needed``,
    which its properties need) when ``features`` is None; else named features ``features`` and ``needed``."""
    if features is not None:
        return named({*features, *needed})
    protocol = Protocol()
    for name in needed:
        protocol = require(protocol, name) or protocol
    return protocol


def commit_format(protocol: Protocol) -> int:
    """The commit file format of a table of ``protocol``: its writer version for a legacy table (1 to 6), 7 for a
    table on named features."""
    if protocol.table_features:
        return FEATURES_FORMAT
    return max(1, min(protocol.min_writer_version, LEGACY_FORMAT))


def checkpoint_format(protocol: Protocol) -> int:
    """The checkpoint format of a table of ``protocol``: 2 for legacy tables below reader version 3, else their reader
    version (3 to 6); 7 for a table on named features."""
    if protocol.table_features:
        return FEATURES_FORMAT
    reader = protocol.min_reader_version
    return min(reader, LEGACY_FORMAT) if reader >= 3 else 2


def describe(protocol: Protocol) -> str:
    """A short human description: ``reader 2, writer 2`` or ``reader 7, writer 7 (features pins, priorRows)``."""
    base = f"reader {protocol.min_reader_version}, writer {protocol.min_writer_version}"
    if not protocol.table_features:
        return base
    return f"{base} (features {', '.join(sorted(features_of(protocol))) or 'none'})"


__all__ = ["ADDED_COLUMNS", "FEATURES_FORMAT", "LEGACY_FORMAT", "LOOKED_UP_PRIOR_ROWS", "PINS", "PRIOR_ROWS",
           "REGISTRY", "Feature", "FeatureKind", "checkpoint_format", "closure", "commit_format", "describe",
           "features_of", "for_new_table", "implied_by_legacy", "known", "named", "require", "supports",
           "unknown_reader_features", "unknown_writer_features", "unsupported_version", "upgrade"]
