"""The variables that the fork server's imports read, and the forked runs that change them.

A fresh ``python snippet.py`` imports torch only when the snippet says so, and ``torch._dynamo``
only when it first needs it. So a snippet may set a variable that these read as they are
imported: torch_compile.py sets ``TORCHINDUCTOR_COMPILE_THREADS`` before ``import torch``,
triton_kernels.py sets ``TRITON_INTERPRET`` before ``import triton``. Forked from a server
that imported them already (sitebuild/forkserver.py), it would run with the server's values.

So the server records what its imports read through ``os.environ`` (``recording``), and every
forked process, a snippet or a rank that it spawns (sitebuild/forked_spawn.py), ``watch``es its
own writes. Setting or unsetting a recorded variable, or one named like those that C code reads
through getenv (Triton's knobs, ATen, oneDNN, MKL, OpenMP, CUDA), ends that process at once and
leaves a note in the run's folder: the run is then done again as a fresh process. Standard
library only.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path

READ_BY_C = re.compile(r"TORCH|TRITON|INDUCTOR|DYNAMO|^(ATEN|ONEDNN|DNNL|MKL|OMP|KMP|CUDA|NCCL)_")
# Named like those, but no import reads them: Inductor sets this one in each process that loads a
# CPU kernel, for the kernel's module to read back as it loads (torch/_inductor/codecache.py,
# CppPythonBindingsCodeCache). Watched, it stopped every lab that compiles.
SET_FOR_ITSELF = {"_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"}
NOTE = "changed-at-import"  # the file a stopped run leaves in its folder
_read: set[str] = set()
_note: Path | None = None


class _Recording(os._Environ):
    def __getitem__(self, key):
        _read.add(key)
        return super().__getitem__(key)


class _Watched(os._Environ):
    def __setitem__(self, key, value):
        if self.get(key) != value:
            _check(key)
        super().__setitem__(key, value)

    def __delitem__(self, key):
        if key in self:
            _check(key)
        super().__delitem__(key)


def _check(key: str):
    if _note is not None and (key in _read or READ_BY_C.search(key)) and key not in SET_FOR_ITSELF:
        _note.touch()
        os._exit(70)


@contextmanager
def _as(environ_class):
    """``os.environ`` behaves as ``environ_class`` meanwhile, then as before."""
    before = os.environ.__class__
    os.environ.__class__ = environ_class
    try:
        yield
    finally:
        os.environ.__class__ = before


def recording():
    """Every variable read through ``os.environ`` meanwhile is remembered."""
    return _as(_Recording)


def watch(folder: Path):
    """From now on, a write to a variable that the imports read stops this process (see above)."""
    global _note
    _note = folder / NOTE
    os.environ.__class__ = _Watched


def unwatched():
    """Set a forked process's environment as its caller's: its own writes are watched after."""
    return _as(os._Environ)


def changed(folder: Path) -> bool:
    """Whether the run in ``folder`` was stopped for setting what the imports read."""
    return (folder / NOTE).exists()
