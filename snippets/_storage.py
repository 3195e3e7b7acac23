"""The storages that operators create, alive until freed: the memory and attention pages' tracker.

Imported by snippets, not run (its name starts with ``_``).
"""

# --8<-- [start:live]
import weakref
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class LiveStorages(TorchDispatchMode):
    """Sees every ATen operator that runs below autograd inside it: counts them by name, in
    the order first seen, and keeps the bytes of each new storage they return until that
    storage is freed, with the peak and the largest one."""

    def __init__(self):
        super().__init__()
        self.ops, self.live = Counter(), {}
        self.held = self.peak = self.largest = 0  # bytes alive now, at most, in one storage

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops[func.overloadpacket.__name__] += 1
        inputs = {a.untyped_storage().data_ptr() for a in tree_leaves((args, kwargs))
                  if isinstance(a, torch.Tensor)}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            ptr, n = storage.data_ptr(), storage.nbytes()
            if n == 0 or ptr in inputs or ptr in self.live:
                continue                      # a view, an in-place result, or empty
            self.live[ptr] = n
            self.held += n
            self.peak, self.largest = max(self.peak, self.held), max(self.largest, n)
            weakref.finalize(storage, self._freed, ptr)  # runs when the storage dies
        return out

    def _freed(self, ptr):
        self.held -= self.live.pop(ptr, 0)
# --8<-- [end:live]
