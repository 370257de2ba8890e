"""`slowdown-probe prepare` and `slowdown-probe cleanup`: the workspace of each target.

Both act on every configured target, or on those named with `--target` (repeatable). A
failure on one target is reported on stderr as one line and the others still run; the exit
status is then 1. A shared data file that another node is still writing is such a failure
for prepare (after this node's workspace is ready): `--wait` gives that node time.
`cleanup --shared` also removes the shared data file, once no workspace reads it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from slowdown.analysis.units import format_size, parse_duration
from slowdown.probe.layout.errors import WorkspaceError
from slowdown.probe.layout.manifest import ManifestError
from slowdown.probe.runtime.start_state import StartState
from slowdown.probe.workspaces.cleanup import cleanup, describe
from slowdown.probe.workspaces.prepare import prepare
from slowdown.probe.workspaces.shared_cleanup import cleanup_shared
from slowdown.probe.workspaces.shared_data import inspect_shared, shared_paths


def _config(ctx: click.Context) -> Any:
    """The loaded configuration: `ctx.obj["config"]`, or the group's context object with a
    `config()` loader."""
    obj = ctx.obj
    if isinstance(obj, Mapping) and "config" in obj:
        return obj["config"]
    loader = getattr(obj, "config", None)
    if callable(loader):
        return loader()
    if loader is not None:
        return loader
    raise click.UsageError("no configuration loaded")


def _targets(config: Any, names: tuple[str, ...]) -> list[Any]:
    if not names:
        return list(config.targets)
    known = {t.name: t for t in config.targets}
    missing = [n for n in names if n not in known]
    if missing:
        raise click.BadParameter(
            f"no target named {', '.join(missing)}; configured: "
            f"{', '.join(known) or 'none'}", param_hint="--target")
    return [known[n] for n in dict.fromkeys(names)]


def _fail(command: str, target: str, exc: Exception) -> None:
    click.echo(f"slowdown-probe {command}: target {target}: {exc}", err=True)


target_option = click.option(
    "--target", "target_names", multiple=True, metavar="NAME",
    help="Only this target (repeatable); default: every configured target.")


@click.command("prepare")
@target_option
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Progress bar with ETA on stderr (only on a terminal).")
@click.option("--md-workbench-status", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="md-workbench's --run-info-file, when adopting a pool it "
              "precreated and the file is not md-workbench.status in the workspace.")
@click.option("--wait", "wait", default="0s", show_default=True, metavar="DURATION",
              help="How long to wait for another node that is writing a target's shared "
              "data file (e.g. 1h); without, this node's workspace is made and prepare exits 1.")
@click.pass_context
def prepare_command(ctx: click.Context, target_names: tuple[str, ...], progress: bool,
                    md_workbench_status: Path | None, wait: str) -> None:
    """Create each target's workspace: the md/ pool, the MANIFEST, and the node's data file
    (write.bin beside the target's shared data file, which the first node creates; or
    data.bin of its own with data_file = "own").

    Resumable (run it again after an interruption) and idempotent (a finished workspace is
    left as it is). A pool precreated by md-workbench in <workspace>/md is adopted.
    """
    try:
        wait_seconds = parse_duration(wait)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--wait") from None
    config = _config(ctx)
    with StartState(config) as told:  # readers say "preparing" meanwhile
        failed = _prepare_each(config, _targets(config, target_names), told, progress,
                               md_workbench_status, wait_seconds)
    if failed:
        ctx.exit(1)


def _prepare_each(config: Any, targets: list[Any], told: StartState, progress: bool,
                  md_workbench_status: Path | None, wait_seconds: float) -> bool:
    """Prepare each target, saying what was done; True when one failed."""
    failed = False
    for target in targets:
        told.tell("preparing", target.name)
        try:
            report = prepare(target, config.host, progress=progress,
                             md_workbench_status=md_workbench_status, wait=wait_seconds)
        except (WorkspaceError, ManifestError, OSError) as exc:
            _fail("prepare", target.name, exc)
            failed = True
            continue
        line = f"{target.name}: {report.action} {report.workspace}"
        done = []
        if report.data_written:
            name = "write.bin" if report.shared is not None else "data.bin"
            done.append(f"{format_size(report.data_written)} of {name} written")
        if report.objects_created:
            done.append(f"{report.objects_created} objects created")
        if report.action == "adopted":
            done.append(f"md-workbench pool at step {report.position}")
        click.echo(line + (f" ({'; '.join(done)})" if done else ""))
        for note in report.notes:
            click.echo(f"{target.name}: {note}")
        if report.shared is not None and report.shared.busy:
            _fail("prepare", target.name, WorkspaceError(report.shared.describe()))
            failed = True
        elif report.shared is not None:
            click.echo(f"{target.name}: {report.shared.describe()}")
    return failed


@click.command("cleanup")
@target_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask before removing.")
@click.option("--shared", is_flag=True,
              help="Then also remove the target's shared data file, once no workspace of any "
              "node reads it (run it on the last node).")
@click.pass_context
def cleanup_command(ctx: click.Context, target_names: tuple[str, ...], yes: bool,
                    shared: bool) -> None:
    """Remove what prepare created (as its MANIFEST lists), and nothing else.

    A file slowdown did not create is left in place, with the directories that hold it, and
    named; run cleanup again once it is gone. The shared data file that the nodes read is
    left for the others unless --shared is given.
    """
    config = _config(ctx)
    failed = False
    for target in _targets(config, target_names):
        try:
            manifest = describe(target, config.host)
            if manifest is None:
                click.echo(f"{target.name}: no workspace at "
                           f"{Path(target.path) / '.slowdown' / config.host}")
                if shared and not _cleanup_shared(target, config.host, yes):
                    failed = True
                continue
            ws = Path(target.path) / ".slowdown" / config.host
            if not yes:
                if not sys.stdin.isatty():
                    raise WorkspaceError("not removing without --yes (no terminal to ask on)")
                pool = manifest.pool
                question = (f"Remove {ws} ({manifest.data_name} "
                            f"{format_size(manifest.data_size)}, "
                            f"{pool.dirs * pool.files_per_dir} objects in md/)?")
                if not click.confirm(question, default=False):
                    click.echo(f"{target.name}: kept {ws}")
                    continue
            report = cleanup(target, config.host)
        except (WorkspaceError, ManifestError, OSError) as exc:
            _fail("cleanup", target.name, exc)
            failed = True
            continue
        summary = (f"{target.name}: removed {report.removed_files} files and "
                   f"{report.removed_dirs} directories of {report.workspace}")
        click.echo(summary)
        if manifest.data_file == "shared" and not shared:
            click.echo(f"{target.name}: the shared data file stays for the other nodes; "
                       "cleanup --shared removes it once no workspace reads it")
        if report.strays:
            shown = ", ".join(report.strays[:10])
            more = f" and {len(report.strays) - 10} more" if len(report.strays) > 10 else ""
            click.echo(f"{target.name}: left in place (not created by slowdown): {shown}{more};"
                       " the MANIFEST stays until they are gone", err=True)
            failed = True
        elif shared and not _cleanup_shared(target, config.host, yes):
            failed = True
    if failed:
        ctx.exit(1)


def _cleanup_shared(target: Any, host: str, yes: bool) -> bool:
    """The shared data file of one target, after this node's workspace; False on failure."""
    try:
        _, directory = shared_paths(target)
        manifest = inspect_shared(directory)
        if manifest is None:
            click.echo(f"{target.name}: no shared data file at {directory}")
            return True
        if not yes:
            if not sys.stdin.isatty():
                raise WorkspaceError("not removing without --yes (no terminal to ask on)")
            question = (f"Remove the shared data file {directory}/data.bin "
                        f"({format_size(manifest.data_size)}, created by host {manifest.host})?")
            if not click.confirm(question, default=False):
                click.echo(f"{target.name}: kept {directory}")
                return True
        report = cleanup_shared(target, host)
    except (WorkspaceError, ManifestError, OSError) as exc:
        _fail("cleanup", target.name, exc)
        return False
    click.echo(f"{target.name}: removed {report.removed_files} files and "
               f"{report.removed_dirs} directories of {report.directory}")
    if report.strays:
        click.echo(f"{target.name}: left in place (not created by slowdown): "
                   f"{', '.join(report.strays[:10])}; the MANIFEST stays until they are gone",
                   err=True)
        return False
    return True
