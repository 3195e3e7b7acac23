"""torch.optim: fit one small model with SGD and with Adam, each under a learning-rate scheduler."""

import sys
from pathlib import Path

# --8<-- [start:data]
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"

# Data made on the CPU with its own seeded generator, so it is the same on every device.
gen = torch.Generator().manual_seed(0)
inputs = torch.randn(256, 3, generator=gen)
true_w, true_b = torch.tensor([[2.0, -1.0, 0.5]]), 0.3
targets = inputs @ true_w.T + true_b + 0.1 * torch.randn(256, 1, generator=gen)
inputs, targets = inputs.to(device), targets.to(device)
# --8<-- [end:data]


# --8<-- [start:fit]
def fit(make_optimizer, steps=150):
    """Train a fresh, identically initialised linear model; return it, its losses and its rates."""
    torch.manual_seed(0)  # the same starting weights for every optimizer
    model = nn.Linear(3, 1).to(device)
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)
    losses, lrs = [], []
    for _ in range(steps):
        optimizer.zero_grad()  # drop the previous step's gradients (sets .grad to None)
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()  # fill .grad of every parameter
        optimizer.step()  # update the parameters from their .grad
        lrs.append(scheduler.get_last_lr()[0])  # the rate this step used
        scheduler.step()  # then halve it every 50 steps
        losses.append(loss.item())
    return model, losses, lrs
# --8<-- [end:fit]


# --8<-- [start:compare]
optimizers = {
    "SGD": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "Adam": lambda params: torch.optim.Adam(params, lr=0.05),
}
curves = {}
for name, make_optimizer in optimizers.items():
    model, losses, lrs = fit(make_optimizer)
    curves[name] = losses
    schedule = sorted(set(lrs), reverse=True)
    weights = [round(v, 2) for v in model.weight.flatten().tolist()]
    below = next(step for step, loss in enumerate(losses) if loss < 0.02)
    print(f"{name:4}: loss {losses[0]:.3f} -> {losses[-1]:.4f}, below 0.02 from step {below}"
          f" | lr {' -> '.join(f'{r:g}' for r in schedule)} | w = {weights}")
    assert losses[-1] < 0.02, f"{name} did not fit: final loss {losses[-1]}"
    assert schedule == [lrs[0], lrs[0] / 2, lrs[0] / 4] and lrs.count(lrs[0]) == 50
    assert torch.allclose(model.weight.cpu(), true_w, atol=0.05)
# --8<-- [end:compare]

# --8<-- [start:plot]
sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both  # noqa: E402

LABELS = {"en": {"x": "step", "y": "MSE loss"}, "zh": {"x": "步数", "y": "均方误差损失"}}


def plot(fig, labels):
    ax = fig.subplots()
    for name, losses in curves.items():
        ax.plot(losses, label=name)
    for step in (50, 100):
        ax.axvline(step, color="grey", linestyle=":", linewidth=1)
    ax.set(yscale="log", xlabel=labels["x"], ylabel=labels["y"])
    ax.legend()
    fig.tight_layout()


draw_both("loss", LABELS, plot, figsize=(6, 3.5))
# --8<-- [end:plot]
