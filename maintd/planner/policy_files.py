"""Policy files: loading YAML, merging overrides, matching tables, and naming every error.

A policy file has a ``default:`` section (merged over the packaged defaults) and a ``tables:`` list
of ``{match, overrides}`` entries matched by glob on the table name or URI; table properties
``maintd.<section>.<knob>`` override both. Each table entry is validated when the file is loaded,
but a bad entry only fails the tables it matches: one wrong override never stops the others.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from maintd.errors import PolicyError
from maintd.planner.policy import Policy

PROPERTY_PREFIX = "maintd."
PACKAGED_DEFAULT = "maintd/defaults/default.yaml"
_TOP_KEYS = ("default", "tables")


@dataclass(frozen=True)
class TableRule:
    """One ``tables:`` entry; ``error`` is set when its overrides are invalid (raised for matching tables)."""

    index: int
    match: str
    overrides: Mapping[str, Any]
    error: str | None = None

    def matches(self, name: str, uri: str) -> bool:
        return any(fnmatch.fnmatchcase(s, self.match) for s in (name, uri) if s)


@dataclass(frozen=True)
class ResolvedPolicy:
    """The effective policy of one table and where it came from (``name``)."""

    name: str
    policy: Policy
    tuned: tuple[str, ...] = ()
    """The knobs (dotted paths) whose value came from the daemon's tuning (explicit properties excluded)."""


@dataclass(frozen=True)
class PolicyFile:
    """A loaded policy file: validated defaults and per-table rules."""

    source: str
    raw_default: Mapping[str, Any]
    default: Policy
    rules: tuple[TableRule, ...] = ()

    def resolve(self, *, name: str = "", uri: str = "", properties: Mapping[str, str] | None = None,
                tuned: Mapping[str, Any] | None = None) -> ResolvedPolicy:
        """The effective policy of a table: defaults, matching rules in order, the knobs the daemon tuned
        (``tuned``, nested), then ``maintd.*`` properties: an operator's explicit knob always wins.

        Raises:
            PolicyError: a matching rule or a ``maintd.*`` property is invalid (names file, key, rule).
        """
        table = name or uri
        merged: dict[str, Any] = copy.deepcopy(dict(self.raw_default))
        parts = [Path(self.source).name]
        for rule in self.rules:
            if not rule.matches(name, uri):
                continue
            if rule.error is not None:
                raise PolicyError(f"table {table}: {rule.error}")
            merged = deep_merge(merged, rule.overrides)
            parts.append(f"tables[{rule.index}] ({rule.match})")
        policy = validate_policy(merged, where=f"table {table}: {' + '.join([self.source, *parts[1:]])}")
        extra = property_overrides(properties or {}, table)
        explicit = set(knob_paths(extra))
        kept = [k for k in knob_paths(tuned or {}) if k not in explicit]
        if kept:
            try:  # tuned against an earlier policy file, they may no longer fit it: then they are left out
                policy = validate_policy(deep_merge(merged, tuned or {}), where=f"table {table}: tuned knobs")
                merged = deep_merge(merged, tuned or {})
                parts.append("tuned")
            except PolicyError:
                kept = []
                parts.append("tuned knobs left out (invalid with this policy)")
        if extra:
            policy = validate_policy(deep_merge(merged, extra), where=f"table {table}: maintd.* table properties",
                                     prefix=PROPERTY_PREFIX)
            parts.append("table properties")
        return ResolvedPolicy(" + ".join(parts), policy, tuple(kept))


def knob_paths(nested: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths of the leaves of a nested mapping (``{"a": {"b": 1}}`` -> ``["a.b"]``)."""
    out: list[str] = []
    for k, v in nested.items():
        path = f"{prefix}{k}"
        out.extend(knob_paths(v, path + ".") if isinstance(v, Mapping) else [path])
    return out


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in: mappings recursively, anything else replaced."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def validate_policy(raw: Mapping[str, Any], *, where: str, prefix: str = "") -> Policy:
    """Validate a merged policy mapping; errors name ``where``, each key and the rule broken."""
    try:
        return Policy.model_validate(raw)
    except ValidationError as e:
        lines = [f"key {prefix}{_loc(err['loc'])}: {err['msg']} (got {err.get('input')!r})"
                 if err["type"] != "value_error" else f"key {prefix}{_loc(err['loc'])}: {err['msg']}"
                 for err in e.errors(include_url=False)]
        raise PolicyError(f"{where}: invalid policy: " + "; ".join(lines)) from None


def property_overrides(properties: Mapping[str, str], table: str = "") -> dict[str, Any]:
    """Nest ``maintd.a.b.c=v`` properties into ``{"a": {"b": {"c": "v"}}}`` (values stay strings)."""
    out: dict[str, Any] = {}
    for key in sorted(properties):
        if not key.startswith(PROPERTY_PREFIX):
            continue
        *path, leaf = key[len(PROPERTY_PREFIX):].split(".")
        node = out
        for p in path:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                raise PolicyError(f"table {table}: table property {key}: {PROPERTY_PREFIX}{'.'.join(path)} is a "
                                  f"knob, not a section; remove one of the two properties")
            node = child
        if isinstance(node.get(leaf), dict):
            raise PolicyError(f"table {table}: table property {key} names a section; set its knobs one by one")
        node[leaf] = properties[key]
    return out


#: libyaml's safe loader when PyYAML was built with it: the pure-Python one takes longer to parse the packaged
#: defaults than ``maintd plan`` takes to plan a small table.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        raw = yaml.load(text, Loader=_SAFE_LOADER)  # a safe loader: plain data only
    except yaml.YAMLError as e:
        raise PolicyError(f"{source}: not valid YAML: {e}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: a policy file is a mapping with keys {', '.join(_TOP_KEYS)}")
    unknown = sorted(set(raw) - set(_TOP_KEYS))
    if unknown:
        raise PolicyError(f"{source}: unknown top-level key(s) {', '.join(map(str, unknown))}; "
                          f"allowed: {', '.join(_TOP_KEYS)}")
    return raw


def _packaged_default_raw() -> dict[str, Any]:
    text = resources.files("maintd").joinpath("defaults/default.yaml").read_text(encoding="utf-8")
    raw = _read_yaml(text, PACKAGED_DEFAULT)
    default = raw.get("default")
    if not isinstance(default, dict):
        raise PolicyError(f"{PACKAGED_DEFAULT}: key default: must be a mapping")
    return default


def _rules(raw: Any, default: Mapping[str, Any], source: str) -> tuple[TableRule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PolicyError(f"{source}: key tables: must be a list of {{match, overrides}} entries")
    rules = []
    for i, entry in enumerate(raw):
        where = f"{source}: key tables[{i}]"
        if not isinstance(entry, dict) or set(entry) - {"match", "overrides"} or "match" not in entry:
            raise PolicyError(f"{where}: must be a mapping with 'match' (a glob) and 'overrides' (a mapping)")
        match, overrides = entry["match"], entry.get("overrides") or {}
        if not isinstance(match, str) or not match:
            raise PolicyError(f"{where}.match: must be a non-empty glob string")
        if not isinstance(overrides, dict):
            raise PolicyError(f"{where}.overrides: must be a mapping")
        error = None
        try:
            validate_policy(deep_merge(default, overrides), where=f"{where}.overrides ({match})")
        except PolicyError as e:
            error = str(e)
        rules.append(TableRule(i, match, overrides, error))
    return tuple(rules)


def parse_policy(text: str, source: str = "<policy>") -> PolicyFile:
    """Parse policy YAML text: ``default:`` merged over the packaged defaults, ``tables:`` as rules.

    Raises:
        PolicyError: the YAML, its shape or its ``default:`` section is invalid (naming source and key).
    """
    raw = _read_yaml(text, source)
    base = _packaged_default_raw()
    own = raw.get("default") or {}
    if not isinstance(own, dict):
        raise PolicyError(f"{source}: key default: must be a mapping of sections")
    merged = deep_merge(base, own)
    policy = validate_policy(merged, where=f"{source}: section default")
    return PolicyFile(source, merged, policy, _rules(raw.get("tables"), merged, source))


@functools.cache
def _packaged_policy_file() -> PolicyFile:
    """The packaged defaults, parsed once per process (a :class:`PolicyFile` is immutable)."""
    text = resources.files("maintd").joinpath("defaults/default.yaml").read_text(encoding="utf-8")
    return parse_policy(text, PACKAGED_DEFAULT)


def load_policy_file(path: str | Path | None = None) -> PolicyFile:
    """Load a policy file, or the packaged defaults when ``path`` is None."""
    if path is None:
        return _packaged_policy_file()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise PolicyError(f"{path}: cannot read policy file: {e.strerror or e}") from None
    return parse_policy(text, str(path))


def default_policy() -> Policy:
    """The packaged default policy."""
    return load_policy_file().default


def with_overrides(policy: Policy, overrides: Mapping[str, Any], *, where: str = "overrides") -> Policy:
    """``policy`` with a nested mapping of knobs changed (validated as a whole)."""
    return validate_policy(deep_merge(policy.model_dump(), overrides), where=where)


def policy_yaml(policy: Policy) -> str:
    """The policy as YAML (sizes in bytes), as printed by ``maintd plan --show-policy``."""
    return yaml.safe_dump(policy.model_dump(mode="json"), sort_keys=False)
