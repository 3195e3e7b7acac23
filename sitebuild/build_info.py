"""The commit a build comes from and when it was built: on the print page's cover and in every
"report a problem" link."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timezone

from sitebuild.snippets import ROOT


def commit() -> tuple[str, bool]:
    """The commit, and whether the work tree differs from it (``GITHUB_SHA`` in CI)."""
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"], False
    git = ["git", "-C", str(ROOT)]
    try:
        sha = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=30)
        dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True, timeout=30)
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return "unknown (not a git checkout)", False
    return sha.stdout.strip(), bool(dirty.stdout.strip())


_built: list[datetime] = []


def built() -> datetime:
    """When this build happened, read once per build (``forget`` starts the next one), so that
    every page of it carries the same date, also when the build crosses midnight. Where
    ``SOURCE_DATE_EPOCH`` is set (the reproducible-builds convention), that time, in UTC."""
    if not _built:
        epoch = os.environ.get("SOURCE_DATE_EPOCH")
        _built.append(datetime.fromtimestamp(int(epoch), timezone.utc) if epoch else datetime.now(timezone.utc))
    return _built[0]


def forget():
    """A new build (`mkdocs serve` rebuilds): its date is read again."""
    _built.clear()
