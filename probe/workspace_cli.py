"""`slowdown-probe prepare` and `slowdown-probe cleanup`: the workspace of each target.

Both act on every configured target, or on those named with `--target` (repeatable). A
failure on one target is reported on stderr as one line and the others still run; the exit
status is then 1.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from slowdown.analysis.units import format_size
from slowdown.probe.cleanup import cleanup, describe
from slowdown.probe.manifest import ManifestError
from slowdown.probe.workspace import prepare
from slowdown.probe.workspace_errors import WorkspaceError


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
@click.pass_context
def prepare_command(ctx: click.Context, target_names: tuple[str, ...], progress: bool,
                    md_workbench_status: Path | None) -> None:
    """Create each target's workspace: data.bin, the md/ pool and the MANIFEST.

    Resumable (run it again after an interruption) and idempotent (a finished workspace is
    left as it is). A pool precreated by md-workbench in <workspace>/md is adopted.
    """
    config = _config(ctx)
    failed = False
    for target in _targets(config, target_names):
        try:
            report = prepare(target, config.host, progress=progress,
                             md_workbench_status=md_workbench_status)
        except (WorkspaceError, ManifestError, OSError) as exc:
            _fail("prepare", target.name, exc)
            failed = True
            continue
        line = f"{target.name}: {report.action} {report.workspace}"
        done = []
        if report.data_written:
            done.append(f"{format_size(report.data_written)} of data.bin written")
        if report.objects_created:
            done.append(f"{report.objects_created} objects created")
        if report.action == "adopted":
            done.append(f"md-workbench pool at step {report.position}")
        click.echo(line + (f" ({'; '.join(done)})" if done else ""))
        for note in report.notes:
            click.echo(f"{target.name}: {note}")
    if failed:
        ctx.exit(1)


@click.command("cleanup")
@target_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask before removing.")
@click.pass_context
def cleanup_command(ctx: click.Context, target_names: tuple[str, ...], yes: bool) -> None:
    """Remove what prepare created (as its MANIFEST lists), and nothing else.

    A file slowdown did not create is left in place, with the directories that hold it, and
    named; run cleanup again once it is gone.
    """
    config = _config(ctx)
    failed = False
    for target in _targets(config, target_names):
        try:
            manifest = describe(target, config.host)
            if manifest is None:
                click.echo(f"{target.name}: no workspace at "
                           f"{Path(target.path) / '.slowdown' / config.host}")
                continue
            ws = Path(target.path) / ".slowdown" / config.host
            if not yes:
                if not sys.stdin.isatty():
                    raise WorkspaceError("not removing without --yes (no terminal to ask on)")
                pool = manifest.pool
                question = (f"Remove {ws} (data.bin {format_size(manifest.data_size)}, "
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
        if report.strays:
            shown = ", ".join(report.strays[:10])
            more = f" and {len(report.strays) - 10} more" if len(report.strays) > 10 else ""
            click.echo(f"{target.name}: left in place (not created by slowdown): {shown}{more};"
                       " the MANIFEST stays until they are gone", err=True)
            failed = True
    if failed:
        ctx.exit(1)
