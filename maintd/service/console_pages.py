"""The pages of the web console: the fleet, one table, one run, the daemon (see :mod:`maintd.service.console`).

Each function reads what its page shows (from the state store; the table page also reads the table's log,
the daemon page the replica's in-memory work) and returns the HTML document. Nothing here writes anywhere.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from maintd.errors import MaintdError
from maintd.redaction import REDACTED, is_secret_option, redact_secrets
from maintd.service.console_html import (
    Point,
    age,
    chart,
    link,
    num,
    page,
    pairs,
    size,
    stamp,
    table,
    text,
)
from maintd.service.console_reads import FLEET_SORTS, FLEET_STATES, FleetQuery
from maintd.service.console_targets import missed_cell, targets_section
from maintd.service.records import RunKind, RunRecord, TableRecord, TuningRecord
from maintd.service.store_metrics import table_state
from maintd.units import fmt_bytes

if TYPE_CHECKING:
    from maintd.service.daemon import WorkView
    from maintd.service.store import StateStore
    from maintd.settings import Settings

_LEVELS = ("L0", "L1", "L2", "base")
_STATE_CLASS = {"healthy": "ok", "failing": "bad", "disabled": "off"}
_STATUS_CLASS = {"succeeded": "ok", "skipped": "ok", "failed": "bad", "abandoned": "warn", "refused": "warn",
                 "running": "off"}


# -- the fleet ----------------------------------------------------------------------------------------------


def fleet(store: StateStore, query: FleetQuery) -> bytes:
    """Every table's health at a glance, one page of it, the unhealthiest first by default; then the roots."""
    found = store.fleet_page(query)
    counts = store.table_counts()
    pages = max(1, math.ceil(found.matching / query.per_page))
    tiles = "".join(
        f'<div class=tile><span class={_STATE_CLASS[s]}>{s}</span><b>{counts.get(s, 0):,}</b></div>'
        for s in FLEET_STATES
    )
    rows = [[*_fleet_row(record, found.holders.get(record.uri), found.now), missed_cell(found.missed.get(record.uri))]
            for record in found.tables]
    headers = [_sort_header(query, "table", "name"), "state", "files by level", _sort_header(query, "files", "files"),
               _sort_header(query, "read ampl.", "read_amplification"), _sort_header(query, "backlog", "backlog"),
               _sort_header(query, "oldest L0", "l0_age"), _sort_header(query, "history", "history"), "pinned",
               _sort_header(query, "last run", "last_run"),
               _sort_header(query, "failures in a row", "failures"), "replica",
               _sort_header(query, "checked", "checked"), "targets missed"]
    body = (f"<div class=tiles>{tiles}</div>{_fleet_form(query)}"
            f"<p>{found.matching:,} table(s) match; page {min(query.page, pages)} of {pages}.</p>"
            + table(headers, rows, empty="no table matches") + _pager(query, pages)
            + "<h2>Warehouse roots</h2>" + _roots(store))
    return page("Fleet", body, refreshed=found.now)


def _fleet_row(record: TableRecord, holder: str | None, now: datetime) -> list[str]:
    layout: Mapping[str, Any] = record.layout or {}
    levels = layout.get("levels") or {}
    by_level = " · ".join(f"{lvl} {levels[lvl].get('files', 0)}" for lvl in _LEVELS if lvl in levels)
    oldest = layout.get("oldest_l0_ms")
    oldest_age = None if oldest is None else now.timestamp() - oldest / 1000
    state = table_state(record)
    status = record.last_status or ""
    last = "" if record.last_run_at is None else (
        f"<span class={_STATUS_CLASS.get(status, '')}>{text(status)}</span> "
        f"{text(age(_since(record.last_run_at, now)))} ago")
    failures = record.consecutive_failures
    return [
        link("/table", record.name, uri=record.uri) + f"<br><small class=off>{text(record.uri)}</small>",
        f"<span class={_STATE_CLASS[state]}>{state}</span>",
        text(by_level),
        num(layout.get("files")),
        num(layout.get("read_amplification")),
        size(layout.get("backlog_bytes")),
        "\x00n" + text(age(oldest_age)),
        size(layout.get("history_bytes")),
        size(layout.get("pinned_bytes")),
        last,
        num(failures) if not failures else "\x00n" + f"<span class=bad>{failures}</span>",
        text(holder or ""),
        text("" if record.checked_at is None else age(_since(record.checked_at, now)) + " ago"),
    ]


def _since(moment: datetime, now: datetime) -> float:
    return (now - moment).total_seconds()


def _query_params(query: FleetQuery, **changes: object) -> dict[str, object]:
    params: dict[str, object] = {"q": query.text or None, "state": query.state, "sort": query.sort,
                                 "desc": "1" if query.descending else None, "page": query.page,
                                 "per": query.per_page}
    params.update(changes)
    return params


def _sort_header(query: FleetQuery, label: str, key: str) -> str:
    descending = query.sort == key and not query.descending
    arrow = "" if query.sort != key else (" ▼" if query.descending else " ▲")
    return link("/", label + arrow, **_query_params(query, sort=key, desc="1" if descending else None, page=1))


def _fleet_form(query: FleetQuery) -> str:
    states = "".join(f'<option value="{s}"{" selected" if query.state == s else ""}>{s}</option>'
                     for s in FLEET_STATES)
    sorts = "".join(f'<option value="{s}"{" selected" if query.sort == s else ""}>{s}</option>' for s in FLEET_SORTS)
    return (
        '<form method=get action="/"><label>name or URI holds <input name=q value="' + text(query.text) + '"></label> '
        f'<label>state <select name=state><option value="">any</option>{states}</select></label> '
        f"<label>order <select name=sort>{sorts}</select></label> "
        f'<label><input type=checkbox name=desc value=1{" checked" if query.descending else ""}> reversed</label> '
        f'<label>per page <input name=per size=4 value="{query.per_page}"></label> <button>show</button></form>'
    )


def _pager(query: FleetQuery, pages: int) -> str:
    parts = []
    if query.page > 1:
        parts.append(link("/", "← previous", **_query_params(query, page=query.page - 1)))
    if query.page < pages:
        parts.append(link("/", "next →", **_query_params(query, page=query.page + 1)))
    return f"<nav class=pages>{''.join(parts)}</nav>" if parts else ""


def _roots(store: StateStore) -> str:
    rows = [
        [text(r.uri), '<span class=ok>yes</span>' if r.healthy else '<span class=bad>no</span>', num(r.tables),
         num(r.failures), text(stamp(r.checked_at)), text(r.holder), text(r.error)]
        for r in store.list_roots()
    ]
    return table(["root", "can be searched", "tables found", "failures", "searched", "by", "error"], rows,
                 empty="no warehouse root searched yet")


# -- one table ----------------------------------------------------------------------------------------------


def table_page(store: StateStore, settings: Settings | None, uri: str, before: int | None) -> bytes | None:
    """One table: its state, its runs over time and one page of them, the plan of its newest run explained,
    and what its log says now (properties, pins, policy, targets, files by bucket and level). None: not
    registered."""
    record = store.get_table(uri)
    if record is None:
        return None
    tuning = store.tuning_records([uri]).get(uri)
    runs = store.history(uri, limit=50, before_id=before)
    recent = runs if before is None else store.history(uri, limit=50)
    body = (_table_summary(record) + _table_charts(recent) + "<h2>Runs</h2>" + _runs_table(runs)
            + _runs_pager(uri, runs) + _explained(store, recent) + _from_the_log(record, settings, tuning))
    return page(f"Table {record.name}", body, refreshed=datetime.now(UTC))


def _table_summary(record: TableRecord) -> str:
    layout: Mapping[str, Any] = record.layout or {}
    facts: dict[str, object] = {
        "URI": record.uri, "state": table_state(record),
        "registered": f"{stamp(record.registered_at)} ({record.source})",
        "last run": f"{record.last_status or 'none'} at {stamp(record.last_run_at)}",
        "last error": record.last_error or "",
    }
    for kind in RunKind:
        facts[f"{kind.value}: failures in a row"] = record.failures(kind)
        facts[f"{kind.value}: last success"] = stamp(record.succeeded_at(kind))
        retry = record.retry_after_of(kind)
        if retry is not None:
            facts[f"{kind.value}: retried after"] = stamp(retry)
    facts["checked"] = f"{stamp(record.checked_at)} by {record.checked_by or '-'}"
    facts["checks (of which planned)"] = f"{record.checks:,} ({record.checks_planned:,})"
    facts["layout read"] = stamp(record.layout_at)
    for key in ("files", "bytes", "read_amplification", "mean_files_per_bucket", "backlog_files", "backlog_bytes",
                "history_bytes", "pins", "pinned_bytes"):
        if layout.get(key) is not None:
            facts[key.replace("_", " ")] = fmt_bytes(layout[key]) if key.endswith("bytes") else layout[key]
    levels = layout.get("levels") or {}
    level_rows = [[text(lvl), num(levels[lvl].get("files")), size(levels[lvl].get("bytes"))]
                  for lvl in _LEVELS if lvl in levels]
    return pairs(facts) + "<h2>Files by level</h2>" + table(["level", "files", "bytes"], level_rows,
                                                            empty="no layout recorded yet")


def _table_charts(runs: list[RunRecord]) -> str:
    finished = [r for r in runs if r.ended_at is not None]
    durations = [Point(r.started_at, r.duration_seconds or 0.0, _STATUS_CLASS.get(r.status, "off"),
                       f"run {r.id} {r.kind} {r.status}") for r in finished]
    files = [Point(r.ended_at or r.started_at, float(r.metrics["files"]), _STATUS_CLASS.get(r.status, "off"),
                   f"run {r.id}") for r in finished if r.metrics and isinstance(r.metrics.get("files"), int | float)]
    written = [Point(r.ended_at or r.started_at, float(r.metrics.get("bytes_written") or 0) / 2**20,
                     _STATUS_CLASS.get(r.status, "off"), f"run {r.id}") for r in finished if r.metrics]
    return ("<h2>Over time</h2>" + chart("Run duration", durations, unit=" s")
            + chart("Live files after each run", files) + chart("Written per run", written, unit=" MiB"))


def _runs_table(runs: list[RunRecord]) -> str:
    rows = []
    for r in runs:
        m = r.metrics or {}
        rows.append([
            link("/run", r.id, id=r.id), text(r.kind),
            f'<span class={_STATUS_CLASS.get(r.status, "")}>{text(r.status)}</span>', text(stamp(r.started_at)),
            "\x00n" + text(age(r.duration_seconds)), num(m.get("tasks_committed")), num(m.get("tasks_planned")),
            size(m.get("bytes_read")), size(m.get("bytes_written")), num(m.get("conflicts")),
            num(m.get("commit_retries")), text(r.holder), text(_clip(r.error)),
        ])
    return table(["run", "kind", "status", "started", "took", "tasks committed", "planned", "read", "written",
                  "conflicts", "retries", "replica", "error"], rows, empty="no run recorded")


def _runs_pager(uri: str, runs: list[RunRecord]) -> str:
    if len(runs) < 50:
        return ""
    return "<nav class=pages>" + link("/table", "older runs →", uri=uri, before=runs[-1].id) + "</nav>"


def _explained(store: StateStore, runs: list[RunRecord]) -> str:
    planned = next((r for r in runs if r.kind == RunKind.MAINTENANCE.value and r.plan), None)
    if planned is None:
        return "<h2>Plan explained</h2><p class=off>no run with a plan recorded</p>"
    return (f"<h2>Plan of run {link('/run', planned.id, id=planned.id)}, explained bucket by bucket</h2>"
            + _decisions(store, planned.id))


def _decisions(store: StateStore, run_id: int) -> str:
    rows = [[text(d.decision.partition or "(none)"), num(d.decision.bucket), text(d.decision.action),
             text(d.decision.rule), text(d.decision.message)] for d in store.decisions_of(run_id)]
    return table(["partition", "bucket", "action", "rule", "why"], rows, empty="no decision recorded")


def _from_the_log(record: TableRecord, settings: Settings | None, tuning: TuningRecord | None) -> str:
    """What the table's log says now, and its policy resolved as ``maintd plan`` resolves it (the knobs the
    daemon tuned included), with its targets; an error (an unreachable store, a damaged table) is shown, not
    raised."""
    from maintd.planner.policy_files import load_policy_file
    from maintd.table import Table

    try:
        snapshot = Table.open(record.uri).snapshot()
    except (MaintdError, OSError) as exc:
        return (f"<h2>The table's log</h2><p class=bad>cannot read it: {text(redact_secrets(str(exc)))}</p>"
                + targets_section(tuning, {}, ()))
    props = snapshot.metadata.properties
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    pins = [[text(p.id), num(p.version), text(stamp(p.created_at)), text(_ms(p.expires)), text(p.who), text(p.reason)]
            for p in snapshot.live_pins(now_ms)]
    out = (f"<p>Version {snapshot.version}; history retained {snapshot.retain_hours} h "
           f"(<code>acid.data.retain.hours</code>); isolation {text(snapshot.isolation_level)}.</p>"
           f"<h2>Properties (version {snapshot.version})</h2>"
           + pairs({k: REDACTED if is_secret_option(k) else v for k, v in sorted(props.items())})
           + "<h2>Pins</h2>" + table(["pin", "version", "created", "expires", "who", "reason"], pins,
                                     empty="no live pin"))
    tuning_on = settings is None or settings.tuning.enabled  # as the daemon plans: no tuned knobs while off
    try:
        policies = load_policy_file(None if settings is None else settings.policy.path)
        resolved = policies.resolve(name=snapshot.metadata.name or "", uri=record.uri, properties=props,
                                    tuned=tuning.overrides if tuning is not None and tuning_on else None)
        tuned = (f"<p>tuned by the daemon: <code>{text(', '.join(resolved.tuned))}</code></p>"
                 if resolved.tuned else "")
        policy = (f"<p>policy <code>{text(resolved.name)}</code></p>{tuned}"
                  f"<pre>{text(_json(resolved.policy))}</pre>")
        targets = targets_section(tuning, {str(k): v for k, v in resolved.policy.target.declared().items()},
                                  resolved.tuned)
    except MaintdError as exc:
        policy = f"<p class=bad>the policy cannot be resolved: {text(redact_secrets(str(exc)))}</p>"
        targets = targets_section(tuning, {}, ())
    return out + "<h2>Policy</h2>" + policy + targets + "<h2>Files by bucket</h2>" + _buckets(snapshot)


_MAX_BUCKET_ROWS = 500


def _buckets(snapshot: Any) -> str:
    groups = snapshot.by_bucket()
    rows = []
    for (partition, bucket), files in sorted(groups.items(), key=lambda kv: (-len(kv[1]), str(kv[0])))[
            :_MAX_BUCKET_ROWS]:
        counts = {lvl: 0 for lvl in _LEVELS}
        for f in files:
            counts["base" if f.kind == "base" else f"L{f.level}"] += 1
        rows.append([text(partition or "(none)"), num(bucket), *(num(counts[lvl]) for lvl in _LEVELS),
                     num(len(files)), size(sum(f.bytes for f in files))])
    note = (f"<p class=off>the {_MAX_BUCKET_ROWS} fullest of {len(groups):,} buckets</p>"
            if len(groups) > _MAX_BUCKET_ROWS else "")
    return note + table(["partition", "bucket", *_LEVELS, "files a reader opens", "bytes"], rows, empty="no file")


# -- one run ------------------------------------------------------------------------------------------------


def run_page(store: StateStore, run_id: int) -> bytes | None:
    """One run: when and where it ran, its measures (tasks, timings, bytes, Spark application), its error, its
    tasks and its decisions. None: no such run."""
    run = store.get_run(run_id)
    if run is None:
        return None
    facts: dict[str, object] = {
        "table": run.table_uri, "kind": run.kind, "status": run.status, "replica": run.holder or "",
        "started": stamp(run.started_at), "ended": stamp(run.ended_at), "took": age(run.duration_seconds),
    }
    metrics = {k: v for k, v in (run.metrics or {}).items() if k not in ("levels", "commits")}
    body = (f"<p>{link('/table', 'the table', uri=run.table_uri)}</p>" + pairs(facts)
            + (f"<h2>Error</h2><pre class=bad>{text(run.error)}</pre>" if run.error else "")
            + "<h2>Measures</h2>" + pairs({k: _shown(v) for k, v in sorted(metrics.items())})
            + "<h2>Tasks</h2>" + _tasks(run.plan) + "<h2>Decisions, bucket by bucket</h2>" + _decisions(store, run.id))
    return page(f"Run {run.id}", body, refreshed=datetime.now(UTC))


def _tasks(plan: Any) -> str:
    tasks = plan.get("tasks") if isinstance(plan, dict) else None
    # A run's plan records each task's inputs as files and bytes (maintd.execution.runner).
    rows = [[text(t.get("task_id")), text(t.get("kind")), text(_partition(t.get("partition"))), num(t.get("bucket")),
             num(t.get("files")), size(t.get("bytes")), text(t.get("reason"))]
            for t in tasks or [] if isinstance(t, dict)]
    return table(["task", "kind", "partition", "bucket", "input files", "input bytes", "reason"], rows,
                 empty="no task planned")


def _partition(values: object) -> str:
    if not isinstance(values, dict) or not values:
        return "(none)"
    return ", ".join(f"{k}={v}" for k, v in values.items())


# -- the daemon ---------------------------------------------------------------------------------------------


def daemon_page(store: StateStore, settings: Settings | None, holder: str | None, work: WorkView | None) -> bytes:
    """This replica: its settings (secrets redacted), the replicas and their leases, and its queue."""
    now = store.db_now()
    replicas = [[text(r.holder) + (" (this one)" if r.holder == holder else ""), text(stamp(r.started_at)),
                 text(age((now - r.seen_at).total_seconds()) + " ago")] for r in store.list_replicas()]
    leases = store.lease_counts()
    body = ("<h2>Replicas</h2>" + table(["replica", "started", "last seen"], replicas, empty="no replica recorded")
            + "<h2>Leases held</h2>" + table(["replica", "tables"], [[text(h), num(n)] for h, n in leases.items()],
                                             empty="no lease held")
            + _work(work) + "<h2>Settings</h2>" + _settings(settings))
    return page("Daemon" + (f" {holder}" if holder else ""), body, refreshed=now)


_MAX_QUEUE_ROWS = 200


def _work(work: WorkView | None) -> str:
    if work is None:
        return "<h2>Queue</h2><p class=off>no daemon loop runs in this process</p>"
    running = [[link("/table", uri, uri=uri), text(kind), "\x00n" + text(age(seconds)),
                "" if run_id is None else link("/run", run_id, id=run_id)]
               for uri, kind, seconds, run_id in work.running]
    queued = [[num(i + 1), text(kind), link("/table", uri, uri=uri)]
              for i, (kind, uri) in enumerate(work.queued[:_MAX_QUEUE_ROWS])]
    backing = [[text(kind), link("/table", uri, uri=uri), "\x00n" + text(age(left))]
               for kind, uri, left in work.backing_off[:_MAX_QUEUE_ROWS]]
    return (f"<h2>Running ({len(work.running)})</h2>" + table(["table", "kind", "for", "run"], running, empty="idle")
            + f"<h2>Queued ({len(work.queued):,})</h2>" + table(["#", "kind", "table"], queued, empty="empty")
            + f"<h2>Backing off after failures ({len(work.backing_off):,})</h2>"
            + table(["kind", "table", "retried in"], backing, empty="none"))


def _settings(settings: Settings | None) -> str:
    if settings is None:
        return "<p class=off>not known to this endpoint</p>"
    return pairs(dict(_flatten("", settings.model_dump(mode="json"))))


def _flatten(prefix: str, value: Any) -> list[tuple[str, str]]:
    """Leaf settings as ``dotted.key`` and shown value: a secret-named key's value as ``***``, the rest redacted."""
    if isinstance(value, dict) and value:
        out: list[tuple[str, str]] = []
        for key, inner in value.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if is_secret_option(str(key)) and inner not in (None, "", {}, []):
                out.append((dotted, REDACTED))
            else:
                out.extend(_flatten(dotted, inner))
        return out
    return [(prefix, redact_secrets(_shown(value)))]


# -- values -------------------------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def _json(model: Any) -> str:
    dumped = model.model_dump(mode="json") if hasattr(model, "model_dump") else model
    return json.dumps(dumped, indent=2, default=str)


def _ms(ms: int) -> str:
    return stamp(datetime.fromtimestamp(ms / 1000, UTC))


def _clip(message: str | None, length: int = 160) -> str:
    if not message:
        return ""
    return message if len(message) <= length else message[: length - 1] + "…"


__all__ = ["daemon_page", "fleet", "run_page", "table_page"]
