"""torch.nn: a module, its parameters, a state_dict round trip, and a device-agnostic training loop."""

import tempfile
from pathlib import Path

# --8<-- [start:linear]
import torch
from torch import nn

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

layer = nn.Linear(3, 2)  # weight: (out, in) = (2, 3), bias: (2,)
x = torch.randn(4, 3)
print("weight", tuple(layer.weight.shape), "| bias", tuple(layer.bias.shape),
      "| is a Parameter:", isinstance(layer.weight, nn.Parameter))
assert torch.allclose(layer(x), x @ layer.weight.T + layer.bias)  # all that Linear computes
assert layer.weight.requires_grad  # parameters are leaves that want gradients
# --8<-- [end:linear]


# --8<-- [start:mlp]
class MLP(nn.Module):
    """Two hidden layers with ReLU; every Module or Parameter attribute is registered."""

    def __init__(self, n_in, n_hidden, n_out):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(n_in, n_hidden), nn.ReLU(),
            nn.Linear(n_hidden, n_hidden), nn.ReLU(),
        )
        self.head = nn.Linear(n_hidden, n_out)

    def forward(self, x):
        return self.head(self.body(x))


model = MLP(1, 32, 1)
print(model)
for name, p in model.named_parameters():
    print(f"  {name:15} {tuple(p.shape)}")
n_params = sum(p.numel() for p in model.parameters())
print("parameters:", n_params)
assert n_params == (1 * 32 + 32) + (32 * 32 + 32) + (32 * 1 + 1)
# --8<-- [end:mlp]

# --8<-- [start:state-dict]
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "mlp.pt"
    torch.save(model.state_dict(), path)  # names -> tensors; no code, no optimizer
    restored = MLP(1, 32, 1)  # a fresh model with different random weights
    assert not torch.equal(restored.head.weight, model.head.weight)
    restored.load_state_dict(torch.load(path, weights_only=True))

probe = torch.linspace(-1, 1, 5).unsqueeze(1)
print("state_dict keys:", list(model.state_dict())[:2], "...")
print("round trip: same tensors, same outputs:", torch.equal(restored(probe), model(probe)))
saved, loaded = model.state_dict(), restored.state_dict()
assert saved.keys() == loaded.keys() and all(torch.equal(saved[k], loaded[k]) for k in saved)
assert torch.equal(restored(probe), model(probe))
# --8<-- [end:state-dict]

# --8<-- [start:train]
# Learn y = sin(3x) on [-1, 1]; the data is made on the CPU and moved once.
xs = torch.linspace(-1, 1, 200).unsqueeze(1)
inputs, targets = xs.to(device), torch.sin(3 * xs).to(device)
moved = model.to(device)  # Module.to moves the parameters in place and returns the module
assert moved is model
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)  # made after the move
loss_fn = nn.MSELoss()


def evaluate():
    model.eval()  # inference behaviour for layers such as Dropout and BatchNorm
    with torch.no_grad():
        return loss_fn(model(inputs), targets).item()


before = evaluate()
for _ in range(200):
    model.train()
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
after = evaluate()
print(f"trained on {next(model.parameters()).device}: loss {before:.4f} -> {after:.5f}")
assert next(model.parameters()).device.type == device
assert after < before / 100 and after < 1e-3
# --8<-- [end:train]
