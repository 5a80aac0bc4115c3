"""Policy loading: defaults, per-table matching, property overrides, and every kind of bad policy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from maintd.errors import PolicyError
from maintd.planner import default_policy, load_policy_file, parse_policy, policy_yaml
from maintd.planner.policy_files import property_overrides

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024


def _leaves(d: dict, prefix: str = "") -> list[str]:  # type: ignore[type-arg]
    out = []
    for k, v in d.items():
        out += _leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]
    return out


def test_the_packaged_default_is_a_byte_identical_copy_of_policies_default_yaml() -> None:
    assert (ROOT / "maintd/defaults/default.yaml").read_bytes() == (ROOT / "policies/default.yaml").read_bytes()


def test_default_yaml_sets_every_knob_of_the_model_with_a_comment() -> None:
    text = (ROOT / "policies/default.yaml").read_text()
    raw = yaml.safe_load(text)["default"]
    assert sorted(_leaves(raw)) == sorted(_leaves(default_policy().model_dump()))
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^\s+(\w+):\s*\S", line)
        if m and not line.strip().startswith("#"):
            assert lines[i - 1].strip().startswith("#"), f"knob {m.group(1)} has no comment above it"


def test_docs_reference_names_every_knob() -> None:
    doc = (ROOT / "docs/policies.md").read_text()
    for knob in _leaves(default_policy().model_dump()):
        section, _, name = knob.partition(".")
        assert f"`{section}`" in doc and f"| `{name}` |" in doc, knob


def test_defaults_are_the_sensible_reference_values() -> None:
    p = default_policy()
    assert p.clustering.level1.min_files == 12 and p.clustering.level1.max_age_hours == 1
    assert p.clustering.level1.target_bytes == 32 * MiB and p.clustering.level2.target_bytes == 128 * MiB
    assert p.compaction.delta_base_ratio == 0.5 and p.compaction.update_delete_share == 0.3
    assert p.budget.max_bytes == 16 * 1024**3 and p.budget.max_tasks == 1000


def test_a_policy_file_overrides_defaults_and_matches_tables_by_name_or_uri_glob() -> None:
    pf = parse_policy("""
default:
  clustering: {level1: {min_files: 6}}
tables:
  - match: "sales.*"
    overrides: {clustering: {level1: {min_files: 3}}}
  - match: "s3://lake/raw/*"
    overrides: {compaction: {enabled: false}}
""", "p.yaml")
    assert pf.resolve(name="other", uri="file:///x").policy.clustering.level1.min_files == 6
    sales = pf.resolve(name="sales.orders", uri="file:///x")
    assert sales.policy.clustering.level1.min_files == 3 and sales.name == "p.yaml + tables[0] (sales.*)"
    raw = pf.resolve(name="t", uri="s3://lake/raw/t")
    assert raw.policy.compaction.enabled is False and raw.policy.clustering.level1.min_files == 6


def test_table_properties_override_the_file_and_the_name_says_so() -> None:
    pf = parse_policy("tables: [{match: 'a*', overrides: {clustering: {level1: {min_files: 3}}}}]", "p.yaml")
    r = pf.resolve(name="ab", properties={"maintd.clustering.level1.min_files": "4",
                                          "maintd.clustering.isolation_bytes": "512 MiB",
                                          "acid.data.retain.hours": "24"})
    assert r.policy.clustering.level1.min_files == 4 and r.policy.clustering.isolation_bytes == 512 * MiB
    assert r.name.endswith("+ table properties")


def test_sizes_accept_units() -> None:
    pf = parse_policy("default: {budget: {max_bytes: 2 GB}, ranking: {file_cost_bytes: '1.5 KiB'}}")
    assert pf.default.budget.max_bytes == 2 * 10**9 and pf.default.ranking.file_cost_bytes == 1536


def test_effective_policy_prints_as_yaml_that_loads_back() -> None:
    p = default_policy()
    assert parse_policy("default:\n" + "\n".join("  " + x for x in policy_yaml(p).splitlines())).default == p


def test_an_empty_file_means_the_defaults() -> None:
    assert parse_policy("", "empty.yaml").default == default_policy()


BAD = [
    ("unknown key", "default: {clustering: {min_filez: 3}}", "key clustering.min_filez: Extra inputs"),
    ("unknown section", "default: {vacuum: {x: 1}}", "key vacuum: Extra inputs"),
    ("unknown top-level key", "defaults: {}", "unknown top-level key(s) defaults"),
    ("wrong type", "default: {clustering: {level1: {min_files: many}}}", "key clustering.level1.min_files"),
    ("wrong type for bool", "default: {compaction: {enabled: [1]}}", "key compaction.enabled"),
    ("negative size", "default: {clustering: {isolation_bytes: -1}}", "greater than 0"),
    ("negative size with unit", "default: {budget: {max_bytes: -1 GiB}}", "key budget.max_bytes"),
    ("bad unit", "default: {budget: {max_bytes: 3 parsecs}}", "is not a size"),
    ("min > max levels", "default: {clustering: {level1: {target_bytes: 256 MiB}, level2: {target_bytes: 128 MiB}}}",
     "level1.target_bytes (268435456) must be <= level2.target_bytes"),
    ("min > max intervals", "default: {compaction: {min_interval_hours: 48}}",
     "min_interval_hours (48.0) must be <= max_interval_hours"),
    ("target above isolation", "default: {clustering: {isolation_bytes: 64 MiB}}",
     "level2.target_bytes (134217728) must be <= isolation_bytes"),
    ("min_files above max_input_files", "default: {clustering: {max_input_files: 5}}",
     "level1.min_files (12) must be <= max_input_files"),
    ("ratio out of range", "default: {compaction: {update_delete_share: 1.5}}", "key compaction.update_delete_share"),
    ("ratio zero", "default: {compaction: {update_delete_share: 0}}", "greater than 0"),
    ("zero that would divide", "default: {ranking: {file_cost_bytes: 0}}", "key ranking.file_cost_bytes"),
    ("zero delta/base ratio", "default: {compaction: {delta_base_ratio: 0}}", "key compaction.delta_base_ratio"),
    ("zero budget", "default: {budget: {max_tasks: 0}}", "key budget.max_tasks"),
    ("min_files of one", "default: {clustering: {level2: {min_files: 1}}}", "greater than or equal to 2"),
    ("zero time span", "default: {clustering: {max_time_span_hours: 0}}", "key clustering.max_time_span_hours"),
    ("not yaml", "default: {", "not valid YAML"),
    ("not a mapping", "- 1", "a policy file is a mapping"),
    ("section not a mapping", "default: 3", "key default: must be a mapping"),
    ("tables not a list", "tables: {a: 1}", "key tables: must be a list"),
    ("rule without match", "tables: [{overrides: {}}]", "key tables[0]: must be a mapping with 'match'"),
    ("rule with empty match", "tables: [{match: '', overrides: {}}]", "key tables[0].match"),
]


@pytest.mark.parametrize(("case", "text", "expected"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_policy_names_the_file_the_key_and_the_rule(case: str, text: str, expected: str) -> None:
    with pytest.raises(PolicyError) as e:
        parse_policy(text, "policies/bad.yaml")
    assert str(e.value).startswith("policies/bad.yaml"), case
    assert expected in str(e.value), str(e.value)


def test_a_bad_table_rule_fails_only_the_tables_it_matches() -> None:
    pf = parse_policy("tables: [{match: 'bad*', overrides: {clustering: {level1: {min_files: 0}}}}]", "p.yaml")
    assert pf.resolve(name="good").policy == default_policy()
    with pytest.raises(PolicyError, match=r"table bad1: p.yaml: key tables\[0\].overrides \(bad\*\).*"
                                          r"key clustering.level1.min_files"):
        pf.resolve(name="bad1")


def test_a_bad_table_property_names_the_property_and_fails_only_that_table() -> None:
    pf = load_policy_file()
    with pytest.raises(PolicyError, match=r"table t: maintd.\* table properties: .*key maintd.compaction.ratio: Extra"):
        pf.resolve(name="t", properties={"maintd.compaction.ratio": "1"})
    with pytest.raises(PolicyError, match=r"maintd\.budget\.max_tasks"):
        pf.resolve(name="t", properties={"maintd.budget.max_tasks": "-3"})
    assert pf.resolve(name="u").policy == default_policy()


def test_a_property_that_is_both_a_knob_and_a_section_is_rejected() -> None:
    with pytest.raises(PolicyError, match="is a knob, not a section"):
        property_overrides({"maintd.budget": "1", "maintd.budget.max_tasks": "2"}, "t")


def test_a_missing_policy_file_is_a_policy_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"nope\.yaml: cannot read"):
        load_policy_file(tmp_path / "nope.yaml")


def test_policies_default_yaml_loads_as_a_policy_file() -> None:
    assert load_policy_file(ROOT / "policies/default.yaml").default == default_policy()


def test_the_planner_exports_exactly_its_public_names() -> None:
    import maintd.planner as planner

    assert sorted(planner.__all__) == sorted(
        ["BucketDecision", "BucketStats", "MaintenancePlan", "PlanTask", "Policy", "PolicyFile", "ResolvedPolicy",
         "bucket_stats", "decide", "default_policy", "load_policy_file", "next_time_trigger", "parse_policy", "plan",
         "plan_buckets",
         "policy_yaml", "with_overrides"])
    assert all(hasattr(planner, n) for n in planner.__all__)
