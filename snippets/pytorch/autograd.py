"""Autograd: record operations, replay them backwards, and check the result by hand."""

# --8<-- [start:record]
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"

x = torch.tensor([0.5, 1.0, 2.0], device=device, requires_grad=True)
y = torch.sin(x) * x**2  # every operation on x is recorded
loss = y.sum()
print("x is a leaf:", x.is_leaf, "| loss.grad_fn:", loss.grad_fn.name())
assert x.is_leaf and not y.is_leaf and loss.grad_fn.name() == "SumBackward0"
# --8<-- [end:record]


# --8<-- [start:tape]
def show_tape(fn, depth=0):
    """Print the recorded graph from the output back to the leaves; return the node names."""
    leaf = getattr(fn, "variable", None)  # AccumulateGrad nodes hold the leaf they write to
    print("  " * depth + fn.name() + ("  -> x.grad" if leaf is x else ""))
    names = [fn.name()]
    for parent, _ in fn.next_functions:
        if parent is not None:  # None: an input that needs no gradient
            names += show_tape(parent, depth + 1)
    return names


tape = show_tape(loss.grad_fn)
accumulate = "torch::autograd::AccumulateGrad"
assert tape == ["SumBackward0", "MulBackward0", "SinBackward0", accumulate,
                "PowBackward0", accumulate]
# --8<-- [end:tape]

# --8<-- [start:backward]
loss.backward()  # replay the tape backwards; gradients land in the leaves' .grad
analytic = 2 * x * torch.sin(x) + x**2 * torch.cos(x)  # d/dx of x² sin x
print("autograd:", x.grad)
print("by hand: ", analytic.detach())
assert torch.allclose(x.grad, analytic)
# --8<-- [end:backward]

# --8<-- [start:freed]
try:
    loss.backward()  # the tape's saved tensors were freed by the first backward
except RuntimeError:
    print("second backward through the same graph: RuntimeError")
else:
    raise AssertionError("a freed graph should not run backwards twice")
# --8<-- [end:freed]

# --8<-- [start:accumulate]
first = x.grad.clone()
(torch.sin(x) * x**2).sum().backward()  # a fresh forward pass records a fresh tape
print("after a second backward, grad / first grad =", (x.grad / first).tolist())
assert torch.allclose(x.grad, 2 * first)  # added to .grad, not written over it
x.grad = None  # what optimizer.zero_grad() does by default
# --8<-- [end:accumulate]

# --8<-- [start:no-grad]
with torch.no_grad():
    scaled = x * 3  # computed, but not recorded
print("inside no_grad: requires_grad =", scaled.requires_grad, "| grad_fn =", scaled.grad_fn)
assert not scaled.requires_grad and scaled.grad_fn is None
# --8<-- [end:no-grad]

# --8<-- [start:detach]
const = x.detach()  # same memory, cut off from the graph
(x * const).sum().backward()  # d/dx (x * c) = c: no gradient flows through const
print("grad of x * x.detach():", x.grad, "| shares memory:", const.data_ptr() == x.data_ptr())
assert torch.equal(x.grad, const) and not const.requires_grad
assert const.data_ptr() == x.data_ptr()
# --8<-- [end:detach]

# --8<-- [start:gradcheck]
# gradcheck compares autograd with finite differences; it needs float64 to be exact enough.
x64 = torch.rand(4, dtype=torch.float64, device=device, requires_grad=True)
ok = torch.autograd.gradcheck(lambda t: torch.sin(t) * t**2, (x64,))
print("gradcheck against finite differences:", ok)
assert ok
# --8<-- [end:gradcheck]
