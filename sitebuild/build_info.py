"""The commit a build comes from: on the print page's cover and in every "report a problem" link."""

from __future__ import annotations

import os
import subprocess

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
