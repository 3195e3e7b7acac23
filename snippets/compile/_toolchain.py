"""Why Inductor could not build code on this machine: torch_compile.py, export.py and
performance/attention.py share it.

Imported by those snippets, not run (its name starts with "_"). Inductor needs a C++
compiler on a CPU; on a GPU, Triton builds a launcher with a C compiler and Python's
headers, and AOTInductor also needs the CUDA toolkit's headers (CUDA_HOME).
"""

import os
import subprocess
import sys
import sysconfig

import torch._inductor.exc


def missing_toolchain(error: BaseException) -> str | None:
    """Why Inductor could not build code on this machine, or None for other errors."""
    exc = torch._inductor.exc
    kinds = tuple(getattr(exc, name) for name in
                  ("InvalidCxxCompiler", "CppCompileError", "TritonMissing", "GPUTooOldForTriton")
                  if hasattr(exc, name))
    for _ in range(10):                       # the error, its cause, and theirs
        if error is None:
            return None
        if isinstance(error, subprocess.CalledProcessError):  # Triton building its launcher
            scheme = sysconfig.get_default_scheme()           # the headers Triton passes
            scheme = "posix_prefix" if scheme == "posix_local" else scheme
            headers = sysconfig.get_paths(scheme=scheme)["include"]
            found = os.path.isfile(os.path.join(headers, "Python.h"))
            return (f"{type(error).__name__}: the C compiler exited with status "
                    f"{error.returncode}; Python.h is {'' if found else 'not '}in {headers}")
        if (isinstance(error, kinds) or "Failed to find C compiler" in str(error)
                or (isinstance(error, OSError) and "CUDA_HOME" in str(error))):
            return f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
        error = error.__cause__ or error.__context__
    return None


def exit_if_missing(error: BaseException, failed: str, needs: str) -> None:
    """Where a toolchain is missing, say what could not be built, why and what it needs, then
    exit 0: the rest of the page does not depend on it. Other errors return, to be re-raised."""
    why = missing_toolchain(error)
    if why is not None:
        print(f"{failed} on this machine: {why}")
        print(needs)
        sys.exit(0)
