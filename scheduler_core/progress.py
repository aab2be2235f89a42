"""Progress of the long management commands (importcrontab, prunehistory, loaddemo,
deadletter, backfill): a rich progress bar on a terminal, nothing otherwise, so logs and pipes
get only the command's summary line (docs/architecture.md, "Commands")."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress(stdout, description: str, total: int | None = None
             ) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``, which moves a progress bar of ``total`` steps (None: a count
    with no end) by ``n``. ``stdout`` is the command's (Django's OutputWrapper or a
    file): on a terminal the bar is drawn there and removed at the end; anywhere else
    (a pipe, a file, a test's StringIO) ``advance`` does nothing."""
    stream = getattr(stdout, "_out", stdout)
    if not (hasattr(stream, "isatty") and stream.isatty()):
        yield lambda n=1: None
        return
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn()]
    with Progress(*columns, console=Console(file=stream), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)
