"""Targets: the outcomes a table's maintenance must meet, declared instead of thresholds.

Operators care about outcomes: how many files a reader opens, how long fresh data waits before it is merged,
how much maintenance rewrites. A target names one of these; ``maintd tune`` searches the policy knobs for the
cheapest policy that meets every target, and the daemon keeps a table's policy tuned to its targets. Targets
live in the policy (section ``target``), so they are set like every other knob: in a policy file's
``default``/``tables`` entries, or as table properties ``maintd.target.<name>``; on the command line a target
is named without the prefix (``--target read_files_per_bucket=6``). Unset targets are not declared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from maintd.errors import PolicyError
from maintd.target_names import TARGET_NAMES, TargetName

TARGET_PROPERTY_PREFIX = "maintd.target."


class Targets(BaseModel):
    """The declared targets of one table; ``None`` = not declared. Each is a ceiling on a measured figure."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    read_files_per_bucket: float | None = Field(
        default=None, ge=1, description="files a reader opens in the bucket holding the most, p95 over time "
                                       "(ceiling)")
    merge_delay_minutes: float | None = Field(
        default=None, gt=0, description="age of the oldest level-0 file of a bucket in minutes, p95 (ceiling)")
    write_amplification: float | None = Field(
        default=None, gt=0, description="bytes maintenance writes per byte the writers wrote (ceiling)")

    def declared(self) -> dict[TargetName, float]:
        """The declared targets by name, in :data:`TARGET_NAMES` order."""
        return {n: v for n in TARGET_NAMES if (v := getattr(self, n)) is not None}

    def any(self) -> bool:
        return bool(self.declared())

    def gaps(self, measured: Mapping[str, float]) -> dict[TargetName, float]:
        """Relative gap of each declared target that has a measure: ``measured / target - 1``.

        Positive means the target is missed by that share (0.5: 50% over the ceiling), zero or negative means
        it is met. Targets without a measure are left out.
        """
        return {n: measured[n] / v - 1.0 for n, v in self.declared().items() if n in measured}

    def missed(self, measured: Mapping[str, float]) -> list[TargetName]:
        """Declared targets the measured figures miss, largest gap first."""
        gaps = self.gaps(measured)
        return sorted((n for n, g in gaps.items() if g > 1e-9), key=lambda n: -gaps[n])


def parse_target_args(items: Iterable[str], *, base: Targets | None = None) -> Targets:
    """``["read_files_per_bucket=6", ...]`` (the command line's ``--target``) merged over ``base``.

    Raises:
        PolicyError: an item is not ``NAME=VALUE``, names an unknown target or has an invalid value.
    """
    values: dict[str, object] = {str(k): v for k, v in (base or Targets()).declared().items()}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip().removeprefix(TARGET_PROPERTY_PREFIX)
        if not sep or not value.strip():
            raise PolicyError(f"--target {item!r}: give NAME=VALUE, e.g. --target read_files_per_bucket=6 "
                              f"(targets: {', '.join(TARGET_NAMES)})")
        if name not in TARGET_NAMES:
            raise PolicyError(f"--target {item!r}: unknown target {name!r}; targets are {', '.join(TARGET_NAMES)}")
        values[name] = value.strip()
    try:
        return Targets.model_validate(values)
    except ValidationError as e:
        msgs = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']} (got {err.get('input')!r})"
                for err in e.errors(include_url=False)]
        raise PolicyError("invalid target: " + "; ".join(msgs)) from None


__all__ = ["TARGET_NAMES", "TARGET_PROPERTY_PREFIX", "TargetName", "Targets", "parse_target_args"]
