"""IOR, mdtest and md-workbench built from ../shared/vendor (by .ci/build-ior), for tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ior_bin() -> Path:
    """The directory holding ior, mdtest and md-workbench: $SLOWDOWN_IOR_BIN, or built once."""
    given = os.environ.get("SLOWDOWN_IOR_BIN")
    if given:
        return Path(given)
    done = subprocess.run(
        ["bash", str(ROOT / ".ci" / "build-ior")], check=True, capture_output=True, text=True
    )
    return Path(done.stdout.strip().splitlines()[-1])
