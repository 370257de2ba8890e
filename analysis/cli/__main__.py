"""``python -m slowdown.analysis.cli``: the same as the ``slowdown`` command."""

from __future__ import annotations

from slowdown.analysis.cli.main import main

main()
