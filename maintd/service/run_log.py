"""One log line per table run, and the table and run id bound to every record of a run.

A run ends with exactly one summary line, at INFO when it succeeded or had nothing to do, WARNING when
it was abandoned, ERROR when it failed, so that ``level >= INFO`` shows what maintd did and a failure
is one line to alert on. The line's text says what happened; its ``extra`` fields (JSON mode) carry the
same figures for queries: ``table``, ``run_id``, ``kind``, ``status``, ``seconds`` and, for maintenance,
``tasks_planned``, ``tasks_committed``, ``files_before``, ``files_after``, ``bytes_before``, ``bytes_after``
(for reclamation, ``versions_expired``, ``files_deleted``, ``bytes_deleted``).

:func:`run_context` binds ``table``, ``run_id`` and ``kind`` to every record logged by the thread that
runs the table (loguru's ``contextualize``), the runner's and the commit's included.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from loguru import logger

from maintd.units import fmt_bytes

_LEVELS = {"succeeded": "INFO", "skipped": "INFO", "abandoned": "WARNING", "failed": "ERROR"}


@contextmanager
def run_context(table: str, run_id: int | None, kind: str) -> Iterator[None]:
    """Bind the table, the run id and the run kind to every record logged in this thread meanwhile."""
    with logger.contextualize(table=table, run_id=run_id, kind=kind):
        yield


def summary_fields(kind: str, metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """The figures of a run's summary line, from the metrics the run recorded."""
    m = metrics or {}
    if kind == "maintenance":
        return {
            "tasks_planned": m.get("tasks_planned"),
            "tasks_committed": m.get("tasks_committed"),
            "files_before": m.get("files_before"),
            "files_after": m.get("files"),
            "bytes_before": m.get("bytes_before"),
            "bytes_after": m.get("bytes"),
        }
    deleted = [k for k in m if k.endswith("_files_deleted")]
    return {
        "versions_expired": m.get("versions_expired"),
        "files_deleted": sum(int(m[k] or 0) for k in deleted) if deleted else None,
        "bytes_deleted": sum(int(m[k] or 0) for k in m if k.endswith("_bytes_deleted")) if deleted else None,
    }


def describe(kind: str, fields: Mapping[str, Any]) -> str:
    """What a run did, in words, from :func:`summary_fields`."""
    if kind == "maintenance":
        if fields["tasks_planned"] is None:
            return "no plan"
        files = f"{fields['files_before']} -> {fields['files_after']} file(s)"
        size = f"{fmt_bytes(fields['bytes_before'] or 0)} -> {fmt_bytes(fields['bytes_after'] or 0)}"
        return f"{fields['tasks_committed'] or 0}/{fields['tasks_planned']} task(s), {files}, {size}"
    if fields["files_deleted"] is None:
        return "nothing reclaimed"
    return (
        f"{fields['versions_expired'] or 0} version(s) expired, {fields['files_deleted']} file(s) "
        f"({fmt_bytes(fields['bytes_deleted'] or 0)}) deleted"
    )


def log_run(
    kind: str,
    table: str,
    run_id: int | None,
    status: str,
    seconds: float,
    metrics: Mapping[str, Any] | None,
    *,
    error: str | None = None,
    note: str = "",
    exc: BaseException | None = None,
) -> None:
    """Write the one summary line of a run (see the module docstring); ``note`` is appended to its text."""
    fields = summary_fields(kind, metrics)
    text = describe(kind, fields)
    if error:
        text = f"{text}; {error}" if metrics else error
    run = f"run {run_id}" if run_id is not None else "unrecorded run"
    logger.bind(table=table, run_id=run_id, kind=kind, status=status, seconds=round(seconds, 3), **fields).opt(
        exception=exc
    ).log(_LEVELS.get(status, "INFO"), "{} of {} ({}) {} in {:.1f} s: {}{}", kind, table, run, status, seconds,
          text, note)


__all__ = ["describe", "log_run", "run_context", "summary_fields"]
