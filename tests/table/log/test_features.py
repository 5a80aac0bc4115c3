"""The feature registry (maintd/table/log/features.py) against the feature table of docs/format.md ("Table
features"), and what each protocol supports: legacy versions and their bundles, named features and their
dependencies, what enabling a feature or an upgrade commits, the formats, and how a protocol is written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from maintd.table.log import features
from maintd.table.log.actions import Protocol, action_to_json

DOC = Path(__file__).resolve().parents[3] / "docs" / "format.md"
NAMES = (features.PINS, features.PRIOR_ROWS, features.LOOKED_UP_PRIOR_ROWS, features.ADDED_COLUMNS)


def named(*names: str, reader: tuple[str, ...] | None = None) -> Protocol:
    """Protocol 7 listing ``names`` (all of them reader features unless ``reader`` says otherwise)."""
    return Protocol(min_reader_version=7, min_writer_version=7, reader_features=tuple(names) if reader is None
                    else reader, writer_features=tuple(names))


def legacy(version: int) -> Protocol:
    return Protocol(min_reader_version=version, min_writer_version=version)


# -- the feature table of docs/format.md ---------------------------------------------------------------------------


def doc_feature_table() -> dict[str, tuple[str, tuple[str, ...], int]]:
    """The table between the ``feature-table`` markers of docs/format.md: name -> (kind, depends on, legacy)."""
    body = DOC.read_text().split("<!-- feature-table:begin -->", 1)[1].split("<!-- feature-table:end -->", 1)[0]
    lines = [ln.strip() for ln in body.strip().splitlines() if ln.strip().startswith("|")]

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip("|").split("|")]

    assert cells(lines[0])[:4] == ["feature", "kind", "depends on", "legacy version"]
    out = {}
    for line in lines[2:]:
        name, kind, depends, version, *_ = cells(line)
        deps = tuple(sorted(re.findall(r"`(\w+)`", depends)))
        out[name.strip("`")] = (kind, deps, int(version))
    return out


def test_the_doc_shows_the_registry() -> None:
    registry = {f.name: (f.kind, tuple(sorted(f.requires)), f.legacy_version) for f in features.REGISTRY.values()}
    assert doc_feature_table() == registry
    assert set(registry) == set(NAMES)
    for f in features.REGISTRY.values():  # a one-line description, used in errors
        assert f.description and "\n" not in f.description and f.kind in ("reader-writer", "writer")
        assert all(d in features.REGISTRY for d in f.requires)


# -- what a protocol supports ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "implied"), [
    (1, set()), (2, set()), (3, {"pins"}), (4, {"pins", "priorRows"}),
    (5, {"pins", "priorRows", "lookedUpPriorRows"}), (6, {"pins", "priorRows", "lookedUpPriorRows", "addedColumns"}),
])
def test_legacy_versions_imply_their_bundles(version: int, implied: set[str]) -> None:
    assert features.features_of(legacy(version)) == implied
    assert {n for n in NAMES if features.supports(legacy(version), n)} == implied
    assert features.implied_by_legacy(version) == implied
    # a feature is implied only when both versions imply it
    assert features.features_of(Protocol(min_reader_version=version, min_writer_version=2)) == set()


def test_a_named_protocol_supports_exactly_what_it_lists() -> None:
    for name in NAMES:
        assert features.features_of(named(name)) == {name}
    assert features.features_of(named()) == set()
    assert features.supports(named("pins", "addedColumns"), "addedColumns")
    assert not features.supports(named("lookedUpPriorRows", "priorRows"), "pins")


def test_dependencies_come_along() -> None:
    assert features.closure(["lookedUpPriorRows"]) == {"lookedUpPriorRows", "priorRows"}
    assert features.closure(["pins", "addedColumns"]) == {"pins", "addedColumns"}
    assert features.named(["lookedUpPriorRows"]) == named("lookedUpPriorRows", "priorRows")


def test_enabling_a_feature_keeps_a_legacy_table_legacy_and_gives_a_named_one_exactly_it() -> None:
    assert features.require(legacy(2), "pins") == legacy(3)
    assert features.require(legacy(3), "priorRows") == legacy(4)
    assert features.require(legacy(2), "lookedUpPriorRows") == legacy(5)
    assert features.require(legacy(5), "addedColumns") == legacy(6)
    assert features.require(legacy(1), "pins") == legacy(3)
    assert features.require(legacy(4), "pins") is None and features.require(legacy(6), "priorRows") is None
    assert features.require(Protocol(min_reader_version=2, min_writer_version=4), "pins") == Protocol(
        min_reader_version=3, min_writer_version=4), "never lowered"
    assert features.require(named(), "pins") == named("pins")
    assert features.require(named("pins"), "lookedUpPriorRows") == named("lookedUpPriorRows", "pins", "priorRows")
    assert features.require(named("priorRows"), "priorRows") is None
    # an unknown writer-only feature of the table is kept as it is
    assert features.require(named("zzz", reader=()), "pins") == named("pins", "zzz", reader=("pins",))


def test_an_upgrade_keeps_what_the_legacy_version_implied() -> None:
    assert features.upgrade(legacy(1)) == named()
    assert features.upgrade(legacy(2)) == named()
    assert features.upgrade(legacy(4)) == named("pins", "priorRows")
    assert features.upgrade(legacy(6)) == named(*sorted(NAMES))
    assert features.upgrade(legacy(3), ["lookedUpPriorRows"]) == named("lookedUpPriorRows", "pins", "priorRows")
    assert features.upgrade(named("pins")) is None and features.upgrade(named("pins"), ["pins"]) is None
    assert features.upgrade(named("pins"), ["addedColumns"]) == named("addedColumns", "pins")


def test_formats_stay_as_they_were_for_legacy_tables_and_are_7_on_named_features() -> None:
    assert [features.commit_format(legacy(v)) for v in range(1, 7)] == [1, 2, 3, 4, 5, 6]
    assert [features.checkpoint_format(legacy(v)) for v in range(1, 7)] == [2, 2, 3, 4, 5, 6]
    assert features.commit_format(named()) == features.checkpoint_format(named("pins")) == 7


def test_a_legacy_protocol_serialises_as_it_always_did_and_a_named_one_lists_its_features() -> None:
    assert action_to_json(legacy(2)) == '{"protocol":{"min_reader_version":2,"min_writer_version":2}}'
    assert action_to_json(named("lookedUpPriorRows", "priorRows")) == (
        '{"protocol":{"min_reader_version":7,"min_writer_version":7,"reader_features":["lookedUpPriorRows",'
        '"priorRows"],"writer_features":["lookedUpPriorRows","priorRows"]}}')
    assert Protocol.model_validate_json(named("pins").model_dump_json()) == named("pins")
