"""Many fio logs into one series of intervals: the files read in time lockstep.

Files are read in blocks, parsed on a thread pool (numpy releases the GIL while it parses;
a histogram block is summed per interval there too, while it is in that core's cache, and
only the sums are kept) and merged in time lockstep: the file that is furthest behind is
read next, and an interval is complete once every file has passed its end. Memory therefore
stays bounded by a few blocks per file plus the intervals still open, however long the run.
A file must be in time order, as fio writes it (disorder among intervals still open does no
harm); a line that falls into an interval already complete is an error.

Guarantees: every non-blank line of every file reaches the consumer exactly once, each file's blocks
in file order; a bad line stops the merge with ``FioLogError`` naming its file and line,
except a file's last line when the file ends inside it (fio stopped while writing the log):
that line is left out and named to ``warn``, and the lines before it are read. The threads
and files are released however the merge ends.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from slowdown.analysis.fio import FioLogError
from slowdown.analysis.fio.blockparse import BlockError
from slowdown.analysis.fio.intervals import IntervalSeries
from slowdown.analysis.fio.logblock import Block
from slowdown.analysis.fio.sources import CUT, Source
from slowdown.analysis.fio.textblocks import Buffers, RawBlock, TextBlocks
from slowdown.analysis.store.forking import cpus

if TYPE_CHECKING:  # printing intervals needs neither slowdown's histogram nor the store
    from slowdown.analysis.fio.minute_records import MinuteRecords


@dataclass
class _Stream:
    source: Source
    text: TextBlocks
    pending: deque = field(default_factory=deque)  # (RawBlock, Future)
    lines: int = 0  # lines of the blocks handed out so far
    watermark: float = -math.inf
    bytes_done: int = 0


def _cut_last_line(raw: RawBlock, exc: BlockError) -> bool:
    """Whether ``exc`` is about the file's last line and the file ends inside that line
    (no newline): what fio leaves when it is stopped while it writes a log."""
    return raw.unterminated and exc.offset == raw.data.count(b"\n") - 1


def _without_last_line(raw: RawBlock) -> RawBlock:
    end = raw.buffer.rfind(b"\n", raw.start, raw.end - 1) + 1
    return RawBlock(raw.buffer, raw.start, end or raw.start, raw.index)


def _cut_message(stream: _Stream, offset: int) -> str:
    line = stream.lines + offset + 1
    before = f"read up to line {line - 1}" if line > 1 else "no line before it"
    return f"{stream.source.path}:{line}: {CUT}; this line is left out, {before}"


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


def _error(stream: _Stream, raw: RawBlock, exc: BlockError) -> FioLogError:
    line = stream.lines + exc.offset + 1
    message = exc.message
    if raw.unterminated and exc.offset == raw.data.count(b"\n") - 1:
        message += " (the file ends in the middle of this line: truncated?)"
    return FioLogError(stream.source.path, line, message)


def merge(sources: Sequence[Source], consumer: IntervalSeries | MinuteRecords, *,
          workers: int | None = None, memory: int = 256 << 20,
          progress: Callable[[int], None] | None = None,
          warn: Callable[[str], None] = _warn) -> Iterator[list]:
    """Feed every file to ``consumer`` in time lockstep; yields what it completes. A file's
    last line cut short (no newline, and not a whole line) is left out and said to ``warn``
    (by default a Python warning)."""
    workers = workers or min(cpus(), 8)
    # Blocks read ahead per file: with many files the others keep the threads busy.
    depth = 2 if len(sources) < 2 * workers else 1
    # Per file: depth + 1 buffers of text and as many blocks parsed (up to 3 times larger),
    # unless the consumer sums the blocks in the parser threads; there each thread's block
    # and its passes take up to 6 times its text.
    held = len(sources) * (depth + 1) * (1 if consumer.reduces else 4) + 6 * workers
    block_bytes = int(min(max(memory // held, 64 << 10), 4 << 20))
    buffers = Buffers()
    streams = [_Stream(s, TextBlocks(s.path, block_bytes, buffers)) for s in sources]
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fio-parse")
    if isinstance(consumer, IntervalSeries):
        consumer.pool = pool

    def parse(source: Source, raw: RawBlock) -> tuple[Block, Any]:
        if not consumer.reduces:
            return source.log.parse(raw), None
        block = source.log.parse(raw, scratch=True)
        prepared = consumer.prepare(source, block)
        block.counts = None  # the thread's scratch memory, which its next parse reuses
        return block, prepared

    def work(source: Source, raw: RawBlock) -> tuple[Block, Any, int | None]:
        """The parsed block, what ``prepare`` made of it, and the offset of a last line cut
        short that was left out (else None)."""
        try:
            return (*parse(source, raw), None)
        except BlockError as exc:
            if not _cut_last_line(raw, exc):
                raise
            cut = exc.offset
        return (*parse(source, _without_last_line(raw)), cut)

    def refill(stream: _Stream) -> None:
        while len(stream.pending) < depth:
            raw = stream.text.read()
            if raw is None:
                return
            future: Future = pool.submit(work, stream.source, raw)
            stream.pending.append((raw, future))

    try:
        for stream in streams:
            refill(stream)
        active = [s for s in streams if s.pending]
        while active:
            stream = min(active, key=lambda s: s.watermark)
            raw, future = stream.pending.popleft()
            try:
                block, prepared, cut = future.result()
            except BlockError as exc:
                raise _error(stream, raw, exc) from None
            if cut is not None:
                warn(_cut_message(stream, cut))
            refill(stream)
            if len(block):
                try:
                    consumer.add(stream.source, block, prepared)
                except BlockError as exc:
                    raise _error(stream, raw, exc) from None
                last = block.last + stream.source.offset_ms
                stream.watermark = max(stream.watermark, last)
            stream.lines += len(block) if block.rows is None else raw.data.count(b"\n")
            buffers.give(raw.buffer)  # what was parsed from it lives in its own arrays
            if progress is not None:
                progress(stream.text.bytes_read - stream.bytes_done)
                stream.bytes_done = stream.text.bytes_read
            if not stream.pending:
                active.remove(stream)
            low = min((s.watermark for s in active), default=math.inf)
            done = consumer.flush(low)
            if done:
                yield done
        done = consumer.flush(math.inf)
        if done:
            yield done
    finally:
        for stream in streams:
            stream.text.close()
            for _, future in stream.pending:
                future.cancel()
        pool.shutdown(wait=True)


__all__ = ["merge"]
