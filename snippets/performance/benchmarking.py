"""Timing PyTorch code without fooling yourself: what a naive time.time() loop gets wrong (the
first call, warm caches, threads, one number without its spread), torch.utils.benchmark's Timer
and Compare, a check that a difference exceeds the noise, and Triton's do_bench on a GPU."""
# snippet: timeout=120 serial
# Serial: every number it prints is a timing, and a timing needs a quiet machine. None of them
# is asserted; what is asserted is how Timer, Measurement and do_bench behave.

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both

# --8<-- [start:setup]
import inspect
import itertools
import math
import random
import statistics
import time

import torch
from torch.nn import functional as F
from torch.utils.benchmark import Compare, Measurement, TaskSpec, Timer, set_torch_threads

device = "cuda" if torch.cuda.is_available() else "cpu"
THREADS = torch.get_num_threads()           # what torch uses outside Timer
x = torch.randn(256, 1024)                  # 1 MiB of float32: every softmax below reads it


def unfused_softmax(t):
    """The same softmax as five operations, each a pass over the whole tensor."""
    e = (t - t.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)


def duration(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def quartiles(times) -> tuple[float, float, float]:
    """25th, 50th and 75th percentiles, interpolated linearly, as Measurement computes them."""
    q1, q2, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return q1, q2, q3


def summary(times, what: str) -> Measurement:
    """Print min, median, IQR and max of per-call seconds; return them as a Measurement."""
    m = Measurement(number_per_run=1, raw_times=list(times), task_spec=TaskSpec(what, "pass"))
    q1, q2, q3 = quartiles(times)
    assert min(times) <= q1 <= q2 <= q3 <= max(times) and m.iqr >= 0
    assert math.isclose(m.median, q2) and math.isclose(m.iqr, q3 - q1, abs_tol=1e-12)
    print(f"  {what:<24} min {duration(min(times)):>9}  median {duration(q2):>9}  "
          f"IQR {duration(m.iqr):>9}  max {duration(max(times)):>9}  ({len(times)} calls)")
    return m
# --8<-- [end:setup]


# --8<-- [start:naive]
def naive_seconds(fn, calls: int = 20) -> float:
    """What many benchmarks do: a wall clock around a loop, divided by the number of calls."""
    start = time.time()
    for _ in range(calls):
        fn()
    return (time.time() - start) / calls


runs, began = [], time.perf_counter()
while len(runs) < 15 and (len(runs) < 5 or time.perf_counter() - began < 0.5):  # a budget
    runs.append(naive_seconds(lambda: torch.softmax(x, dim=-1)))
print(f"one naive measurement (the first): {duration(runs[0])} per call")
print(f"the same loop {len(runs)} times (µs per call):", " ".join(f"{r * 1e6:.0f}" for r in runs))
summary(runs[1:], f"naive loop, runs 2-{len(runs)}")
print(f"slowest / fastest of the {len(runs)}: {max(runs) / min(runs):.1f}×")

for name in ("time", "perf_counter"):
    clock = time.get_clock_info(name)
    print(f"time.{name}(): {clock.implementation}, monotonic={clock.monotonic}, "
          f"adjustable={clock.adjustable}, resolution {clock.resolution:g} s")
assert time.get_clock_info("perf_counter").monotonic  # never steps back; time.time() may
# --8<-- [end:naive]


# --8<-- [start:first-call]
def per_call(fn, budget: float, before=None, least: int = 15, most: int = 150) -> list[float]:
    """Seconds of each call of fn, timed one by one until budget seconds have passed
    (at least `least` calls); before(), if given, runs untimed ahead of every call."""
    times, began = [], time.perf_counter()
    while len(times) < least or (time.perf_counter() - began < budget and len(times) < most):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


image, weight = torch.randn(4, 8, 32, 32), torch.randn(16, 8, 3, 3)
image48 = torch.randn(4, 8, 48, 48)
square, signal = torch.randn(64, 64), torch.randn(4096)
first_calls = {  # none of these operations has run in this process yet
    "conv2d 4×8×32×32": lambda: F.conv2d(image, weight, padding=1),
    "linalg.svd 64×64": lambda: torch.linalg.svd(square),
    "fft.rfft 4096": lambda: torch.fft.rfft(signal),
    "conv2d, new shape 48×48": lambda: F.conv2d(image48, weight, padding=1),
}
print(f"{'':<24}{'first call':>11}{'later, median':>15}{'ratio':>8}{'mean of 21':>12}")
for name, fn in first_calls.items():
    times = per_call(fn, budget=0, least=21)
    later = statistics.median(times[1:])
    print(f"{name:<24}{duration(times[0]):>11}{duration(later):>15}"
          f"{times[0] / later:>7.0f}×{duration(statistics.mean(times)):>12}")
# --8<-- [end:first-call]


# --8<-- [start:caches]
def last_level_cache() -> int | None:
    """Bytes of the largest cache that Linux lists for CPU 0; None elsewhere."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip()                            # for example "32768K"
        sizes.append(int(text.rstrip("KM")) * {"K": 2**10, "M": 2**20}.get(text[-1], 1))
    return max(sizes, default=None)


ITEM = 2 * 2**20        # bytes summed per call: more than most L2 caches, less than most L3s
llc = last_level_cache()
pool_bytes = min(max(2 * (llc or 64 * 2**20), 64 * 2**20), 512 * 2**20)
pool = torch.ones(pool_bytes // ITEM, ITEM // 4)       # rows of 2 MiB, twice the cache at least
rows = itertools.cycle(pool.unbind(0))                 # a row comes back after the whole pool
same = torch.ones(ITEM // 4)
print(f"last-level cache: {f'{llc / 2**20:.0f} MiB' if llc else 'not listed here'}; "
      f"pool of {pool.shape[0]} inputs of 2 MiB, {pool_bytes / 2**20:.0f} MiB in all")

with set_torch_threads(1):                             # one core's view of the memory
    cache_times = {
        "same input every call": per_call(lambda: same.sum(), budget=0.1),
        "next input of the pool": per_call(lambda: next(rows).sum(), budget=0.1),
        "same input, cache flushed": per_call(lambda: same.sum(), budget=0.15,
                                              before=lambda: pool.fill_(1.0)),
    }
for what, times in cache_times.items():
    summary(times, what)
warm, cold = (statistics.median(cache_times[k]) for k in ("same input every call",
                                                          "same input, cache flushed"))
print(f"flushed / warm, medians: {cold / warm:.1f}×")
assert same.sum().item() == ITEM // 4 == next(rows).sum().item()  # the flush changed no data
# --8<-- [end:caches]


# --8<-- [start:threads]
seen = []
Timer("seen.append(torch.get_num_threads())", globals={"seen": seen}).timeit(3)
assert set(seen) == {1}                                # Timer's default: num_threads=1
seen.clear()
Timer("seen.append(torch.get_num_threads())", globals={"seen": seen},
      num_threads=THREADS).timeit(3)
assert set(seen) == {THREADS} and torch.get_num_threads() == THREADS  # restored afterwards
print(f"torch.get_num_threads() = {THREADS}; inside a Timer: 1 by default, "
      f"{THREADS} with num_threads=torch.get_num_threads()")
# --8<-- [end:threads]


# --8<-- [start:timer]
class Counted:
    """fn, counting its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


softmax = Counted(torch.softmax)
timer = Timer("softmax(x, dim=-1)", globals={"softmax": softmax, "x": x})
blocked = timer.blocked_autorange(min_run_time=0.2)
print("\n".join(repr(blocked).splitlines()[1:]))       # the first line is the object's address
number, blocks = blocked.number_per_run, len(blocked.raw_times)
searched = sum(10**k for k in range(round(math.log10(number)) + 1))  # 1, 10, ... up to number
assert softmax.calls == searched + blocks * number     # the block-size search ran untimed
assert sum(blocked.raw_times) >= 0.2                   # blocks until min_run_time is spent
assert min(blocked.times) <= blocked.median <= max(blocked.times) and blocked.iqr >= 0
print(f"calls: {softmax.calls} = {searched} untimed while choosing the block size "
      f"+ {blocks} blocks × {number}")

adaptive = timer.adaptive_autorange(threshold=0.1, max_run_time=0.5)
print("\n".join(repr(adaptive).splitlines()[1:]))
stopped = "IQR/median under 0.1" if adaptive.meets_confidence(0.1) else "max_run_time reached"
assert ((len(adaptive.raw_times) > 3 and adaptive.meets_confidence(0.1))
        or sum(adaptive.raw_times) > 0.5)               # the two ways it may stop
print(f"adaptive_autorange stopped after {len(adaptive.raw_times)} blocks: {stopped}")
# --8<-- [end:timer]


# --8<-- [start:compare]
torch.testing.assert_close(unfused_softmax(x), torch.softmax(x, dim=-1))  # the same function
KERNELS = {"torch.softmax": "torch.softmax(x, dim=-1)",
           "unfused": "unfused_softmax(x)"}
thread_counts = sorted({1, THREADS})


def one_round() -> list[Measurement]:
    return [Timer(stmt, globals={"x": x, "unfused_softmax": unfused_softmax},
                  label="softmax of 256 rows", sub_label=name,
                  description="256 × 1024 float32", num_threads=n
                  ).blocked_autorange(min_run_time=0.05)
            for n in thread_counts for name, stmt in KERNELS.items()]


results = one_round() + one_round()      # two replicates of each row, measured apart
Compare(results).print()                 # merges the replicates, prints medians
merged = Measurement.merge(results)
assert len(merged) == len(results) // 2 and all(m.number_per_run == 1 for m in merged)
if THREADS == 1:
    print("only one thread here: Timer's default and torch's setting are the same")
# --8<-- [end:compare]


# --8<-- [start:noise]
def interleaved(fns: dict, budget: float, least: int = 20, most: int = 300) -> dict:
    """Seconds of each call of each function, called in rounds (A, C, B, then B, A, C, ...):
    a change in the machine's speed hits all of them alike, and a shuffled order within each
    round keeps one from always running after the same neighbour."""
    times, order, began = {name: [] for name in fns}, list(fns), time.perf_counter()
    shuffle = random.Random(0).shuffle
    while (n := len(times[order[0]])) < least or (
            time.perf_counter() - began < budget and n < most):
        shuffle(order)
        for name in order:
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return times


def bootstrap_ratio(a: list[float], b: list[float], draws: int = 2000) -> tuple[float, float]:
    """A 95% interval for median(b) / median(a): both samples redrawn with replacement."""
    gen = torch.Generator().manual_seed(0)
    ta, tb = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    ma = ta[torch.randint(len(a), (draws, len(a)), generator=gen)].quantile(0.5, dim=1)
    mb = tb[torch.randint(len(b), (draws, len(b)), generator=gen)].quantile(0.5, dim=1)
    low, high = (mb / ma).quantile(torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return low, high


def verdict(a: list[float], b: list[float], what: str) -> str:
    """Is b slower or faster than a, beyond what the spread of the calls explains?"""
    (a1, a2, a3), (b1, b2, b3) = quartiles(a), quartiles(b)
    overlap = a1 <= b3 and b1 <= a3
    low, high = bootstrap_ratio(a, b)
    assert low <= high
    said = ("slower, beyond the noise" if low > 1 else
            "faster, beyond the noise" if high < 1 else "within the noise")
    print(f"{what}: {b2 / a2:.2f}× (95% bootstrap interval {low:.2f} to {high:.2f}; "
          f"IQRs overlap: {'yes' if overlap else 'no'}): {said}")
    return said


with set_torch_threads(1):
    calls = interleaved({"torch.softmax": lambda: torch.softmax(x, dim=-1),
                         "unfused": lambda: unfused_softmax(x),
                         "torch.softmax, again": lambda: torch.softmax(x, dim=-1)},
                        budget=0.5)
for name, times in calls.items():
    summary(times, name)
same_code = verdict(calls["torch.softmax"], calls["torch.softmax, again"],
                    "A/A: torch.softmax, again / torch.softmax")
verdict(calls["torch.softmax"], calls["unfused"], "unfused / torch.softmax")
if same_code != "within the noise":
    print("the A/A pair differs: this machine is too noisy right now for any verdict")
# --8<-- [end:noise]


# --8<-- [start:do-bench]
try:
    import triton
    from triton.testing import do_bench
except ImportError:                   # no triton wheel for this platform
    do_bench = None

if do_bench is None:
    print("triton is not installed here: do_bench not inspected")
else:
    defaults = {k: p.default for k, p in inspect.signature(do_bench).parameters.items()}
    print(f"triton {triton.__version__}: do_bench(fn, warmup={defaults['warmup']}, "
          f"rep={defaults['rep']}, return_mode={defaults['return_mode']!r}), times in ms")

if device == "cuda" and do_bench is not None:
    big = torch.randn(2048, 2048, device=device)    # 16 MiB: fits in an H100's 50 MB L2
    for name, fn in {"torch.softmax": lambda: torch.softmax(big, dim=-1),
                     "unfused": lambda: unfused_softmax(big)}.items():
        q1, q2, q3 = do_bench(fn, quantiles=[0.25, 0.5, 0.75])   # L2 flushed before each call
        mean = do_bench(fn)                                      # the default: a mean
        warm_l2 = Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.2)
        assert q1 <= q2 <= q3 and mean > 0
        print(f"  {name:<14} do_bench median {q2 * 1e3:.1f} µs (IQR {(q3 - q1) * 1e3:.1f} µs), "
              f"mean {mean * 1e3:.1f} µs; Timer, L2 not flushed: {warm_l2.median * 1e6:.1f} µs")
else:
    print("do_bench on a GPU: not run here, no CUDA device")
# --8<-- [end:do-bench]


# --8<-- [start:figure]
LABELS = {
    "en": {"names": ["same input\nevery call", "next input\nof the pool",
                     "same input,\ncache flushed"],
           "y": "µs per call (one thread)",
           "title": "Summing 2 MiB of float32, each call timed alone"},
    "zh": {"names": ["每次都用\n同一个输入", "轮流使用\n池中的输入", "同一个输入，\n先清空缓存"],
           "y": "每次调用的时间（µs，单线程）",
           "title": "对 2 MiB 的 float32 求和，每次调用单独计时"},
}


def draw(fig, text):
    ax = fig.add_subplot()
    data = [[t * 1e6 for t in times] for times in cache_times.values()]
    ax.boxplot(data, whis=(0, 100), widths=0.5, medianprops={"color": "C3"})
    jitter = torch.Generator().manual_seed(0)
    for i, values in enumerate(data, start=1):
        dx = (torch.rand(len(values), generator=jitter) - 0.5) * 0.3
        ax.scatter((i + dx).tolist(), values, s=6, alpha=0.4, color="C0")
        middle = statistics.median(values)
        ax.annotate(f"{middle:.0f} µs", (i + 0.28, middle), va="center", fontsize="small")
    ax.set_xticks([1, 2, 3], text["names"])
    ax.set(ylabel=text["y"], title=text["title"], yscale="log")
    ax.grid(True, axis="y", which="both", alpha=0.3)


draw_both("cache_timings", LABELS, draw, figsize=(6.4, 4))
# --8<-- [end:figure]
