"""``maintd table create | describe | history | pin | unpin | pins | set-properties | add-columns |
upgrade-protocol``: create a table, show its layout and its commit log, pin versions for long reads, and change
its properties, schema and protocol."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import typer

from maintd.cli._output import confirm, iso_ms, parse_kv, print_json, print_table, user_errors

if TYPE_CHECKING:
    pass

if TYPE_CHECKING:
    from maintd.table import Pin, Snapshot
    from maintd.table.log.actions import AddFile, Protocol

table_app = typer.Typer(help="Create tables and inspect their layout and commit log.",
                        no_args_is_help=True, rich_markup_mode=None)


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
    primary_key: list[str] = typer.Option(..., "--primary-key", help="Primary key column (NOT NULL); repeat for a "
                                          "compound key. A row is identified by its partition values and its key."),
    partition_by: list[str] = typer.Option([], "--partition-by", help="Partition column; repeat for several."),
    buckets: int | None = typer.Option(None, "--buckets", help="Buckets per partition (write.bucket.num, 1..4096; "
                                                               "default 16; fixed after create)."),
    prop: list[str] = typer.Option([], "--property", help="Table property KEY=VALUE; repeat for several."),
    feature: list[str] = typer.Option([], "--feature", help="Create the table on named table features with this "
                                      "feature (and what it depends on); repeat for several. Without it the table "
                                      "is created at protocol 2, which every maintd since reads."),
    json_out: bool = typer.Option(False, "--json", help="Print the created table's description as JSON."),
) -> None:
    """Create an empty primary-key table (version 0).

    A row is identified by its partition values and its primary key: with a key that leaves out a partition
    column, the same key may live in two partitions (an upsert into another partition adds a row; it does not
    move the old one), and the command warns of it. Key columns must be NOT NULL (``id:int64!``).
    """
    from loguru import logger
    from rich.console import Console

    from maintd.table import Table
    from maintd.table.table import key_identity_warning

    properties = parse_kv(prop, "--property")
    with user_errors():
        keys = [k.strip() for item in primary_key for k in item.split(",") if k.strip()]
        parts = [p.strip() for item in partition_by for p in item.split(",") if p.strip()]
        check_policy_properties(uri, properties)
        logger.disable("maintd.table.table")  # its warning of a key without the partitions is printed below
        try:
            table = Table.create(uri, schema, keys, parts, buckets=buckets, properties=properties,
                                 features=feature or None)
        finally:
            logger.enable("maintd.table.table")
        desc = describe(table.snapshot())
    outside = [p for p in parts if p not in keys]
    if outside:
        Console(stderr=True, soft_wrap=True).print(
            f"warning: {key_identity_warning(table.uri, keys, outside)}", highlight=False, markup=False)
    if json_out:
        print_json({"uri": table.uri, **desc})
    else:
        identity = ", ".join(dict.fromkeys([*desc["partition_by"], *desc["primary_key"]]))
        Console(soft_wrap=True).print(
            f"created table {table.uri} (version 0, {desc['buckets']} buckets, primary key "
            f"{', '.join(desc['primary_key'])}); a row is identified by ({identity})", highlight=False, markup=False)


def check_policy_properties(uri: str, properties: dict[str, str]) -> None:
    """Validate ``maintd.*`` policy overrides now, against the packaged policy, rather than at the first plan.

    Raises:
        PolicyError: naming the property and the rule it breaks.
    """
    from maintd.planner import load_policy_file

    if any(k.startswith("maintd.") for k in properties):
        load_policy_file(None).resolve(uri=uri, properties=properties)


def pin_row(pin: Pin, now_ms: int | None = None) -> dict[str, Any]:
    """A pin as JSON-able fields (``expired``: its TTL passed at ``now_ms``, when given)."""
    row: dict[str, Any] = {"id": pin.id, "version": pin.version, "created": iso_ms(pin.created),
                           "expires": iso_ms(pin.expires), "reason": pin.reason, "who": pin.who}
    if now_ms is not None:
        row["expired"] = not pin.live(now_ms)
    return row


def protocol_row(protocol: Protocol) -> dict[str, Any]:
    """A protocol as JSON: its versions, the features it supports (``features``: implied by a legacy version, or
    named), and at version 7 the lists its ``protocol`` action holds."""
    from maintd.table.log import features

    row: dict[str, Any] = {"reader": protocol.min_reader_version, "writer": protocol.min_writer_version,
                           "features": sorted(features.features_of(protocol))}
    if protocol.table_features:
        row |= {"reader_features": list(protocol.reader_features or ()),
                "writer_features": list(protocol.writer_features or ())}
    return row


def protocol_text(row: dict[str, Any]) -> str:
    """:func:`protocol_row` for people: ``reader 4, writer 4 (implies pins, priorRows)`` or ``reader 7, writer 7
    (named features: pins)``."""
    versions = f"reader {row['reader']}, writer {row['writer']}"
    if "writer_features" in row:
        return f"{versions} (named features: {', '.join(row['features']) or 'none'})"
    return f"{versions} (implies {', '.join(row['features'])})" if row["features"] else versions


def describe(snap: Snapshot, pins: tuple[list[Pin], int] | None = None) -> dict[str, Any]:
    """A JSON-able description of a snapshot: schema, properties, files and bytes per layer and per bucket, and
    (given ``pins``: the live pins and the bytes they hold back) its pins."""
    from maintd.table.log.snapshot import format_partition

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
        "protocol": protocol_row(snap.protocol),
        "files": len(snap.files),
        "bytes": snap.total_bytes(),
        "prior_rows": {"files": len(snap.priors), "bytes": sum(p.bytes for p in snap.priors.values()),
                       "looked_up": sum(p.attached for p in snap.priors.values())},
        "layers": {k: layers[k] for k in sorted(layers)},
        "per_bucket": [
            {"partition": part, "bucket": bucket, **dict(sorted(c.items()))}
            for (part, bucket), c in sorted(buckets.items())
        ],
        **({} if pins is None else {"pins": [pin_row(p) for p in pins[0]], "pinned_bytes": pins[1]}),
    }


@table_app.command("describe")
def describe_command(
    uri: str = typer.Argument(..., help="Table URI."),
    version: int | None = typer.Option(None, "--version", help="Describe this version (default: latest)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Schema, properties, version, files and bytes per level and kind, and a per-bucket table."""
    from maintd.reclaim import held_by_pins
    from maintd.table import Table

    with user_errors():
        table = Table.open(uri)
        v = table.resolve_version(version)
        latest = table.snapshot()
        desc = describe(table.snapshot(v), held_by_pins(table, latest, datetime.now(UTC)))
    if json_out:
        print_json({"uri": table.uri, **desc})
        return
    from rich.console import Console  # only to print for people: --json needs no Rich
    from rich.table import Table as RichTable

    from maintd.units import fmt_bytes

    out = Console(soft_wrap=True, highlight=False)
    out.print(f"[bold]{table.uri}[/bold]  version {desc['version']} ({desc['commit_time']})")
    out.print("schema: " + ", ".join(f"{c['name']}:{c['type']}{'' if c['nullable'] else '!'}" for c in desc["schema"]))
    out.print(f"primary key: {', '.join(desc['primary_key'])}   partitioned by: "
              f"{', '.join(desc['partition_by']) or '(none)'}   buckets: {desc['buckets']}")
    out.print("properties: " + (", ".join(f"{k}={v}" for k, v in desc["properties"].items()) or "(none)"))
    out.print(f"files: {desc['files']}, {fmt_bytes(desc['bytes'])}   protocol: {protocol_text(desc['protocol'])}")
    if desc["prior_rows"]["files"]:
        looked_up = desc["prior_rows"]["looked_up"]
        out.print(f"prior-rows files (for the change feed): {desc['prior_rows']['files']}, "
                  f"{fmt_bytes(desc['prior_rows']['bytes'])}"
                  + (f" ({looked_up} looked up by clusterings, their BaseFiles live)" if looked_up else ""))
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
    if desc["pins"]:
        pins = RichTable("pin", "version", "expires", "who", "reason",
                         title=f"pins (holding back {fmt_bytes(desc['pinned_bytes'])} from reclamation)")
        for p in desc["pins"]:
            pins.add_row(p["id"], str(p["version"]), p["expires"], p["who"], p["reason"])
        print_table(out, pins)
    else:
        out.print("pins: none")


@table_app.command("pin")
def pin_command(
    uri: str = typer.Argument(..., help="Table URI."),
    version: int = typer.Argument(..., help="The version to keep readable."),
    ttl_hours: float = typer.Option(..., "--ttl-hours", help="How long the pin holds, in hours (> 0): longer than "
                                                             "the reads of the version take."),
    reason: str = typer.Option("", "--reason", help="Why, for operators (e.g. the job that reads it)."),
    json_out: bool = typer.Option(False, "--json", help="Print the pin as JSON."),
) -> None:
    """Pin a version: reclamation (and PURGE, unless forced) keeps it and every file it reads until the pin is
    removed or its TTL passes. The first pin enables feature pins (a table of a legacy protocol goes to 3)."""
    from rich.console import Console

    from maintd.table import Table

    with user_errors():
        table = Table.open(uri)
        if not ttl_hours > 0:  # also NaN
            from maintd.errors import InvalidInputError

            raise InvalidInputError(f"--ttl-hours {ttl_hours} is not positive; give how long the readers of version "
                                    f"{version} need it, e.g. --ttl-hours 3")
        pin = table.pin(version, timedelta(hours=ttl_hours), reason)
    if json_out:
        print_json(pin_row(pin))
    else:
        Console(soft_wrap=True).print(
            f"pinned version {pin.version} of {table.uri} until {iso_ms(pin.expires)}: pin id {pin.id} "
            f"(`maintd table unpin {table.uri} {pin.id}` releases it)", highlight=False)


@table_app.command("unpin")
def unpin_command(
    uri: str = typer.Argument(..., help="Table URI."),
    pin_id: str = typer.Argument(..., help="The pin's id (`maintd table pins` lists them)."),
) -> None:
    """Remove a pin: reclamation may expire the version again."""
    from rich.console import Console

    from maintd.table import Table

    with user_errors():
        table = Table.open(uri)
        version = table.unpin(pin_id)
    Console().print(f"removed pin {pin_id} of {table.uri} at version {version}", highlight=False)


@table_app.command("pins")
def pins_command(
    uri: str = typer.Argument(..., help="Table URI."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The table's pins (expired ones too, until reclamation removes them) and the bytes they hold back."""
    from rich.console import Console
    from rich.table import Table as RichTable

    from maintd.reclaim import held_by_pins
    from maintd.table import Table
    from maintd.units import fmt_bytes

    with user_errors():
        table = Table.open(uri)
        snap = table.snapshot()
        now = datetime.now(UTC)
        _, held = held_by_pins(table, snap, now)
        now_ms = int(now.timestamp() * 1000)
        rows = [pin_row(p, now_ms) for p in sorted(snap.pins.values(), key=lambda p: (p.version, p.id))]
    if json_out:
        print_json({"uri": table.uri, "version": snap.version, "pins": rows, "pinned_bytes": held})
        return
    out = Console(soft_wrap=True, highlight=False)
    if not rows:
        out.print(f"{table.uri}: no pins")
        return
    listing = RichTable("pin", "version", "created", "expires", "state", "who", "reason",
                        title=f"pins of {table.uri} (holding back {fmt_bytes(held)} from reclamation)")
    for r in rows:
        listing.add_row(r["id"], str(r["version"]), r["created"], r["expires"], "expired" if r["expired"] else "live",
                        r["who"], r["reason"])
    print_table(out, listing)


@table_app.command("add-columns")
def add_columns_command(
    uri: str = typer.Argument(..., help="Table URI."),
    columns: str = typer.Argument(..., help="Columns to add as name:type[,name:type...], e.g. 'note:string,score:"
                                            "float64'; always nullable (no trailing !)."),
    json_out: bool = typer.Option(False, "--json", help="Print the version and the new schema as JSON."),
) -> None:
    """Add nullable value columns to the table's schema (a metadata commit).

    Rows written before read the new columns as nulls; older versions keep their schema. The first addition
    enables feature addedColumns (a legacy table goes to protocol 6): older maintd versions refuse the table from
    then on. Only nullable value
    columns can be added: an existing column, NOT NULL, a key or partition column or an unknown type is refused.
    """
    from rich.console import Console

    from maintd.table import Table

    with user_errors():
        table = Table.open(uri)
        version = table.add_columns(columns)
        fields = table.snapshot(version).metadata.fields
    if json_out:
        print_json({"table": table.uri, "version": version,
                    "schema": [{"name": f.name, "type": f.type, "nullable": f.nullable, "added": f.added}
                               for f in fields]})
        return
    added = ", ".join(f"{f.name}:{f.type}" for f in fields if f.added)
    Console().print(f"added columns at version {version}; columns added since create: {added}", highlight=False)


@table_app.command("set-properties")
def set_properties_command(
    uri: str = typer.Argument(..., help="Table URI."),
    prop: list[str] = typer.Option(..., "--property", help="Table property KEY=VALUE; repeat for several."),
) -> None:
    """Set table properties (e.g. acid.data.retain.hours); a metadata commit, validated first."""
    from rich.console import Console

    from maintd.table import Table

    properties = parse_kv(prop, "--property")
    with user_errors():
        table = Table.open(uri)
        check_policy_properties(table.uri, {**table.snapshot().properties, **properties})
        version = table.set_properties(properties)
    shown = ", ".join(f"{k}={v}" for k, v in properties.items())
    Console().print(f"set {shown} at version {version}", highlight=False)


@table_app.command("upgrade-protocol")
def upgrade_protocol_command(
    uri: str = typer.Argument(..., help="Table URI."),
    feature: list[str] = typer.Option([], "--feature", help="Also enable this named feature (and what it depends "
                                      "on); repeat for several."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation (needed when not on a terminal)."),
    json_out: bool = typer.Option(False, "--json", help="Print the protocol before and after as JSON."),
) -> None:
    """Move a table to named table features (protocol 7): the features its protocol version implied (nothing is
    lost; a table of protocol 1 gets self-verifying commit files) plus those given with --feature; a table on
    named features already gains those given. A protocol commit: every concurrent transaction fails and retries.
    maintd without table features refuses the table afterwards: upgrade every reader and writer first. Running
    it again changes nothing."""
    from rich.console import Console

    from maintd.table import Table
    from maintd.table.log import features

    out = Console(soft_wrap=True, highlight=False, markup=False)
    with user_errors():
        table = Table.open(uri)
        asked = features.known(feature, table=table.uri)
        before = table.snapshot()
        target = features.upgrade(before.protocol, asked)
    now = protocol_row(before.protocol)
    if target is None:
        if json_out:
            print_json({"uri": table.uri, "version": before.version, "changed": False, "protocol": now})
        else:
            out.print(f"{table.uri} is at protocol {protocol_text(now)} already; nothing changed")
        return
    then = protocol_row(target)
    confirm(f"Upgrade {table.uri} from protocol {protocol_text(now)} to {protocol_text(then)}? maintd without "
            "table features (or without these) refuses the table afterwards", yes=yes, out=out,
            cancelled="upgrade cancelled; nothing changed",
            refusal=f"refusing to upgrade the protocol of {table.uri} without confirmation: not on a terminal; "
                    "pass --yes to confirm")
    with user_errors():
        version = table.upgrade_protocol(asked)
        then = protocol_row(table.snapshot(version).protocol)
    if json_out:
        print_json({"uri": table.uri, "version": version, "changed": True, "previous": now, "protocol": then})
    else:
        out.print(f"upgraded {table.uri} from protocol {protocol_text(now)} to {protocol_text(then)} at version "
                  f"{version}")


@table_app.command("history")
def history_command(
    uri: str = typer.Argument(..., help="Table URI."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Show at most this many commits."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The table's commits, newest first, as far back as history is retained."""
    from rich.console import Console
    from rich.table import Table as RichTable

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
