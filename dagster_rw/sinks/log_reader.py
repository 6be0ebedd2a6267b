"""What a sink has not delivered yet, cut into batches: its own pending log (the snapshot taken at
CREATE SINK) and its input's change files after the sink's committed epoch, oldest first."""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from ..operators.base import W
from ..storage import sst_cache
from ..storage.manifest import Manifest, SstFile
from .key_conversion import FILE


@dataclass
class Batch:
    """Change files covering the epochs (epoch_from, epoch_to], delivered and committed together."""

    epoch_from: int
    epoch_to: int
    files: list[SstFile] = field(default_factory=list)
    own: list[SstFile] = field(default_factory=list)  # files of the sink's own log among `files`

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


def pending_files(sink_manifest: Manifest, input_manifest: Manifest, target: int) -> tuple[list, list]:
    """(own pending files, the input's change files in (committed, target])."""
    after = sink_manifest.epoch
    return list(sink_manifest.changelog), [f for f in input_manifest.changelog
                                           if f.epoch_from >= after and f.epoch_to <= target]


def cut_batches(own: list[SstFile], files: list[SstFile], committed: int, target: int,
                max_rows: int) -> list[Batch]:
    """Consecutive files grouped up to `max_rows` (a single larger file is a batch of its own); the
    last batch reaches `target` even when the last epochs changed nothing."""
    batches: list[Batch] = []
    current: Batch | None = None
    for f in [*own, *files]:
        is_own = f in own
        if current is None or (current.rows + f.rows > max_rows and current.files):
            current = Batch(epoch_from=f.epoch_from if is_own else max(committed, f.epoch_from),
                            epoch_to=committed)
            batches.append(current)
        current.files.append(f)
        if is_own:
            current.own.append(f)
        current.epoch_to = max(current.epoch_to, f.epoch_to)
    if batches:
        batches[-1].epoch_to = max(batches[-1].epoch_to, target)
    elif target > committed:
        batches.append(Batch(epoch_from=committed, epoch_to=target))
    return batches


def read_batch(store, batch: Batch, columns: list[str], schema: pa.Schema) -> pa.Table:
    """The batch's change rows: `columns` + `_w` + `_f` (the file's position in the batch)."""
    wanted = pa.schema([schema.field(c) for c in columns] + [pa.field(W, pa.int64())])
    tables = []
    for i, f in enumerate(batch.files):
        t = sst_cache.read(store.path_for_cache(f.key)).select(wanted.names).cast(wanted)
        tables.append(t.append_column(FILE, pa.array([i] * t.num_rows, pa.int32())))
    if not tables:
        return wanted.append(pa.field(FILE, pa.int32())).empty_table()
    return pa.concat_tables(tables)
