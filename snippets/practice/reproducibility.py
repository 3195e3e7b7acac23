# snippet: timeout=120 cpu-independent
# The CPU profiles skip this file: each check compares two runs on the same machine, or adds
# fixed float32 numbers whose IEEE results are the same on every CPU; the few sums that
# depend on the kernels (torch.sum's) are printed, never asserted.
"""Reproducibility: seeds, deterministic algorithms, the order of float sums, DataLoader
workers, and two training runs whose losses match bit for bit.

The functions that DataLoader workers call are defined at module level; everything that runs
is under `if __name__ == "__main__":`, because on macOS and Windows workers are spawned and
import this file again.
"""

import math
import random
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, get_worker_info

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both

device = "cuda" if torch.cuda.is_available() else "cpu"


# --8<-- [start:seed]
def seed_everything(seed: int) -> None:
    """Seed every global random number generator that a training script draws from."""
    random.seed(seed)        # Python's random module
    np.random.seed(seed)     # NumPy's legacy global RNG (np.random.rand, np.random.shuffle)
    torch.manual_seed(seed)  # torch's CPU generator and, through torch.cuda.manual_seed_all,
                             # the generator of every CUDA device
# --8<-- [end:seed]


# --8<-- [start:flags]
def make_deterministic() -> None:
    """Ask for deterministic kernels: an operation without one raises instead of running."""
    torch.use_deterministic_algorithms(True)   # add warn_only=True to warn, not raise
    torch.backends.cudnn.benchmark = False     # no autotuning: the same algorithm every run
    torch.backends.cudnn.deterministic = True  # and only deterministic cuDNN algorithms
# --8<-- [end:flags]


# --8<-- [start:workers]
def seed_worker(worker_id: int) -> None:
    """worker_init_fn: runs in each worker process before it loads anything.

    The worker has already seeded torch and `random` with base_seed + worker_id, and NumPy's
    global generator with a state mixed from both numbers. Re-seeding those here would only
    replace that; seed what torch does not know about, such as a Generator of the dataset."""
    dataset = get_worker_info().dataset       # this worker's own copy of the dataset
    if hasattr(dataset, "rng"):               # a NumPy Generator that the dataset keeps
        dataset.rng = np.random.default_rng(torch.initial_seed())  # all 64 bits of the seed


class WhoLoadsWhat(Dataset):
    """Item i says which worker loaded it, that worker's torch seed, and one draw from each
    generator: torch's, random's, NumPy's global one and the dataset's own."""

    def __init__(self):
        self.rng = np.random.default_rng(0)  # copied into every worker as it is, unless reseeded

    def __len__(self):
        return 8

    def __getitem__(self, i):
        worker = get_worker_info()
        return (i, worker.id, torch.initial_seed(), torch.rand(()).item(), random.random(),
                np.random.rand(), self.rng.random())


def loader_for(dataset: Dataset, seed: int, batch_size: int, collate_fn=None) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=2,
                      worker_init_fn=seed_worker, collate_fn=collate_fn,
                      generator=torch.Generator().manual_seed(seed))  # its own RNG
# --8<-- [end:workers]


# --8<-- [start:model]
class NoisyPoints(Dataset):
    """64 fixed points of a linear function; each item gets fresh noise (an augmentation)."""

    def __init__(self):
        g = torch.Generator().manual_seed(1234)         # the data itself is fixed
        self.x = torch.randn(64, 8, generator=g)
        self.y = self.x @ torch.randn(8, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] + 0.1 * torch.randn(8), self.y[i]  # the worker's torch RNG


def train(seed: int, reseed: bool = True, epochs: int = 2) -> torch.Tensor:
    """Train a small MLP with dropout on shuffled batches; return the loss of every step."""
    make_deterministic()                               # process-wide switches
    if reseed:
        seed_everything(seed)                          # model init and dropout masks
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2),
                          nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = loader_for(NoisyPoints(), seed, batch_size=16)  # shuffle and worker seeds
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
    return torch.stack(losses).cpu()
# --8<-- [end:model]


def f32(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float32)


# --8<-- [start:trees]
def tree_sum(values: list[float], stride: bool) -> list[list[torch.Tensor]]:
    """Add the values in rounds of float32 additions, as a parallel reduction does.

    Each round halves the list: neighbours (0+1, 2+3, ...) or, with `stride`, the first
    half plus the second half (0+4, 1+5, ...). Returns every round, the result last."""
    rounds = [[f32(v) for v in values]]
    while len(rounds[-1]) > 1:
        r, half = rounds[-1], len(rounds[-1]) // 2
        rounds.append([r[i] + r[i + half] for i in range(half)] if stride
                      else [r[2 * i] + r[2 * i + 1] for i in range(half)])
    return rounds
# --8<-- [end:trees]


def children(level: int, j: int, n: int, stride: bool) -> tuple[int, int]:
    """The two entries of round `level - 1` that entry j of round `level` adds."""
    return (j, j + n // 2 ** level) if stride else (2 * j, 2 * j + 1)


def draw_trees(values, trees, text):
    def show(v: float) -> str:
        return f"{v:g}".replace("e+0", "e")  # 1e+08 -> 1e8

    def draw(fig, lang):
        axes = fig.subplots(1, 2)
        for ax, (stride, rounds) in zip(axes, trees.items()):
            xs = [list(range(len(values)))]
            for level in range(1, len(rounds)):
                xs.append([sum(xs[-1][c] for c in children(level, j, len(values), stride)) / 2
                           for j in range(len(rounds[level]))])
            for level, r in enumerate(rounds):
                for j, node in enumerate(r):
                    rounded = False
                    if level:
                        a, b = children(level, j, len(values), stride)
                        for c in (a, b):
                            ax.plot([xs[level - 1][c], xs[level][j]], [level - 1, level],
                                    color="0.6", linewidth=1, zorder=1)
                        exact = rounds[level - 1][a].item() + rounds[level - 1][b].item()
                        rounded = node.item() != exact
                    ax.text(xs[level][j], level, show(node.item()), ha="center", va="center",
                            fontsize="small", zorder=2,
                            bbox={"boxstyle": "round", "facecolor": "#f4cccc" if rounded
                                  else "white", "edgecolor": "C3" if rounded else "0.5"})
            ax.set_title(lang["stride" if stride else "neighbours"].format(rounds[-1][0].item()),
                         fontsize="medium")
            ax.set(xlim=(-0.7, len(values) - 0.3), ylim=(-0.5, len(rounds) - 0.5))
            ax.axis("off")
        fig.text(0.5, -0.02, lang["note"], ha="center", fontsize="small")

    draw_both("sum_order", text, draw, figsize=(9.0, 3.2))


if __name__ == "__main__":
    # --8<-- [start:setup]
    print("device:", device, "| torch:", torch.__version__)
    # --8<-- [end:setup]

    # --8<-- [start:seed_check]
    draws = []
    for _ in range(2):
        seed_everything(0)
        draws.append((random.random(), np.random.rand(), torch.rand(()).item()))
    print("after seed_everything(0): random %.6f, np.random %.6f, torch %.6f" % draws[0])
    assert draws[0] == draws[1]                       # same seed, same numbers
    assert torch.initial_seed() == 0
    if torch.cuda.is_available():
        assert torch.cuda.initial_seed() == 0         # manual_seed reached the GPU too
    modern = np.random.default_rng(0).random()        # PCG64, seeded only by its argument
    print(f"np.random.default_rng(0).random() = {modern:.6f}: another generator, "
          "np.random.seed does not reach it")
    assert modern != draws[0][1]                      # the legacy MT19937's first number
    # --8<-- [end:seed_check]

    # --8<-- [start:flags_check]
    print("\ndefaults: cudnn.benchmark", torch.backends.cudnn.benchmark,
          "| cudnn.deterministic", torch.backends.cudnn.deterministic,
          "| deterministic algorithms", torch.are_deterministic_algorithms_enabled())
    assert not torch.are_deterministic_algorithms_enabled()
    make_deterministic()
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    import torch.utils.deterministic                  # the fill_uninitialized_memory switch
    assert torch.utils.deterministic.fill_uninitialized_memory  # on by default
    floats, ints = torch.empty(3), torch.empty(3, dtype=torch.int32)
    print("torch.empty under the flag:", floats.tolist(), ints.tolist())
    assert floats.isnan().all() and (ints == torch.iinfo(torch.int32).max).all()

    target, values = torch.zeros(4), torch.tensor([5.0, 7.0])
    for index in (torch.tensor([0, 1]), torch.tensor([1, 1])):  # distinct, then repeated
        try:
            target.put_(index, values)
        except RuntimeError as error:
            assert "does not have a deterministic implementation" in str(error)
        else:
            raise AssertionError("put_ should refuse to run under the flag")
    print("put_ with distinct and with repeated indices: RuntimeError both times "
          "(no deterministic version)")
    torch.use_deterministic_algorithms(True, warn_only=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target.put_(index, values)
    print("with warn_only=True:", caught[0].category.__name__, "and it ran:", target.tolist())
    assert caught[0].category is UserWarning and target[1].item() in (5.0, 7.0)
    torch.use_deterministic_algorithms(True)          # back to raising
    # --8<-- [end:flags_check]

    # --8<-- [start:gpu_check]
    if torch.cuda.is_available():
        try:
            torch.histc(torch.rand(1000, device="cuda"), bins=10)
        except RuntimeError as error:
            print("\ntorch.histc on CUDA under the flag:", type(error).__name__)
        else:
            raise AssertionError("histc on CUDA has no deterministic implementation")
        index = torch.randint(0, 8, (1 << 20,), device="cuda")   # a million adds into 8 sums
        src = torch.rand(1 << 20, device="cuda")

        def distinct_sums(deterministic: bool, runs: int = 10) -> int:
            torch.use_deterministic_algorithms(deterministic)
            sums = {tuple(torch.zeros(8, device="cuda").scatter_add_(0, index, src).tolist())
                    for _ in range(runs)}
            return len(sums)

        atomic, ordered = distinct_sums(False), distinct_sums(True)
        print(f"scatter_add_ on CUDA, 10 runs: {atomic} distinct results with atomicAdd, "
              f"{ordered} with the flag")
        assert ordered == 1
    else:
        print("\nCUDA part (histc raising under the flag, scatter_add_ with atomics): "
              "not run here, no CUDA device")
    # --8<-- [end:gpu_check]

    # --8<-- [start:order]
    big, one = f32(1e8), f32(1.0)
    spacing = (torch.nextafter(big, f32(math.inf)) - big).item()
    print(f"\nfloat32 spacing at 1e8: {spacing:g}")
    print("(1e8 + 1) - 1e8 =", ((big + one) - big).item(), "| (1e8 - 1e8) + 1 =",
          ((big - big) + one).item())
    assert spacing == 8.0                              # 1e8 + 1 rounds back to 1e8
    assert ((big + one) - big).item() == 0.0 and ((big - big) + one).item() == 1.0

    values = [1e8, 1, 1, 1, -1e8, 1, 1, 1]
    running = f32(0.0)
    for v in values:                                   # one at a time, left to right
        running = running + f32(v)
    trees = {False: tree_sum(values, stride=False), True: tree_sum(values, stride=True)}
    results = {"left to right": running.item(), "neighbour pairs": trees[False][-1][0].item(),
               "stride-4 pairs": trees[True][-1][0].item(), "exact": math.fsum(values)}
    print("the same 8 float32 numbers:", ", ".join(f"{k} {v:g}" for k, v in results.items()))
    assert list(results.values()) == [3.0, 0.0, 6.0, 6.0]
    print(f"torch.sum on this CPU: {torch.tensor(values).sum().item():g} "
          "(its order depends on the vector width)")
    # --8<-- [end:order]

    # --8<-- [start:figure]
    draw_trees(values, trees, {
        "en": {"neighbours": "neighbour pairs: {:g}", "stride": "stride-4 pairs: {:g}",
               "note": "The same 8 float32 numbers, summed in two orders. Red: that "
                       "addition rounded (float32 spacing at 1e8 is 8). Exact sum: 6."},
        "zh": {"neighbours": "相邻两两相加：{:g}", "stride": "间隔 4 两两相加：{:g}",
               "note": "同样 8 个 float32 数，按两种顺序求和。红色：这一步加法有舍入"
                       "（float32 在 1e8 附近的间距是 8）。精确和为 6。"},
    })
    # --8<-- [end:figure]

    # --8<-- [start:loader_check]
    start = time.perf_counter()
    epochs = [[item for batch in loader_for(WhoLoadsWhat(), 0, 2, collate_fn=list)
               for item in batch] for _ in range(2)]
    seconds = time.perf_counter() - start
    base_seed = torch.empty((), dtype=torch.int64).random_(    # the loader's first draw
        generator=torch.Generator().manual_seed(0)).item()
    print("\norder of one epoch:", [i for i, *_ in epochs[0]])
    print("worker of each item:", [w for _, w, *_ in epochs[0]])
    print(f"base_seed {base_seed}; worker seeds seen:",
          sorted({item[2] - base_seed for item in epochs[0]}), "above it")
    assert epochs[0] == epochs[1]                     # order, workers, seeds and draws
    assert all(s == base_seed + w for _, w, s, *_ in epochs[0])
    from torch.utils.data._utils.worker import _generate_state  # NumPy's seed in a worker
    for w in (0, 1):                                  # each worker's draws, in its order
        drawn = [item[4:] for item in epochs[0] if item[1] == w]
        py, legacy = random.Random(base_seed + w), np.random.RandomState(_generate_state(base_seed, w))
        own = np.random.default_rng(base_seed + w)    # what seed_worker gave the dataset
        assert drawn == [(py.random(), legacy.rand(), own.random()) for _ in drawn]
    print("random, NumPy's global generator and the dataset's own: seeded from base_seed + k "
          "in every worker, as rebuilt here")
    print(f"two loaders, 2 workers each, 8 items: {seconds:.2f} s, mostly starting workers")
    # --8<-- [end:loader_check]

    # --8<-- [start:train_check]
    start = time.perf_counter()
    first, second = train(seed=0), train(seed=0)
    not_reseeded = train(seed=0, reseed=False)        # the global RNG goes on from run 2
    for name, losses in (("run 1", first), ("run 2", second), ("not reseeded", not_reseeded)):
        print(f"{name:>13}:", " ".join(f"{v:.6f}" for v in losses[:4].tolist()), "...",
              f"({len(losses)} steps)")
    assert torch.equal(first, second)                 # bit for bit
    assert not torch.equal(first, not_reseeded)
    print(f"run 1 == run 2 bit for bit: {torch.equal(first, second)}; last loss "
          f"{first[-1].item().hex()} vs {second[-1].item().hex()}; "
          f"three runs took {time.perf_counter() - start:.1f} s")
    # --8<-- [end:train_check]

    # --8<-- [start:shuffle]
    def first_batch(width: int, generator: torch.Generator | None) -> list[int]:
        seed_everything(0)
        nn.Linear(8, width)                           # init draws width * 8 + width numbers
        loader = DataLoader(range(8), batch_size=8, shuffle=True, generator=generator)
        return next(iter(loader)).tolist()

    shared = [first_batch(w, None) for w in (32, 64)]
    own = [first_batch(w, torch.Generator().manual_seed(0)) for w in (32, 64)]
    print("\nshuffle from the global RNG, hidden 32 vs 64:", shared[0], shared[1])
    print("shuffle from its own generator, 32 vs 64:   ", own[0], own[1])
    assert shared[0] != shared[1] and own[0] == own[1]
    # --8<-- [end:shuffle]
