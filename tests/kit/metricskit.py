"""The service's configuration with a metrics listener, and a free local port for it."""

from __future__ import annotations

import socket
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_text(database: Path, host: str, targets: dict[str, Path], metrics: str | None,
                max_servers: int | None = None, **top: str) -> str:
    lines = [f'database = "{database}"', f'host = "{host}"']
    lines += [f'{k} = "{v}"' for k, v in top.items()]
    for name, path in targets.items():
        lines += ["[[target]]", f'name = "{name}"', f'path = "{path}"', 'data_size = "16MiB"',
                  "pool_files = 100", "pool_dirs = 10"]
    if metrics is not None:
        lines += ["[metrics]"] + ([f'listen = "{metrics}"'] if metrics else [])
        lines += [f"max_servers = {max_servers}"] if max_servers is not None else []
    return "\n".join(lines) + "\n"
