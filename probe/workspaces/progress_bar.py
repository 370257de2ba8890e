"""Progress bars with an ETA for prepare's long writes, on a terminal only.

`progress_bar` yields an object with rich's `add_task` / `update`: a rich Progress when bars
are enabled and the console is a terminal (bytes with transfer speed for data.bin, a count
for the pool's objects), otherwise a stand-in that shows nothing. Nothing is ever written to
a console that is not a terminal, so logs and pipes stay clean; rich is imported only when a
bar is shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


class _NoProgress:
    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


@contextmanager
def progress_bar(kind: str, enabled: bool, console: Console | None) -> Iterator[Any]:
    """Bars for `kind` "bytes" or "objects" on `console` (stderr by default)."""
    if not enabled:
        yield _NoProgress()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield _NoProgress()
        return
    if kind == "bytes":
        columns: tuple = (TextColumn("{task.description}"), BarColumn(),
                          DownloadColumn(binary_units=True), TransferSpeedColumn(),
                          TextColumn("ETA"), TimeRemainingColumn())
    else:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console) as progress:
        yield progress
