"""Table properties: the known keys, their defaults and ranges (docs/format.md, "Properties").

Unknown keys are rejected, except under the ``maintd.`` prefix, which belongs to maintd's
own per-table policy overrides (validated by the planner's policy models).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from maintd.errors import InvalidPropertyError

RETAIN_HOURS = "acid.data.retain.hours"
BUCKET_NUM = "write.bucket.num"
ISOLATION_LEVEL = "isolation.level"
CHECKPOINT_INTERVAL = "log.checkpoint.interval"
PRIOR_ROWS = "changes.prior.rows"
"""``true``: compactions store the prior rows of the keys they fold (docs/format.md, "Prior rows"), so the change
feed reads those instead of the BaseFiles. Setting it enables feature ``priorRows`` (protocol 4 for a legacy
table). ``lookup``: clusterings also look up and store the BaseFile rows of the keys they merge, so the feed over
commits no compaction has folded yet reads those too (feature ``lookedUpPriorRows``, protocol 5). ``false`` (the
default): none are stored."""
PRIOR_ROWS_VALUES = ("false", "true", "lookup")
MAINTD_PREFIX = "maintd."
ISOLATION_LEVELS = ("WriteSerializable", "Serializable")


@dataclass(frozen=True)
class _IntProp:
    default: int
    low: int
    high: int
    meaning: str


INT_PROPERTIES: dict[str, _IntProp] = {
    RETAIN_HOURS: _IntProp(24, 0, 168, "hours of history kept for time travel; 0 keeps the current version only"),
    BUCKET_NUM: _IntProp(16, 1, 4096, "buckets per partition; fixed after create"),
    CHECKPOINT_INTERVAL: _IntProp(10, 1, 100_000, "commits between two checkpoints"),
}
DEFAULTS: dict[str, str] = {k: str(v.default) for k, v in INT_PROPERTIES.items()} | {
    ISOLATION_LEVEL: "WriteSerializable"
}
IMMUTABLE = frozenset({BUCKET_NUM})


def validate_properties(props: Mapping[str, object], *, table: str = "") -> dict[str, str]:
    """Validate and normalise user-given properties to strings.

    Raises:
        InvalidPropertyError: naming the key, the value and the accepted range.
    """
    where = f"table {table}: " if table else ""
    out: dict[str, str] = {}
    for key, raw in props.items():
        value = str(raw).strip()
        if key in INT_PROPERTIES:
            spec = INT_PROPERTIES[key]
            try:
                n = int(value)
            except ValueError:
                raise InvalidPropertyError(
                    f"{where}property {key}={value!r} is not an integer; give an integer from "
                    f"{spec.low} to {spec.high} ({spec.meaning})"
                ) from None
            if not spec.low <= n <= spec.high:
                raise InvalidPropertyError(
                    f"{where}property {key}={n} is out of range; give an integer from "
                    f"{spec.low} to {spec.high} ({spec.meaning})"
                )
            out[key] = str(n)
        elif key == ISOLATION_LEVEL:
            if value not in ISOLATION_LEVELS:
                raise InvalidPropertyError(
                    f"{where}property {key}={value!r} is not an isolation level; "
                    f"use one of {', '.join(ISOLATION_LEVELS)}"
                )
            out[key] = value
        elif key == PRIOR_ROWS:
            if value.lower() not in PRIOR_ROWS_VALUES:
                raise InvalidPropertyError(
                    f"{where}property {key}={value!r} is not one of {', '.join(PRIOR_ROWS_VALUES)} (true: "
                    "compactions store the prior rows of the keys they fold, for the change feed; lookup: "
                    "clusterings also store those of the keys they merge)")
            out[key] = value.lower()
        elif key.startswith(MAINTD_PREFIX) and len(key) > len(MAINTD_PREFIX):
            out[key] = value
        else:
            known = ", ".join(sorted([*INT_PROPERTIES, ISOLATION_LEVEL, PRIOR_ROWS]))
            raise InvalidPropertyError(
                f"{where}unknown property {key!r}; known properties are {known}, "
                f"and maintd policy overrides under '{MAINTD_PREFIX}*'"
            )
    return out


def get_int(props: Mapping[str, str], key: str) -> int:
    """The integer value of a known integer property, or its default."""
    return int(props.get(key, INT_PROPERTIES[key].default))


def prior_rows(props: Mapping[str, str]) -> bool:
    """True if compactions of the table store prior rows (:data:`PRIOR_ROWS`: ``true`` or ``lookup``)."""
    return props.get(PRIOR_ROWS, "false") in ("true", "lookup")


def lookup_prior_rows(props: Mapping[str, str]) -> bool:
    """True if clusterings of the table also look up prior rows (:data:`PRIOR_ROWS` = ``lookup``)."""
    return props.get(PRIOR_ROWS, "false") == "lookup"


def isolation_level(props: Mapping[str, str]) -> str:
    return props.get(ISOLATION_LEVEL, "WriteSerializable")
