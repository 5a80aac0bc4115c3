"""Targets: declared in policy files, table properties and on the command line, validated, compared."""

from __future__ import annotations

import pytest

from maintd.errors import PolicyError
from maintd.planner.policy_files import default_policy, parse_policy
from maintd.planner.targets import TARGET_NAMES, Targets, parse_target_args


def test_the_packaged_default_declares_no_target() -> None:
    policy = default_policy()
    assert policy.target == Targets()
    assert not policy.target.any()


def test_targets_come_from_table_properties_over_policy_rules() -> None:
    pf = parse_policy("""
default:
  target:
    merge_delay_minutes: 30
tables:
  - match: "sales*"
    overrides:
      target:
        read_files_per_bucket: 8
""")
    resolved = pf.resolve(name="sales", properties={"maintd.target.read_files_per_bucket": "6",
                                                    "maintd.target.write_amplification": "3.5"})
    assert resolved.policy.target.declared() == {"read_files_per_bucket": 6.0, "merge_delay_minutes": 30.0,
                                                 "write_amplification": 3.5}
    assert pf.resolve(name="other").policy.target.declared() == {"merge_delay_minutes": 30.0}


@pytest.mark.parametrize(("key", "value", "words"), [
    ("maintd.target.read_files_per_bucket", "0", "greater than or equal to 1"),
    ("maintd.target.merge_delay_minutes", "soon", "valid number"),
    ("maintd.target.write_amplification", "0", "greater than 0"),
    ("maintd.target.reads", "3", "Extra inputs"),
])
def test_an_invalid_target_property_names_the_key(key: str, value: str, words: str) -> None:
    pf = parse_policy("default: {}\n")
    with pytest.raises(PolicyError) as e:
        pf.resolve(name="t", properties={key: value})
    assert key in str(e.value) and words in str(e.value)


def test_command_line_targets_merge_over_declared_ones() -> None:
    base = Targets(read_files_per_bucket=8, merge_delay_minutes=60)
    t = parse_target_args(["read_files_per_bucket=6", "maintd.target.write_amplification=4"], base=base)
    assert t.declared() == {"read_files_per_bucket": 6.0, "merge_delay_minutes": 60.0, "write_amplification": 4.0}


@pytest.mark.parametrize(("item", "words"), [
    ("read_files_per_bucket", "NAME=VALUE"),
    ("read_files=6", "unknown target 'read_files'"),
    ("merge_delay_minutes=-1", "greater than 0"),
    ("write_amplification=", "NAME=VALUE"),
])
def test_bad_command_line_targets_say_what_to_give(item: str, words: str) -> None:
    with pytest.raises(PolicyError) as e:
        parse_target_args([item])
    assert words in str(e.value)
    assert "read_files_per_bucket" in str(e.value) or "invalid target" in str(e.value)


def test_gaps_are_relative_and_missed_targets_come_largest_first() -> None:
    t = Targets(read_files_per_bucket=5, merge_delay_minutes=30, write_amplification=4)
    measured = {"read_files_per_bucket": 10.0, "merge_delay_minutes": 36.0, "write_amplification": 2.0}
    gaps = t.gaps(measured)
    assert gaps["read_files_per_bucket"] == pytest.approx(1.0)
    assert gaps["merge_delay_minutes"] == pytest.approx(0.2)
    assert gaps["write_amplification"] == pytest.approx(-0.5)
    assert t.missed(measured) == ["read_files_per_bucket", "merge_delay_minutes"]
    assert Targets(read_files_per_bucket=5).gaps({}) == {}
    assert set(TARGET_NAMES) == set(Targets.model_fields)
