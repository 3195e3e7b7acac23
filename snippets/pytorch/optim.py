"""torch.optim: fit one small model with SGD and with Adam, each under a learning-rate scheduler."""

import os
import warnings
from pathlib import Path

try:
    import matplotlib.pyplot as plt
    from matplotlib import font_manager
except ImportError:  # e.g. a GPU machine with torch alone: all but the plot runs
    plt = None

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

if plt is None:
    print("loss.svg, loss.zh.svg: not drawn, matplotlib is not installed here")
    raise SystemExit(0)

# --8<-- [start:plot]
plt.rcParams["svg.fonttype"] = "none"  # keep text as text: the browser draws it, CJK included
LABELS = {  # the same chart once per language: loss.svg for the English page, loss.zh.svg
    "en": {"file": "loss.svg", "x": "step", "y": "MSE loss"},
    "zh": {"file": "loss.zh.svg", "x": "步数", "y": "均方误差损失"},
}
installed = {font.name for font in font_manager.fontManager.ttflist}
cjk = [f for f in ("Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei") if f in installed][:1]
if not cjk:  # still drawn: the browser has its own Chinese font, only the layout is rougher
    warnings.filterwarnings("ignore", "Glyph .* missing from font")
    print("loss.zh.svg: matplotlib found no Chinese font (Debian: apt install fonts-noto-cjk), "
          "so its labels are measured with a Latin font")


def plot(labels, fonts, out):
    with plt.rc_context({"font.sans-serif": fonts + plt.rcParams["font.sans-serif"]}):
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for name, losses in curves.items():
            ax.plot(losses, label=name)
        for step in (50, 100):
            ax.axvline(step, color="grey", linestyle=":", linewidth=1)
        ax.set(yscale="log", xlabel=labels["x"], ylabel=labels["y"])
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / labels["file"])
    plt.close(fig)


out = Path(os.environ.get("SNIPPET_OUTPUT_DIR", "."))
for lang, labels in LABELS.items():
    plot(labels, cjk if lang == "zh" else [], out)
print("saved", ", ".join(labels["file"] for labels in LABELS.values()))
# --8<-- [end:plot]
