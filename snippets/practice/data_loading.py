# snippet: serial
"""Feeding the GPU: a slow Dataset, DataLoader workers, pinned memory, prefetching.

Everything that starts workers runs under `if __name__ == "__main__":`: on macOS and
Windows, DataLoader workers are spawned and import this file again.
"""

import multiprocessing
import os
import time
import warnings

import torch
from torch.utils.data import DataLoader, Dataset

device = "cuda" if torch.cuda.is_available() else "cpu"


# --8<-- [start:dataset]
class SlowDataset(Dataset):
    """Each item costs `delay` seconds, like reading and decoding one image."""

    def __init__(self, n: int, delay: float):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay)                # I/O-bound work: sleeping, not computing
        return torch.full((3, 8, 8), float(i)), i
# --8<-- [end:dataset]


# --8<-- [start:starve]
N, DELAY, STEP = 32, 0.015, 0.004          # 15 ms per item, 4 ms per training step


def epoch(num_workers: int) -> tuple[list[int], float, float]:
    """One pass over the data: the indices seen, wall time, and time spent waiting."""
    loader = DataLoader(SlowDataset(N, DELAY), batch_size=4, num_workers=num_workers)
    seen, waited = [], 0.0
    start = time.perf_counter()
    batches = iter(loader)
    while True:
        ask = time.perf_counter()
        try:
            images, index = next(batches)
        except StopIteration:
            break
        waited += time.perf_counter() - ask   # the consumer had nothing to do
        seen += index.tolist()
        time.sleep(STEP)                      # stands for the GPU's forward/backward
    return seen, time.perf_counter() - start, waited


def compare_workers():
    print(f"{'workers':>7} {'seconds':>8} {'items/s':>8} {'waiting':>8}")
    results, advice = {}, set()
    for workers in (0, 1, 2, 4):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            seen, seconds, waited = epoch(workers)
        advice |= {str(w.message).split(".")[1].strip() for w in caught
                   if "suggested max number of worker" in str(w.message)}
        results[workers] = seconds
        print(f"{workers:>7} {seconds:>8.3f} {N / seconds:>8.0f} {waited / seconds:>8.0%}")
        assert seen == list(range(N))         # every item once, in order
        # A lower bound, true under any load: the sleeps of one worker add up.
        busiest = N // max(workers, 1)        # workers get whole batches in turn
        assert seconds >= busiest * DELAY
    print(f"speed-up of 4 workers over 0: {results[0] / results[4]:.1f}x")
    print("DataLoader warned:", "; ".join(sorted(advice)) or "nothing")
# --8<-- [end:starve]


# --8<-- [start:options]
def pinned_batches():
    loader = DataLoader(SlowDataset(8, 0.0), batch_size=4, num_workers=2,
                        pin_memory=True, prefetch_factor=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for images, _ in loader:
            pinned = images.is_pinned()
            batch = images.to(device, non_blocking=True)  # async only from pinned memory
    said = [str(w.message) for w in caught if "pin_memory" in str(w.message)]
    print("batch pinned:", pinned, "| warnings:", said or "none")
    if torch.cuda.is_available():
        assert pinned and said == []
    elif not torch.accelerator.is_available():  # nothing to pin for
        assert not pinned and len(said) == 1
    assert batch.device.type == device
# --8<-- [end:options]


# --8<-- [start:persistent]
class PidDataset(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return os.getpid()                    # which process produced this item


def worker_processes():
    for persistent in (False, True):
        loader = DataLoader(PidDataset(), batch_size=1, num_workers=2,
                            persistent_workers=persistent)
        pids = [{int(p) for p in loader} for _ in range(2)]    # two epochs
        print(f"persistent_workers={persistent}: epoch 1 pids {sorted(pids[0])},"
              f" epoch 2 pids {sorted(pids[1])}")
        assert len(pids[0]) == 2 and os.getpid() not in pids[0]
        if persistent:
            assert pids[0] == pids[1]         # the same two processes, kept alive
        del loader                            # persistent workers end with it
# --8<-- [end:persistent]


# --8<-- [start:errors]
def options_without_workers():
    for kwargs in ({"prefetch_factor": 2}, {"persistent_workers": True}):
        try:
            DataLoader(SlowDataset(4, 0.0), num_workers=0, **kwargs)
        except ValueError as error:
            print(f"num_workers=0 with {kwargs}: ValueError: {error}")
        else:
            raise AssertionError("these options need worker processes")
# --8<-- [end:errors]


# --8<-- [start:main]
if __name__ == "__main__":
    print("device:", device, "| CPU cores:", os.cpu_count())
    compare_workers()
    pinned_batches()
    worker_processes()
    options_without_workers()
    for _ in range(50):                       # workers exit shortly after shutdown
        if not multiprocessing.active_children():
            break
        time.sleep(0.1)
    print("worker processes left:", len(multiprocessing.active_children()))
    assert multiprocessing.active_children() == []
# --8<-- [end:main]
