"""The ``slowdown`` program: ``slowdown motd`` (alone or with ``--config FILE``) goes straight
to the login notice, without click, since a login pays for every module it loads; everything
else, ``slowdown motd --help`` among it, to the click group (``main.py``)."""

from __future__ import annotations

import sys


def _plain_motd(args: list[str]) -> bool:
    rest = args[1:]
    return args[:1] == ["motd"] and (
        not rest or (len(rest) == 2 and rest[0] == "--config")
        or (len(rest) == 1 and rest[0].startswith("--config=")))


def main() -> int:
    if _plain_motd(sys.argv[1:]):
        from slowdown.analysis.cli.motd import main as motd

        return motd(sys.argv[2:])
    from slowdown.analysis.cli.main import main as group

    return group()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
