"""``maintd table create | describe | history``: create a table, show its layout and its commit log."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table as RichTable

from maintd.cli._output import iso_ms, parse_kv, print_json, print_table, user_errors

if TYPE_CHECKING:
    from maintd.table import Snapshot
    from maintd.table.actions import AddFile

table_app = typer.Typer(help="Create tables and inspect their layout and commit log.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the ``maintd table`` command group to the root app."""
    app.add_typer(table_app, name="table")


def _layer(f: AddFile) -> str:
    return "base" if f.kind == "base" else f"delta L{f.level}"


@table_app.command("create")
def create_command(
    uri: str = typer.Argument(..., help="Where the table lives (a directory path or file:// URI)."),
    schema: str = typer.Option(..., "--schema", help="Columns as name:type[,name:type...]; a trailing ! is NOT NULL, "
                                                     "e.g. 'id:int64!,name:string,ds:string'."),
    primary_key: list[str] = typer.Option(..., "--primary-key", help="Primary key column; repeat for a compound key."),
    partition_by: list[str] = typer.Option([], "--partition-by", help="Partition column; repeat for several."),
    buckets: int | None = typer.Option(None, "--buckets", help="Buckets per partition (write.bucket.num, 1..4096; "
                                                               "default 16; fixed after create)."),
    prop: list[str] = typer.Option([], "--property", help="Table property KEY=VALUE; repeat for several."),
    json_out: bool = typer.Option(False, "--json", help="Print the created table's description as JSON."),
) -> None:
    """Create an empty primary-key table (version 0)."""
    from maintd.table import Table

    properties = parse_kv(prop, "--property")
    with user_errors():
        keys = [k.strip() for item in primary_key for k in item.split(",") if k.strip()]
        parts = [p.strip() for item in partition_by for p in item.split(",") if p.strip()]
        check_policy_properties(uri, properties)
        table = Table.create(uri, schema, keys, parts, buckets=buckets, properties=properties)
        desc = describe(table.snapshot())
    if json_out:
        print_json({"uri": table.uri, **desc})
    else:
        Console().print(f"created table {table.uri} (version 0, {desc['buckets']} buckets, "
                        f"primary key {', '.join(desc['primary_key'])})", highlight=False)


def check_policy_properties(uri: str, properties: dict[str, str]) -> None:
    """Validate ``maintd.*`` policy overrides now, against the packaged policy, rather than at the first plan.

    Raises:
        PolicyError: naming the property and the rule it breaks.
    """
    from maintd.planner import load_policy_file

    if any(k.startswith("maintd.") for k in properties):
        load_policy_file(None).resolve(uri=uri, properties=properties)


def describe(snap: Snapshot) -> dict[str, Any]:
    """A JSON-able description of a snapshot: schema, properties, files and bytes per layer and per bucket."""
    from maintd.table.snapshot import format_partition

    md = snap.metadata
    layers: dict[str, dict[str, int]] = defaultdict(lambda: {"files": 0, "bytes": 0, "rows": 0})
    buckets: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    for f in snap.files.values():
        layer = layers[_layer(f)]
        layer["files"] += 1
        layer["bytes"] += f.bytes
        layer["rows"] += f.rows
        b = buckets[(format_partition(snap.partition_of(f)), f.bucket)]
        b[_layer(f)] += 1
        b["bytes"] += f.bytes
        b["rows"] += f.rows
    return {
        "version": snap.version,
        "commit_time": iso_ms(snap.timestamp),
        "schema": [{"name": f.name, "type": f.type, "nullable": f.nullable} for f in md.fields],
        "primary_key": list(md.primary_key),
        "partition_by": list(md.partition_by),
        "buckets": md.buckets,
        "properties": dict(sorted(md.properties.items())),
        "files": len(snap.files),
        "bytes": snap.total_bytes(),
        "layers": {k: layers[k] for k in sorted(layers)},
        "per_bucket": [
            {"partition": part, "bucket": bucket, **dict(sorted(c.items()))}
            for (part, bucket), c in sorted(buckets.items())
        ],
    }


@table_app.command("describe")
def describe_command(
    uri: str = typer.Argument(..., help="Table URI."),
    version: int | None = typer.Option(None, "--version", help="Describe this version (default: latest)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Schema, properties, version, files and bytes per level and kind, and a per-bucket table."""
    from maintd.planner.candidates import fmt_bytes
    from maintd.table import Table

    with user_errors():
        table = Table.open(uri)
        v = table.resolve_version(version)
        desc = describe(table.snapshot(v))
    if json_out:
        print_json({"uri": table.uri, **desc})
        return
    out = Console(soft_wrap=True, highlight=False)
    out.print(f"[bold]{table.uri}[/bold]  version {desc['version']} ({desc['commit_time']})")
    out.print("schema: " + ", ".join(f"{c['name']}:{c['type']}{'' if c['nullable'] else '!'}" for c in desc["schema"]))
    out.print(f"primary key: {', '.join(desc['primary_key'])}   partitioned by: "
              f"{', '.join(desc['partition_by']) or '(none)'}   buckets: {desc['buckets']}")
    out.print("properties: " + (", ".join(f"{k}={v}" for k, v in desc["properties"].items()) or "(none)"))
    out.print(f"files: {desc['files']}, {fmt_bytes(desc['bytes'])}")
    layers = RichTable("layer", "files", "bytes", "rows", title="files per kind and level")
    for name, s in desc["layers"].items():
        layers.add_row(name, str(s["files"]), fmt_bytes(s["bytes"]), str(s["rows"]))
    print_table(out, layers)
    names = sorted({k for b in desc["per_bucket"] for k in b} - {"partition", "bucket", "bytes", "rows"})
    per = RichTable("partition", "bucket", *names, "bytes", "rows", title="per bucket")
    for b in desc["per_bucket"]:
        per.add_row(b["partition"], str(b["bucket"]), *(str(b.get(n, 0)) for n in names),
                    fmt_bytes(b["bytes"]), str(b["rows"]))
    print_table(out, per)


@table_app.command("set-properties")
def set_properties_command(
    uri: str = typer.Argument(..., help="Table URI."),
    prop: list[str] = typer.Option(..., "--property", help="Table property KEY=VALUE; repeat for several."),
) -> None:
    """Set table properties (e.g. acid.data.retain.hours); a metadata commit, validated first."""
    from maintd.table import Table

    properties = parse_kv(prop, "--property")
    with user_errors():
        table = Table.open(uri)
        check_policy_properties(table.uri, {**table.snapshot().properties, **properties})
        version = table.set_properties(properties)
    shown = ", ".join(f"{k}={v}" for k, v in properties.items())
    Console().print(f"set {shown} at version {version}", highlight=False)


@table_app.command("history")
def history_command(
    uri: str = typer.Argument(..., help="Table URI."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Show at most this many commits."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The table's commits, newest first, as far back as history is retained."""
    from maintd.table import Table

    with user_errors():
        records = Table.open(uri).history(limit=limit)
    rows: list[dict[str, Any]] = [
        {"version": r.version, "time": iso_ms(r.timestamp), "operation": r.operation, "read_version": r.read_version,
         "isolation_level": r.isolation_level, "data_change": r.data_change, "files_added": r.files_added,
         "files_removed": r.files_removed, "parameters": dict(r.parameters), "metrics": dict(r.metrics),
         "txn_id": r.txn_id}
        for r in records
    ]
    if json_out:
        print_json(rows)
        return
    out = RichTable("version", "time", "operation", "read", "data", "+files", "-files", "parameters")
    for r in rows:
        params = ", ".join(f"{k}={v}" for k, v in r["parameters"].items())
        out.add_row(str(r["version"]), r["time"], r["operation"], str(r["read_version"]),
                    "yes" if r["data_change"] else "no", str(r["files_added"]), str(r["files_removed"]), params)
    print_table(Console(soft_wrap=True), out)
