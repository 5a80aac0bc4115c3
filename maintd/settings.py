"""The settings of the daemon and the CLI.

Settings are grouped like kopf's ``OperatorSettings``: one small model per concern, each field with a
default and a description that gives its unit. They come from three layers, lowest first:

1. the defaults below;
2. one YAML file: ``--config FILE`` (``load_settings(path)``), else ``$MAINTD_CONFIG``, else
   ``config/maintd.yaml`` in the working directory when it exists;
3. ``MAINTD_*`` environment variables, nested with ``__`` (``MAINTD_STORE__URL``,
   ``MAINTD_SCHEDULER__MAX_CONCURRENT_TABLES``). Lists and mappings are given as JSON
   (``MAINTD_WAREHOUSE__ROOTS='["/data/a", "/data/b"]'``). A ``MAINTD_`` variable that names no setting is an
   error (see :mod:`maintd.settings_environment`), so a typo never leaves a default silently in force.

Invalid settings raise :class:`~maintd.errors.ConfigError` naming the key, the value and what to do,
so that a typo in a ConfigMap fails the pod at start instead of at the first maintenance run.

Database URLs carry passwords; :func:`redact_url` and :func:`redact_secrets` keep them out of logs
and error messages.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from maintd.errors import ConfigError, MaintdError
from maintd.redaction import redact_options, redact_secrets, redact_url
from maintd.settings_environment import check_environment

ENV_PREFIX = "MAINTD_"
ENV_NESTED_DELIMITER = "__"
CONFIG_ENV_VAR = "MAINTD_CONFIG"
DEFAULT_CONFIG_FILE = Path("config/maintd.yaml")

#: The YAML file of the settings being loaded, as parsed; set by :func:`load_settings` for the duration of one
#: load, so that ``Settings()`` itself stays a plain pydantic-settings model.
_yaml_data: ContextVar[dict[str, Any] | None] = ContextVar("maintd_settings_yaml_data", default=None)
#: libyaml's safe loader when PyYAML was built with it (the pure-Python one is several times slower).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "maintd"


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class WarehouseSettings(_Group):
    """Which tables the daemon maintains."""

    roots: list[str] = Field(
        default_factory=list,
        description="Directories or URIs searched for tables (a directory holding `_log/` is a table). List of paths.",
    )
    tables: list[str] = Field(
        default_factory=list,
        description="Table URIs maintained in addition to the discovered ones. List of URIs.",
    )
    discovery: bool = Field(
        default=True,
        description="Search `roots` for tables; when false only `tables` (and tables registered in the store) "
        "are maintained. Boolean.",
    )
    discovery_max_depth: int = Field(
        default=4, ge=1, le=32, description="How many directory levels below a root are searched. Levels."
    )
    discovery_interval_seconds: float = Field(
        default=300.0, gt=0, description="How often the roots are searched again for new tables. Seconds."
    )
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description="Object-store options of every root and table of the warehouse (`aws_endpoint`, "
        "`aws_region`, `aws_allow_http`, `google_service_account`, `azure_storage_account_name`...; "
        "docs/configuration.md, \"Object stores\"); they override the standard environment (`AWS_REGION`, "
        "`AWS_ENDPOINT_URL`...). Give secrets through the environment or a Secret, not in this file. "
        "Mapping of strings.",
    )
    prefix_storage_options: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="Object-store options by URI prefix (`s3://bucket/path`), merged over `storage_options` for "
        "the tables below that prefix (the longest prefix wins). Mapping of URI prefix to mapping of strings.",
    )

    @field_validator("storage_options", "prefix_storage_options", mode="before")
    @classmethod
    def _stringify(cls, value: object) -> object:
        """YAML gives ``aws_allow_http: true`` as a boolean and ports as numbers: accept them as text."""

        def text(v: object) -> object:
            return ("true" if v else "false") if isinstance(v, bool) else str(v) if isinstance(v, int | float) else v

        if not isinstance(value, dict):
            return value
        return {k: {kk: text(vv) for kk, vv in v.items()} if isinstance(v, dict) else text(v)
                for k, v in value.items()}

    @field_validator("prefix_storage_options")
    @classmethod
    def _prefixes_are_uris(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for prefix in value:
            if "://" not in prefix:
                raise ValueError(
                    f"prefix {prefix!r} is not a URI prefix; write it as scheme://bucket/path (s3://lake/warehouse)"
                )
        return value

    def __repr_args__(self) -> Any:  # the settings dump never shows a secret option
        for name, value in super().__repr_args__():
            if name == "storage_options":
                value = redact_options(value)
            elif name == "prefix_storage_options":
                value = {prefix: redact_options(options) for prefix, options in value.items()}
            yield name, value

    def object_store_uris(self) -> list[str]:
        """The roots and tables of the warehouse that name an object store (``scheme://``, not ``file://``)."""
        return [u for u in dict.fromkeys([*self.roots, *self.tables]) if "://" in u and not u.startswith("file:")]

    def storage_prefixes(self) -> dict[str, dict[str, str]]:
        """Every URI prefix with the options its tables are opened with: each object-store root and table
        gets ``storage_options``, each ``prefix_storage_options`` entry those merged with its own."""
        out: dict[str, dict[str, str]] = {}
        if self.storage_options:
            for uri in self.object_store_uris():
                out[uri] = dict(self.storage_options)
        for prefix, options in self.prefix_storage_options.items():
            out[prefix] = {**self.storage_options, **options}
        def same(uri: str) -> str:  # s3a:// is s3://
            return "s3://" + uri[len("s3a://"):] if uri.startswith("s3a://") else uri

        for uri in list(out):  # a root below a prefix keeps that prefix's options (longest prefix wins)
            best = max((p for p in self.prefix_storage_options if same(uri).startswith(same(p))), key=len,
                       default=None)
            if best is not None and uri != best:
                out[uri] = {**out[uri], **self.prefix_storage_options[best]}
        return out


class SparkSettings(_Group):
    """The one long-lived SparkSession of the daemon (ignored under `spark-submit` or an existing session)."""

    master: str = Field(
        default="local[*]",
        description="Spark master URL (`local[*]`, `spark://host:7077`, `k8s://https://...`); a local master "
        "without a failure count runs with `spark.task.maxFailures` retries (`local[N,4]`), and `local[*]` with N "
        "the CPUs of the container's quota (cgroup `cpu.max` or CFS quota, CPU affinity), not the node's cores. "
        "Only with a local master may small plans run without a Spark job; on any other every plan runs on the "
        "cluster. Not used under `spark-submit`, whose `--master` stands. URL.",
    )
    remote: str | None = Field(
        default=None,
        description="Spark Connect URL (`sc://host:15002`); when set it is used instead of `master`. URL or null.",
    )
    app_name: str = Field(default="maintd", description="Spark application name. Text.")
    driver_memory: str = Field(
        default="2g",
        pattern=r"^\d+[kmgtKMGT]?$",
        description="Memory of the Spark driver (`spark.driver.memory`). JVM size such as `2g`.",
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Spark configuration, key to value. Mapping of strings. In sessions maintd builds, "
        "`-XX:TieredStopAtLevel=1` joins `spark.driver.extraJavaOptions` (the driver JVM compiles with the client "
        "compiler only: docs/architecture.md, \"Spark modes\") unless those options choose a tiered level, e.g. "
        "`-XX:TieredStopAtLevel=4` for the JVM's default."
    )
    ship_storage_options: bool = Field(
        default=False,
        description="Carry the storage credentials this process resolved (registered options, `AWS_*`, "
        "`AZURE_*`, `GOOGLE_*` variables) to the Spark executors inside every task. Off: tasks carry only the "
        "options that are not credentials (endpoint, region...) and executors use their own (environment, "
        "instance role, IRSA, workload identity). Secrets are hidden in every log line either way; Spark conf "
        "`spark.maintd.storage.shipOptions=true` does the same under `spark-submit`. Boolean.",
    )
    worker_daemon: bool = Field(
        default=False,
        description="Run maintd's PySpark worker daemon (`maintd.pyspark_daemon`: tens of milliseconds less per "
        "Python task) in sessions maintd builds. It replaces a private function of PySpark's, so it is checked "
        "against the running pyspark at start; when that differs, PySpark's own daemon runs and a warning says "
        "why. Executors need maintd installed. Boolean.",
    )
    idle_stop_seconds: float = Field(
        default=600.0,
        ge=0,
        description="The daemon starts its SparkSession when a plan first needs Spark (plans of at most "
        "`spark.maintd.inProcess.maxInputBytes` run without it) and stops it once no run has used it for this long: "
        "its JVM and Python workers exit and their memory is returned; the next plan that needs Spark starts a new "
        "one. Applies to sessions whose driver JVM the daemon launched (not Spark Connect). 0: never. Seconds.",
    )


class SchedulerSettings(_Group):
    """When and how much maintenance runs."""

    maintenance_interval_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Most time between two checks of a table (a look at its log; a plan only when it changed "
        "or a time trigger is due). Seconds.",
    )
    min_maintenance_interval_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Floor of the check interval the daemon tunes for a table with targets (docs/policies.md, "
        "\"The daemon keeps targets\"): a shorter tuned interval is honoured as this one, so no tuned table makes "
        "maintenance passes come more often. Seconds.",
    )
    reclamation_interval_seconds: float = Field(
        default=21600.0, gt=0, description="Time between two reclamation passes (retention, orphans). Seconds."
    )
    jitter_seconds: float = Field(
        default=30.0,
        ge=0,
        description="Passes start at a random moment within this much (at most a quarter of the interval) before "
        "their interval is over, ending 5% of the interval early, so replicas spread out and no table waits longer "
        "than its interval. Seconds.",
    )
    max_concurrent_tables: int = Field(
        default=2, ge=1, le=256, description="Tables in maintenance at once in one daemon. Count."
    )
    retry_backoff_base_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Delay before retrying a table after its first failure; doubles after "
        "each further failure. Seconds.",
    )
    retry_backoff_max_seconds: float = Field(
        default=3600.0, gt=0, description="Upper bound of the retry delay of a failing table. Seconds."
    )
    shutdown_grace_seconds: float = Field(
        default=60.0,
        ge=0,
        description="On SIGTERM, how long in-flight runs may finish before they are abandoned. Seconds.",
    )

    @model_validator(mode="after")
    def _backoff_max_at_least_base(self) -> SchedulerSettings:
        if self.retry_backoff_max_seconds < self.retry_backoff_base_seconds:
            raise ValueError(
                f"retry_backoff_max_seconds ({self.retry_backoff_max_seconds}) is below retry_backoff_base_seconds "
                f"({self.retry_backoff_base_seconds}); raise the maximum or lower the base"
            )
        return self


_DATABASE_URL = re.compile(r"^[A-Za-z][A-Za-z0-9]*(\+[A-Za-z0-9_]+)?://")
"""What SQLAlchemy takes for a URL: ``dialect[+driver]://`` and the rest."""


class StoreSettings(_Group):
    """The state store: registered tables, runs, decisions and leases."""

    url: str = Field(
        default="",
        description="SQLAlchemy URL of the state store, e.g. `postgresql+psycopg://user:pass@host/db`; empty means "
        "the SQLite file `maintd.db` in `state_dir`. URL (secret: give it through `MAINTD_STORE__URL`).",
    )
    db_schema: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$",
        description="PostgreSQL schema holding the tables (created if missing); null means the default schema. "
        "Identifier or null.",
    )
    lease_duration_seconds: float = Field(
        default=60.0,
        ge=1,
        description="How long a table lease lasts unless renewed; a killed daemon's tables are "
        "taken over after this. Seconds.",
    )
    lease_renew_interval_seconds: float = Field(
        default=20.0,
        gt=0,
        description="How often held leases are renewed; must be well below `lease_duration_seconds`. Seconds.",
    )
    connect_timeout_seconds: float = Field(
        default=10.0, gt=0, description="Timeout of connecting to (or locking) the store. Seconds."
    )
    migrate_on_start: bool = Field(
        default=True,
        description="Upgrade the store's schema (Alembic migrations) when the daemon starts; when false the "
        "daemon refuses to start on an older schema and `maintd store upgrade` does it. Boolean.",
    )
    history_retention_days: float = Field(
        default=30.0,
        gt=0,
        description="Finished runs (and their decisions) older than this are deleted from the store at every "
        "reclamation pass, so the history does not grow without bound. Only runs that did something, failed, "
        "were refused or abandoned are recorded; checks that found nothing are counted on the table's row. Days.",
    )

    @field_validator("url")
    @classmethod
    def _password_is_a_secret(cls, value: str) -> str:
        """The URL's password (with spaces, ``@`` or ``/`` in it too) is redacted wherever it shows up from now on."""
        from maintd.redaction import register_url_password

        register_url_password(value)
        if value and not _DATABASE_URL.match(value):
            from maintd.redaction import register_secrets

            register_secrets([value])  # where its password starts cannot be told: none of it is shown
            raise ValueError(
                "not a database URL (it is not shown: it may hold a password); give "
                "dialect[+driver]://user:password@host[:port]/database, such as postgresql+psycopg://db:5432/maintd "
                "or sqlite:////var/lib/maintd/maintd.db, or leave it empty for the SQLite file in state_dir")
        return value

    def __repr_args__(self) -> Any:  # repr(Settings) never shows the database password
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name == "url" else value

    @model_validator(mode="after")
    def _renew_before_expiry(self) -> StoreSettings:
        if self.lease_renew_interval_seconds * 2 > self.lease_duration_seconds:
            raise ValueError(
                f"lease_renew_interval_seconds ({self.lease_renew_interval_seconds}) must be at most half of "
                f"lease_duration_seconds ({self.lease_duration_seconds}), or leases expire between renewals; "
                "lower the interval or raise the duration"
            )
        return self


class HttpSettings(_Group):
    """The read-only HTTP endpoint: /healthz, /readyz, /metrics and the web console."""

    enabled: bool = Field(default=True, description="Serve the HTTP endpoint. Boolean.")
    host: str = Field(default="0.0.0.0", description="Address to listen on. IP address.")
    port: int = Field(default=9464, ge=0, le=65535, description="TCP port to listen on; 0 picks a free port. Port.")
    request_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A connection that sends no complete request (or reads no response) for this long is "
        "closed, so slow or stuck clients cannot hold the endpoint. Seconds.",
    )
    max_connections: int = Field(
        default=32,
        ge=1,
        le=4096,
        description="Connections served at once; more are answered 503 at once and closed. Count.",
    )
    console: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="The read-only web console at `/` (fleet, tables, runs, daemon). `auto`: served when `host` is "
        "a loopback address, or on any address once `console_token` or `console_password` is set; `on`: served on "
        "any address, without credentials if none is set (the explicit switch, e.g. behind an authenticating "
        "proxy); `off`: never. `auto`, `on` or `off`.",
    )
    console_token: str = Field(
        default="",
        description="When set, every console page needs it: `Authorization: Bearer <token>`, or HTTP basic auth "
        "with any user and the token as password (what a browser asks for). At least 16 characters. Text (secret: "
        "give it through `MAINTD_HTTP__CONSOLE_TOKEN`, e.g. from a Kubernetes Secret).",
    )
    console_user: str = Field(
        default="maintd", min_length=1,
        description="The user name of HTTP basic auth to the console, with `console_password`. Text.",
    )
    console_password: str = Field(
        default="",
        description="When set, every console page needs HTTP basic auth as `console_user` with this password. At "
        "least 12 characters. Text (secret: give it through `MAINTD_HTTP__CONSOLE_PASSWORD`).",
    )

    @field_validator("console_token", "console_password")
    @classmethod
    def _credentials_are_secrets(cls, value: str, info: Any) -> str:
        """Long enough to resist guessing, and redacted wherever they show up from now on."""
        from maintd.redaction import register_secret

        shortest = 16 if info.field_name == "console_token" else 12
        if value and len(value) < shortest:
            raise ValueError(f"{info.field_name} must be at least {shortest} characters long (or empty: none)")
        register_secret(value)
        return value

    def __repr_args__(self) -> Any:  # repr(Settings) never shows the console's credentials
        for name, value in super().__repr_args__():
            yield name, "***" if name in ("console_token", "console_password") and value else value

    def console_served(self) -> bool:
        """Whether the console is served: see ``console``."""
        import ipaddress

        if self.console != "auto":
            return self.console == "on"
        if self.console_token or self.console_password:
            return True
        try:
            return self.host == "localhost" or ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


class MetricsSettings(_Group):
    """What ``/metrics`` serves: fleet-wide counters, histograms and gauges always; per-table series within bounds."""

    table_series_max_tables: int = Field(
        default=500,
        ge=0,
        description="Serve per-table series (the `table` label) for every table while at most this many tables "
        "are registered; above it, only the table gauges of the `unhealthiest_tables` unhealthiest, and no "
        "per-table counters. Count.",
    )
    unhealthiest_tables: int = Field(
        default=50,
        ge=0,
        description="Above `table_series_max_tables`, the table gauges are served for this many tables, the "
        "unhealthiest first (most failures in a row, then longest without a successful maintenance); 0: none. Count.",
    )


class LoggingSettings(_Group):
    """Log output (loguru)."""

    level: Literal["TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL"] = Field(
        default="INFO", description="Lowest level written. Level name."
    )
    json_lines: bool = Field(
        default=False,
        alias="json",
        description="Write one JSON object per line (for Kubernetes) instead of text; the Spark driver's JVM "
        "logs then are JSON lines too. Boolean.",
    )
    spark_level: Literal["OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL"] = Field(
        default="WARN",
        description="Lowest level of the Spark driver's JVM (log4j2) logs written. log4j2 level name.",
    )

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=True)

    @field_validator("level", "spark_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value


class CommitSettings(_Group):
    """Retries of commits that lose the race for a table version, and how maintenance groups its commits."""

    max_attempts: int = Field(default=10, ge=1, description="Attempts of one commit, the first included. Count.")
    base_delay_ms: int = Field(
        default=100, ge=0, description="Delay before the first retry; doubles per retry, with jitter. Milliseconds."
    )
    max_delay_ms: int = Field(
        default=10_000, ge=0, description="Upper bound of the delay between retries. Milliseconds."
    )
    total_timeout_seconds: float = Field(
        default=300.0, gt=0, description="Time after which a commit stops retrying. Seconds."
    )
    group_max_tasks: int = Field(
        default=64,
        ge=1,
        description="Finished bucket rewrites committed together: a group is committed once it holds this many. "
        "Count.",
    )
    group_interval_seconds: float = Field(
        default=30.0,
        ge=0,
        description="A group of finished bucket rewrites is committed once its first one has waited this long, "
        "so a long run lands its progress; 0 commits each as it finishes. Seconds.",
    )

    @model_validator(mode="after")
    def _max_at_least_base(self) -> CommitSettings:
        if self.max_delay_ms < self.base_delay_ms:
            raise ValueError(
                f"max_delay_ms ({self.max_delay_ms}) is below base_delay_ms ({self.base_delay_ms}); "
                "raise the maximum or lower the base"
            )
        return self


class ReclaimSettings(_Group):
    """Reclamation of unreferenced files."""

    orphan_grace_hours: float = Field(
        default=72.0,
        ge=0,
        description="Files younger than this are never deleted as orphans, because a writer "
        "may be about to commit them. Hours (at least 1 unless `force_short_grace`).",
    )
    force_short_grace: bool = Field(
        default=False, description="Allow `orphan_grace_hours` below 1; only safe when no writer runs. Boolean."
    )
    dry_run: bool = Field(default=False, description="Report what reclamation would delete without deleting. Boolean.")

    @model_validator(mode="after")
    def _grace_at_least_one_hour(self) -> ReclaimSettings:
        if self.orphan_grace_hours < 1 and not self.force_short_grace:
            raise ValueError(
                f"orphan_grace_hours ({self.orphan_grace_hours}) is below 1 hour, which can delete files a writer is "
                "about to commit; raise it, or set reclaim.force_short_grace to true if no writer runs"
            )
        return self


class TuningSettings(_Group):
    """Keeping targets: tables whose policy declares targets are re-tuned from their recent writes, in steps."""

    enabled: bool = Field(
        default=True,
        description="Re-tune the tables whose policy declares targets (`target` section or `maintd.target.*` "
        "properties), and measure them against their targets; false: neither. Tables without targets are never "
        "re-tuned. Boolean.",
    )
    interval_hours: float = Field(
        default=6.0, ge=0.25, le=24 * 7, description="How often each table with targets is re-tuned. Hours."
    )
    max_step: float = Field(
        default=2.0,
        gt=1.0,
        le=16.0,
        description="Most a re-tune moves one knob (and the check interval): by at most this factor toward the "
        "tuned value, so a table converges over several re-tunes instead of jumping. Factor (> 1).",
    )
    learn_hours: float = Field(
        default=24.0, gt=0, le=24 * 30, description="Recent writes the tuner learns from (and write amplification "
        "is measured over). Hours.",
    )
    days: int = Field(default=7, ge=1, le=60, description="Days the tuner simulates for each candidate policy. Days.")
    time_budget_seconds: float = Field(
        default=60.0, gt=0, le=3600, description="Most time the tuner searches for one table. Seconds."
    )
    measure_interval_seconds: float = Field(
        default=900.0,
        ge=60,
        le=86400,
        description="How often the layouts of tables with targets are sampled and their measured figures and gaps "
        "recomputed (the `maintd_table_target*` gauges). Seconds.",
    )
    window_hours: float = Field(
        default=24.0, gt=0, le=24 * 14, description="Window of the measured p95 figures (samples older are "
        "deleted). Hours.",
    )

    @model_validator(mode="after")
    def _window_holds_samples(self) -> TuningSettings:
        if self.window_hours * 3600 < 2 * self.measure_interval_seconds:
            raise ValueError(
                f"window_hours ({self.window_hours}) holds fewer than two samples taken every "
                f"measure_interval_seconds ({self.measure_interval_seconds}); widen the window or sample more often"
            )
        return self


class PolicySettings(_Group):
    """The maintenance policy (clustering, compaction, reclamation rules)."""

    path: Path | None = Field(
        default=None, description="Policy YAML file; null means the policy packaged with maintd. Path or null."
    )

    @field_validator("path")
    @classmethod
    def _exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"policy file {value} does not exist; fix the path or remove the key to use the default")
        return value


def _size(value: Any) -> Any:
    """``"50 MiB"`` as policies read it (imported on use: the planner's package loads pyarrow)."""
    if value is None:
        return value
    from maintd.planner.policy import parse_size

    return parse_size(value)


Bytes = Annotated[int, BeforeValidator(_size), Field(gt=0, strict=False)]
"""A positive size in bytes (``"50 MiB"`` accepted)."""


class BudgetSettings(_Group):
    """Daemon-wide limits on what maintenance moves per second (token buckets; unset: unlimited). Sizes accept
    ``"50 MiB"`` as policies do."""

    read_bytes_per_second: Bytes | None = Field(
        default=None, description="Bytes maintenance may read per second, all tables and runs together (Spark "
        "tasks and units in process are released within it). Bytes per second, e.g. `50 MiB`; null: unlimited.")
    read_burst_bytes: Bytes | None = Field(
        default=None, description="Bytes read that may be released at once above the rate (the bucket's size); "
        "null: one second's worth. Packs of units are sized within it. Bytes.")
    write_bytes_per_second: Bytes | None = Field(
        default=None, description="Bytes maintenance may write per second (estimated as a unit's input when it "
        "is released, settled with what it wrote). Bytes per second; null: unlimited.")
    write_burst_bytes: Bytes | None = Field(
        default=None, description="Bytes written that may be released at once above the rate; null: one "
        "second's worth. Bytes.")
    requests_per_second: float | None = Field(
        default=None, gt=0, description="Object-store requests maintenance may send per second: the daemon's own "
        "(listings, log reads, commits, deletes) counted as sent, its units' estimated when released. Requests "
        "per second; null: unlimited.")
    requests_burst: float | None = Field(
        default=None, gt=0, description="Requests that may be sent at once above the rate; null: one second's "
        "worth (at least 1). Count.")

    @model_validator(mode="after")
    def _burst_needs_rate(self) -> BudgetSettings:
        for rate, burst in (("read_bytes_per_second", "read_burst_bytes"),
                            ("write_bytes_per_second", "write_burst_bytes"),
                            ("requests_per_second", "requests_burst")):
            if getattr(self, burst) is not None and getattr(self, rate) is None:
                raise ValueError(f"budget.{burst} is set but budget.{rate} is not: a burst needs a rate; set "
                                 f"budget.{rate} or remove budget.{burst}")
        return self

    def limits(self) -> dict[str, tuple[float, float]]:
        """Rate and burst of every limited kind (``read_bytes``, ``write_bytes``, ``requests``)."""
        out: dict[str, tuple[float, float]] = {}
        for kind, rate, burst in (("read_bytes", self.read_bytes_per_second, self.read_burst_bytes),
                                  ("write_bytes", self.write_bytes_per_second, self.write_burst_bytes),
                                  ("requests", self.requests_per_second, self.requests_burst)):
            if rate is not None:
                out[kind] = (float(rate), float(burst if burst is not None else max(1.0, rate)))
        return out


class Settings(BaseSettings):
    """All maintd settings. Build them with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        extra="forbid",
        validate_default=True,
        nested_model_default_partial_update=True,
    )

    state_dir: Path = Field(
        default_factory=_default_state_dir,
        description="Directory of local state (the default SQLite store). Path; default "
        "`$XDG_STATE_HOME/maintd` or `~/.local/state/maintd`.",
    )
    warehouse: WarehouseSettings = Field(default_factory=WarehouseSettings, description="Tables to maintain.")
    spark: SparkSettings = Field(default_factory=SparkSettings, description="The SparkSession.")
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings, description="Scheduling.")
    store: StoreSettings = Field(default_factory=StoreSettings, description="The state store.")
    http: HttpSettings = Field(default_factory=HttpSettings, description="Health and metrics endpoint.")
    metrics: MetricsSettings = Field(default_factory=MetricsSettings, description="Metrics.")
    logging: LoggingSettings = Field(default_factory=LoggingSettings, description="Logging.")
    commit: CommitSettings = Field(default_factory=CommitSettings, description="Commit retries.")
    reclaim: ReclaimSettings = Field(default_factory=ReclaimSettings, description="Reclamation.")
    policy: PolicySettings = Field(default_factory=PolicySettings, description="Maintenance policy.")
    tuning: TuningSettings = Field(default_factory=TuningSettings, description="Keeping targets.")
    budget: BudgetSettings = Field(default_factory=BudgetSettings, description="Daemon-wide maintenance budget.")

    @model_validator(mode="after")
    def _default_store_url(self) -> Settings:
        if not self.store.url:
            self.store.url = f"sqlite:///{self.state_dir.expanduser() / 'maintd.db'}"
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments < environment < YAML file < defaults, highest priority first."""
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        yaml_data = _yaml_data.get()
        if yaml_data is not None:  # what pydantic-settings' YAML source would read, parsed once by load_settings
            sources.append(InitSettingsSource(settings_cls, init_kwargs=yaml_data))
        return tuple(sources)


def config_file(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The YAML file to read: ``path``, else ``$MAINTD_CONFIG``, else ``config/maintd.yaml`` if it exists.

    Raises:
        ConfigError: ``path`` or ``$MAINTD_CONFIG`` names a file that does not exist.
    """
    if path is not None:
        explicit, origin = Path(path), "--config"
    elif os.environ.get(CONFIG_ENV_VAR):
        explicit, origin = Path(os.environ[CONFIG_ENV_VAR]), f"${CONFIG_ENV_VAR}"
    else:
        return DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None
    if not explicit.is_file():
        raise ConfigError(f"settings file {explicit} (from {origin}) does not exist; fix the path or unset it")
    return explicit


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Load the settings: defaults < YAML file < ``MAINTD_*`` environment variables.

    Args:
        path: the YAML file (``--config``); None means ``$MAINTD_CONFIG`` or ``config/maintd.yaml``.

    Raises:
        ConfigError: the file is missing or not YAML, or a value is invalid; the message names the key,
            the value and what to do.
    """
    source = config_file(path)
    data = None if source is None else _read_yaml(source)
    check_environment(os.environ, Settings)
    token = _yaml_data.set(data)
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None
    except SettingsError as exc:  # a value pydantic-settings cannot parse (the check above names most)
        raise ConfigError(f"invalid settings: {redact_secrets(str(exc))}; see docs/configuration.md") from None
    finally:
        _yaml_data.reset(token)


def apply_storage_settings(settings: Settings) -> dict[str, dict[str, str]]:
    """Register the warehouse's object-store options (:meth:`WarehouseSettings.storage_prefixes`) with the
    storage layer, and every secret among them and among the credential variables of the environment with
    the redaction of logs and errors. Called at the start of the daemon, ``maintd run`` and every command.

    Returns the prefixes registered, with their options.
    """
    from maintd.redaction import is_secret_option, register_environment_secrets, register_secrets
    from maintd.storage import configure_storage

    register_environment_secrets()
    prefixes = settings.warehouse.storage_prefixes()
    for prefix, options in prefixes.items():
        register_secrets(v for k, v in options.items() if is_secret_option(k))
        try:
            configure_storage(prefix, options)
        except MaintdError as exc:
            raise ConfigError(f"warehouse.prefix_storage_options: {prefix}: {redact_secrets(str(exc))}") from None
    return prefixes


def _read_yaml(path: Path) -> dict[str, Any]:
    """The settings file's mapping (empty for an empty file).

    Raises:
        ConfigError: the file cannot be read, is not YAML, or is not a mapping.
    """
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)  # a safe loader: plain data
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read settings file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"settings file {path} is not valid YAML: {redact_secrets(str(exc))}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(
            f"settings file {path} must hold a mapping of sections (warehouse, spark, ...), not {type(data).__name__}"
        )
    return data or {}


def _describe(exc: ValidationError, source: Path | None) -> str:
    where = f"{source} or " if source is not None else ""
    lines = [f"invalid settings ({exc.error_count()} error(s)):"]
    for error in exc.errors(include_url=False):
        key = ".".join(str(part) for part in error["loc"]) or "(settings)"
        env = ENV_PREFIX + ENV_NESTED_DELIMITER.join(str(p).upper() for p in error["loc"])
        value = redact_secrets(repr(error.get("input")))
        if error["type"] == "extra_forbidden":
            hint = "remove it or fix its spelling (see docs/configuration.md)"
        else:
            hint = f"fix it in {where}{env} (see docs/configuration.md)"
        lines.append(f"  {key} = {value}: {redact_secrets(error['msg'])}; {hint}")
    if len(lines) == 2:  # one error: one line, as every other error of a command
        return f"invalid settings: {lines[1].strip()}"
    return "\n".join(lines)


# -- reference documentation ------------------------------------------------------------------------------


def iter_fields() -> Iterator[tuple[str, str, Any, str]]:
    """Every leaf setting as ``(dotted key, environment variable, default, description)``."""
    for name, info in Settings.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            for sub, sub_info in annotation.model_fields.items():
                key = sub_info.alias or sub
                yield (
                    f"{name}.{key}",
                    f"{ENV_PREFIX}{name.upper()}{ENV_NESTED_DELIMITER}{key.upper()}",
                    sub_info.get_default(call_default_factory=True),
                    sub_info.description or "",
                )
        else:
            yield name, f"{ENV_PREFIX}{name.upper()}", "(see description)", info.description or ""


def reference_table() -> str:
    """The Markdown table of every setting, as kept in ``docs/configuration.md``."""
    rows = ["| Key | Environment variable | Default | Description |", "|---|---|---|---|"]
    for key, env, default, description in iter_fields():
        shown = "" if default == "" else default
        escaped = description.replace("|", r"\|")
        rows.append(f"| `{key}` | `{env}` | `{_yaml_scalar(shown)}` | {escaped} |")
    return "\n".join(rows) + "\n"


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str) and value.startswith("("):
        return value
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


__all__ = [
    "BudgetSettings",
    "CommitSettings",
    "HttpSettings",
    "LoggingSettings",
    "MetricsSettings",
    "PolicySettings",
    "ReclaimSettings",
    "SchedulerSettings",
    "Settings",
    "SparkSettings",
    "StoreSettings",
    "TuningSettings",
    "WarehouseSettings",
    "apply_storage_settings",
    "config_file",
    "iter_fields",
    "load_settings",
    "redact_secrets",
    "redact_url",
    "reference_table",
]
