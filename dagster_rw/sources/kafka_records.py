"""Kafka record sets decoded in bulk: record batch format v2 read with numpy, not record by record.

A fetch response carries, per partition, a record set: record batches back to back, the last one
possibly cut short by the broker's size limit. Each v2 batch is a 61-byte header (base offset,
length, leader epoch, magic, CRC, attributes, last offset delta, base and max timestamp, producer
id and epoch, base sequence, record count) and its records, compressed as a whole or not. A record
is a zig-zag varint length, then attributes (one byte), timestamp delta, offset delta, key
(varint length, -1 for null, bytes), value (likewise) and headers.

The headers of the batches are read one by one (a few per megabyte); their record areas are
decompressed where needed and joined into one buffer. One loop in Python follows the record
lengths through that buffer (it only reads a length and jumps), then every field of every record
is read by numpy, a varint position at a time for all records at once. Values are not copied out:
they are (start, length) pairs into the joined buffer.

Control batches (transaction markers) hold no records for a reader and are skipped, as
kafka-python's consumer skips them; records of aborted transactions are kept, as a consumer reading
uncommitted does. A batch of the older message formats (magic 0 and 1) is read by kafka-python.

This module imports nothing of dagster_rw (only numpy, and kafka-python and pyarrow where needed),
as the modules Spark ships to its workers by value must not.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

HEADER = ">qiibIhiqqqhii"  # the v2 batch header, 61 bytes (a format, not a struct.Struct: this module is pickled)
HEADER_SIZE = struct.calcsize(HEADER)
LOG_OVERHEAD = 12  # base offset and length: the part of a batch its length does not count
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TIMESTAMP_TYPE_MASK = 0x08  # LogAppendTime: every record's timestamp is the batch's max timestamp
CONTROL_MASK = 0x20
_PAD = bytes(16)  # after the joined records, so that reading a varint past the end stays in bounds


class CorruptRecords(ValueError):
    """A record set that does not follow the format (or a codec this process cannot read)."""


@dataclass
class Records:
    """Decoded records of one partition, in offset order. Keys and values are (start, length)
    pairs into `data`; a length of -1 is a null key or value."""

    offsets: np.ndarray
    timestamps: np.ndarray
    data: bytes
    key_starts: np.ndarray
    key_lengths: np.ndarray
    value_starts: np.ndarray
    value_lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets)

    def values(self) -> list[bytes | None]:
        return _slices(self.data, self.value_starts, self.value_lengths)

    def keys(self) -> list[bytes | None]:
        return _slices(self.data, self.key_starts, self.key_lengths)

    def value_array(self):
        """The values as one Arrow binary array (nulls where the value is null)."""
        return value_array([self])

    def take(self, mask: np.ndarray) -> Records:
        return Records(self.offsets[mask], self.timestamps[mask], self.data, self.key_starts[mask],
                       self.key_lengths[mask], self.value_starts[mask], self.value_lengths[mask])


def empty() -> Records:
    z = np.zeros(0, np.int64)
    return Records(z, z, b"", z, z, z, z)


def concat(parts: list[Records]) -> Records:
    """The records of `parts` one after the other, in one buffer."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty()
    if len(parts) == 1:
        return parts[0]
    shift = np.cumsum([0] + [len(p.data) for p in parts[:-1]])

    def cat(name, shifted=False):
        arrays = [getattr(p, name) for p in parts]
        if shifted:  # a null keeps its start (unused); only its length says it is null
            arrays = [a + s for a, s in zip(arrays, shift)]
        return np.concatenate(arrays)

    return Records(cat("offsets"), cat("timestamps"), b"".join(p.data for p in parts),
                   cat("key_starts", True), cat("key_lengths"), cat("value_starts", True), cat("value_lengths"))


def _slices(data: bytes, starts: np.ndarray, lengths: np.ndarray) -> list[bytes | None]:
    ends = starts + lengths
    if len(lengths) and lengths.min() < 0:
        return [data[s:e] if e >= s else None for s, e in zip(starts.tolist(), ends.tolist())]
    return [data[s:e] for s, e in zip(starts.tolist(), ends.tolist())]


def value_array(parts: list[Records]):
    """The values of `parts`, one after the other, as one Arrow binary array (large_binary past
    2 GB; nulls where a value is null). Built as a binary view over the parts' buffers (a length
    and a place per value, the first bytes inline, numpy over records, not bytes), then cast by
    Arrow, which copies the value bytes once."""
    import pyarrow as pa

    parts = [p for p in parts if len(p)]
    if not parts:
        return pa.array([], pa.binary())
    if any(len(p.data) >= 1 << 31 for p in parts):  # a view's place is an int32: not from one fetch
        return pa.concat_arrays([_gathered(p.data, p.value_starts, p.value_lengths).cast(pa.large_binary())
                                 for p in parts])
    lengths = np.concatenate([p.value_lengths for p in parts])
    views = np.concatenate([_views(p.data, p.value_starts, p.value_lengths, i) for i, p in enumerate(parts)])
    nulls = int((lengths < 0).sum())
    validity = pa.py_buffer(np.packbits(lengths >= 0, bitorder="little").tobytes()) if nulls else None
    array = pa.Array.from_buffers(pa.binary_view(), len(lengths),
                                  [validity, pa.py_buffer(views), *(pa.py_buffer(p.data) for p in parts)],
                                  null_count=nulls)
    total = int(np.maximum(lengths, 0).sum())
    return array.cast(pa.binary() if total < (1 << 31) - 1 else pa.large_binary())


def _views(data: bytes, starts: np.ndarray, lengths: np.ndarray, index: int) -> np.ndarray:
    """Arrow's 16-byte views of values in buffer `index`: the length, then the value itself when
    it has at most 12 bytes, else its first 4 bytes, the buffer's index and the value's start."""
    n = len(starts)
    size = np.maximum(lengths, 0)
    views = np.zeros((n, 16), np.uint8)
    src = np.frombuffer(data, np.uint8)
    if n and len(src):
        at = starts[:, None] + np.arange(12)
        np.minimum(at, len(src) - 1, out=at)
        head = src[at]
        head[np.arange(12) >= size[:, None]] = 0  # past a short value: zeros, as the format wants
        views[:, 4:] = head
    words = views.view(np.int32)
    words[:, 0] = size
    long = size > 12
    words[long, 2] = index
    words[long, 3] = starts[long]
    return views


def _gathered(data: bytes, starts: np.ndarray, lengths: np.ndarray):
    """The values as one Arrow binary array, gathered byte by byte by numpy (for a buffer too
    large for a view's int32 place)."""
    import pyarrow as pa

    n = len(starts)
    sizes = np.maximum(lengths, 0)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    total = int(offsets[-1])
    src = np.frombuffer(data, np.uint8)
    if n and total:
        # one gather over every value byte: value i's bytes come from starts[i] on
        at = np.repeat(starts - offsets[:-1], sizes) + np.arange(total, dtype=np.int64)
        out = src[at]
    else:
        out = np.zeros(0, np.uint8)
    validity = None
    nulls = int((lengths < 0).sum())
    if nulls:
        validity = pa.py_buffer(np.packbits(lengths >= 0, bitorder="little").tobytes())
    kind, off = (pa.binary(), offsets.astype(np.int32)) if total < (1 << 31) else (pa.large_binary(), offsets)
    return pa.Array.from_buffers(kind, n, [validity, pa.py_buffer(off.tobytes()), pa.py_buffer(out.tobytes())],
                                 null_count=nulls)


def next_offset(buf: bytes) -> int | None:
    """The offset after the last complete batch of a record set (None when it holds none): where
    the next fetch starts. Reads only the batch headers (all of an entry of the older formats)."""
    nxt = None
    for pos, base, stop, magic in _entries(buf):
        if magic == 2:
            (last_delta,) = struct.unpack_from(">i", buf, pos + 23)
            nxt = base + last_delta + 1
        else:
            _, last = _legacy(memoryview(buf)[pos:stop])
            nxt = last + 1 if last is not None else nxt
    return nxt


def _entries(buf: bytes):
    """The complete entries of a record set (batches, or messages of the older formats), in order:
    (position, base offset, end position, magic byte or -1); stops at one cut short."""
    pos, size = 0, len(buf)
    while pos + LOG_OVERHEAD <= size:
        base, length = struct.unpack_from(">qi", buf, pos)
        stop = pos + LOG_OVERHEAD + length
        if stop > size or length < 0:
            return
        yield pos, base, stop, (buf[pos + 16] if pos + 17 <= size else -1)
        pos = stop


def decode(buf: bytes, start: int = 0, end: int | None = None) -> tuple[Records, int | None]:
    """The records of a record set with start <= offset < end (end None: no bound), and the offset
    after its last complete batch (None when it holds none). A batch cut short at the end is
    ignored; the next fetch starts at it."""
    mv = memoryview(buf)
    areas: list = []  # record areas of v2 batches, each: (bytes-like, record count, base offset, timestamps)
    legacy: list[Records] = []
    nxt = None
    for pos, base, stop, magic in _entries(buf):
        if magic != 2:
            part, last = _legacy(mv[pos:stop])
            if last is not None:
                nxt = last + 1
                legacy.append(part)
            continue
        if stop - pos < HEADER_SIZE:
            raise CorruptRecords(f"record batch at offset {base} is {stop - pos - LOG_OVERHEAD} bytes long")
        (base, _, _, _, _, attributes, last_delta, first_ts, max_ts, _, _, _, count) = \
            struct.unpack_from(HEADER, buf, pos)
        nxt = base + last_delta + 1
        if not attributes & CONTROL_MASK and count > 0 and base + last_delta >= start and (end is None or base < end):
            area = mv[pos + HEADER_SIZE:stop]
            codec = attributes & 0x07
            if codec:
                area = _decompress(codec, area, base)
            log_append = bool(attributes & TIMESTAMP_TYPE_MASK)
            areas.append((area, count, base, max_ts if log_append else first_ts, log_append))
    records = _decode_areas(areas) if areas else empty()
    if legacy:
        records = concat(legacy + [records])
        order = np.argsort(records.offsets, kind="stable")
        records = records.take(order)
    if len(records):
        keep = records.offsets >= start
        if end is not None:
            keep &= records.offsets < end
        if not keep.all():
            records = records.take(keep)
    return records, nxt


def _decompress(codec: int, area, base: int) -> bytes:
    from kafka import codec as kc  # kafka-python's codecs: the libraries its consumer reads them with

    name = CODECS.get(codec, str(codec))
    readers = {1: (kc.has_gzip, kc.gzip_decode), 2: (kc.has_snappy, kc.snappy_decode),
               3: (kc.has_lz4, kc.lz4_decode), 4: (kc.has_zstd, kc.zstd_decode)}
    if codec not in readers:
        raise CorruptRecords(f"record batch at offset {base}: unknown compression codec {codec}")
    available, read = readers[codec]
    if not available():
        raise CorruptRecords(f"record batch at offset {base} is compressed with {name}, which this "
                             f"process cannot read (install the {name} library kafka-python uses)")
    return read(area if codec == 1 else bytes(area))


def _decode_areas(areas: list) -> Records:
    counts = np.array([a[1] for a in areas], np.int64)
    data = b"".join([a[0] for a in areas] + [_PAD])
    bounds = np.cumsum([0] + [len(a[0]) for a in areas])
    body, stop = _follow_lengths(data, bounds.tolist(), counts.tolist(), [a[2] for a in areas])
    arr = np.frombuffer(data, np.uint8)
    p = body + 1  # attributes: one byte, unused
    ts_delta, p = _varints(arr, p, stop)
    offset_delta, p = _varints(arr, p, stop)
    key_len, p = _varints(arr, p, stop)
    key_start = p
    p = p + np.maximum(key_len, 0)
    value_len, p = _varints(arr, p, stop)
    value_start = p
    p = p + np.maximum(value_len, 0)
    if (p >= stop).any() or (key_len < -1).any() or (value_len < -1).any():  # headers follow: at least their count
        at = int(np.flatnonzero((p >= stop) | (key_len < -1) | (value_len < -1))[0])
        raise CorruptRecords(f"record {at} of a record set does not fit in its length")
    base = np.repeat(np.array([a[2] for a in areas], np.int64), counts)
    first_ts = np.repeat(np.array([a[3] for a in areas], np.int64), counts)
    log_append = np.repeat(np.array([a[4] for a in areas], bool), counts)
    timestamps = np.where(log_append, first_ts, first_ts + ts_delta)
    return Records(base + offset_delta, timestamps, data, key_start, key_len, value_start, value_len)


def _follow_lengths(data: bytes, bounds: list[int], counts: list[int], bases: list[int]):
    """Where each record's body starts and stops: the one loop over records, which reads only the
    length of each and jumps past it (the body's start is found again by numpy afterwards)."""
    stops: list[int] = []
    append = stops.append
    try:
        for a, count in enumerate(counts):
            pos = bounds[a]
            for _ in range(count):
                b = data[pos]
                if b < 0x80:
                    pos += 1 + ((b >> 1) ^ -(b & 1))
                else:
                    c = data[pos + 1]
                    if c < 0x80:
                        v = (b & 0x7F) | (c << 7)
                        pos += 2 + ((v >> 1) ^ -(v & 1))
                    else:
                        v, pos = _varint(data, pos)
                        pos += (v >> 1) ^ -(v & 1)
                append(pos)
            if pos != bounds[a + 1]:
                raise CorruptRecords(f"record batch at offset {bases[a]}: its {count} records take "
                                     f"{pos - bounds[a]} bytes, not {bounds[a + 1] - bounds[a]}")
    except IndexError:
        raise CorruptRecords(f"record batch at offset {bases[a]}: a record runs past the batch") from None
    stop = np.array(stops, np.int64)
    begin = np.empty_like(stop)
    begin[1:] = stop[:-1]
    begin[np.cumsum([0] + counts[:-1])] = bounds[:-1]
    length, body = _varints(np.frombuffer(data, np.uint8), begin, stop)
    if (body + length != stop).any():
        raise CorruptRecords("a record's length does not match its place")
    return body, stop


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    v, shift = 0, 0
    while True:
        if shift > 63 or pos >= len(data):
            raise CorruptRecords("a varint runs past its record")
        b = data[pos]
        v |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return v, pos
        shift += 7


def _varints(arr: np.ndarray, pos: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zig-zag varints at `pos` (one per record, all at once), and the positions after them."""
    if len(pos) and (pos >= stop).any():
        raise CorruptRecords("a record ends inside its fields")
    b = arr[pos]
    value = (b & 0x7F).astype(np.uint64)
    size = np.ones(len(pos), np.int64)
    more = np.flatnonzero(b >= 0x80)
    shift = 7
    while len(more):
        if shift > 63:
            raise CorruptRecords("a varint longer than ten bytes")
        at = pos[more] + size[more]
        if (at >= stop[more] + 10).any():
            raise CorruptRecords("a varint runs past its record")
        b = arr[at]
        value[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        size[more] += 1
        more = more[b >= 0x80]
        shift += 7
    signed = (value >> np.uint64(1)) ^ (np.uint64(0) - (value & np.uint64(1)))
    return signed.view(np.int64), pos + size


def _legacy(batch) -> tuple[Records, int | None]:
    """A message set of the older formats (magic 0 or 1), read by kafka-python."""
    from kafka.record import MemoryRecords

    offsets, timestamps, keys, values = [], [], [], []
    records = MemoryRecords(bytes(batch))
    while True:
        b = records.next_batch()
        if b is None:
            break
        for r in b:
            offsets.append(r.offset)
            timestamps.append(r.timestamp if r.timestamp is not None else -1)
            keys.append(r.key)
            values.append(r.value)
    if not offsets:
        return empty(), None
    data, ks, kl, vs, vl = _pack(keys + values)
    n = len(offsets)
    return Records(np.array(offsets, np.int64), np.array(timestamps, np.int64), data,
                   ks[:n], kl[:n], vs[n:], vl[n:]), offsets[-1]


def _pack(items: list[bytes | None]):
    lengths = np.array([-1 if x is None else len(x) for x in items], np.int64)
    starts = np.zeros(len(items), np.int64)
    if len(items) > 1:
        np.cumsum(np.maximum(lengths[:-1], 0), out=starts[1:])
    data = b"".join(x for x in items if x is not None)
    return data, starts, lengths, starts, lengths
