"""Codecs where they pay: a column its codec cannot shrink is stored uncompressed.

Random tokens, hashes and random floats keep about their whole size under LZ4 or zstd, yet the writer pays to
compress them and every reader to decompress them. The writers of level-0 files (:mod:`maintd.table.files.datafiles`)
and every output of maintenance (:mod:`maintd.execution.output`) judge each column by a sample of its plain values
before a file is written, as RocksDB judges a block (docs/design.md, "Data file encoding").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

FUTILE_RATIO = 7 / 8
"""A column whose sample the file's codec cannot shrink below this share of its size is stored uncompressed, as
RocksDB stores a block whose compression saves less than an eighth (``max_compressed_bytes_per_kb``)."""
SAMPLE_BYTES = 32 << 10
"""Bytes of a column's first row group compressed to decide (:func:`without_futile_compression`); smaller samples
decide nothing."""
_CODECS = {"lz4": "lz4_raw"}
"""Parquet codec names of the writer's options whose Arrow codec has another name."""


def without_futile_compression(options: dict[str, Any], first: pa.Table, skip: Iterable[str] = ()) -> dict[str, Any]:
    """``options`` with the columns that their codec does not shrink (random tokens, hashes, random floats) stored
    uncompressed, judged by compressing a sample of each column's values in ``first`` (a file's first row group, or
    the largest file of a writer's batch).

    Compressing such a column costs the writer time for nothing, and every reader a decompression
    (docs/benchmarks.md, "Wide, string-heavy tables", gives the figures). The values the sample holds are those
    Parquet stores plainly (fixed-width values, or the bytes of strings and binaries); ``skip`` (the columns written
    as dictionaries) and other types keep their codec.
    """
    comp = options.get("compression")
    names = first.column_names
    codecs: dict[str, Any] = dict(comp) if isinstance(comp, dict) else dict.fromkeys(names, comp)
    level = options.get("compression_level")
    skipped = set(skip)
    futile = [c for c in names if c not in skipped and _compressed(codecs.get(c)) and _futile(
        first.column(c), str(codecs[c]), level if not isinstance(level, dict) else level.get(c))]
    if not futile:
        return options
    codecs.update(dict.fromkeys(futile, "none"))
    out = {**options, "compression": codecs}
    if isinstance(level, dict):
        out["compression_level"] = {c: v for c, v in level.items() if _compressed(codecs.get(c))}
    elif level is not None:  # a level given for a column that is not compressed is refused
        out["compression_level"] = {c: level for c in names if _compressed(codecs.get(c))}
    return out


def _compressed(codec: Any) -> bool:
    return codec is not None and str(codec).lower() not in ("none", "uncompressed")


def _futile(values: pa.ChunkedArray | pa.Array, codec: str, level: int | None) -> bool:
    sample = _plain_sample(values)
    if sample is None or sample.size < SAMPLE_BYTES // 8:
        return False
    name = _CODECS.get(codec.lower(), codec.lower())
    if not pa.Codec.is_available(name):
        return False
    compressor = pa.Codec(name, compression_level=level) if level is not None and pa.Codec.supports_compression_level(
        name) else pa.Codec(name)
    return bool(compressor.compress(sample).size > FUTILE_RATIO * sample.size)


def _plain_sample(values: pa.ChunkedArray | pa.Array) -> pa.Buffer | None:
    """Up to :data:`SAMPLE_BYTES` of the bytes Parquet would store plainly for the leading values of ``values`` (None:
    a type this does not sample)."""
    if isinstance(values, pa.ChunkedArray):
        values = next((c for c in values.chunks if len(c)), pa.array([], values.type))
    t = values.type
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        width = 8 if pa.types.is_large_string(t) or pa.types.is_large_binary(t) else 4
        offsets = np.frombuffer(values.buffers()[1], np.int64 if width == 8 else np.int32, len(values) + 1,
                                values.offset * width)
        start = int(offsets[0])
        end = min(int(offsets[-1]), start + SAMPLE_BYTES)
        data = values.buffers()[2]
        return None if data is None else data.slice(start, max(0, end - start))
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)) and t.bit_width % 8 == 0:
        width = t.bit_width // 8
        rows = min(len(values), SAMPLE_BYTES // width)
        data = values.buffers()[1]
        return None if data is None else data.slice(values.offset * width, rows * width)
    return None


__all__ = ["FUTILE_RATIO", "SAMPLE_BYTES", "without_futile_compression"]
