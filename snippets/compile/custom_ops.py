"""A Numba kernel made into a PyTorch operator with torch.library: what compile and export do
without a fake implementation and with one, a backward formula checked by gradcheck, opcheck's
four tests on a good and a broken operator, and an undeclared mutation that compiles wrong."""
# snippet: timeout=120

import re
import time

# --8<-- [start:kernel]
import math

import numpy as np
import torch
from numba import njit

device = "cuda" if torch.cuda.is_available() else "cpu"


@njit(cache=False)  # compiled at the first call, once per dtype; nothing kept on disk
def gate_kernel(x, gate, out):
    """out = x * sigmoid(gate), one element at a time, on 1-D NumPy arrays."""
    for i in range(x.shape[0]):
        out[i] = x[i] / (1.0 + math.exp(-gate[i]))


def sigmoid_gate_cpu(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    torch._check(x.shape == gate.shape, lambda: "x and gate must have the same shape")
    out = x.new_empty(x.shape)  # contiguous, whatever the inputs' strides
    gate_kernel(x.reshape(-1).numpy(), gate.reshape(-1).numpy(), out.view(-1).numpy())
    return out


sigmoid_gate = torch.library.custom_op(
    "site_custom_ops::sigmoid_gate", sigmoid_gate_cpu, mutates_args=(), device_types="cpu")
print("schema:", sigmoid_gate._opoverload._schema)
# --8<-- [end:kernel]


# --8<-- [start:namespace]
def times(k: float):
    def kernel(x: torch.Tensor) -> torch.Tensor:
        return x * k
    return kernel


first = torch.library.custom_op("site_custom_ops::collide", times(2), mutates_args=())
second = torch.library.custom_op("site_custom_ops::collide", times(3), mutates_args=())
one = torch.ones(1)
results = [f(one).item() for f in (first, second, torch.ops.site_custom_ops.collide)]
print("one name defined twice; first, second, torch.ops.site_custom_ops.collide:", results)
assert results == [3.0, 3.0, 3.0]  # no error: the second definition replaced the first
# --8<-- [end:namespace]

# --8<-- [start:calls]
for dtype in (np.float32, np.float64):
    a = np.zeros(1, dtype)
    start = time.perf_counter()
    gate_kernel(a, a, a)  # the first call with this dtype compiles
    print(f"Numba compiles gate_kernel for {a.dtype}: {time.perf_counter() - start:.2f} s")

x, gate = torch.randn(4, 8), torch.randn(4, 8)
for dtype in (torch.float32, torch.float64):
    reference = x.to(dtype) * torch.sigmoid(gate.to(dtype))
    torch.testing.assert_close(sigmoid_gate(x.to(dtype), gate.to(dtype)), reference)


def per_call_us(fn, budget_s=0.05):
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget_s:
        fn(x, gate)
        calls += 1
    return (time.perf_counter() - start) / calls * 1e6


print(f"per call after that, (4, 8) float32: {per_call_us(sigmoid_gate_cpu):.0f} µs as a "
      f"Python function, {per_call_us(sigmoid_gate):.0f} µs as the operator")
# --8<-- [end:calls]


# --8<-- [start:no-fake]
def brief(ex: Exception) -> str:
    """The exception's type and first line; for Dynamo's wrapper, the error it caught too."""
    text = f"{type(ex).__name__}: {str(ex).splitlines()[0]}"
    caught = re.search(r"got (\w+)\('(.*?\.)[ ']", str(ex))  # in Dynamo's explanation
    return text + (f", which caught {caught[1]}: {caught[2]}" if caught else "")


def block_with(gate_fn):
    """A little model around the gate, so that there is work before and after it."""
    def block(x, gate):
        return gate_fn(x.tanh(), gate) * 2
    return block


class Block(torch.nn.Module):
    def __init__(self, gate_fn):
        super().__init__()
        self.block = block_with(gate_fn)

    def forward(self, x, gate):
        return self.block(x, gate)


def try_to_trace(label: str, gate_fn) -> dict:
    """explain, compile with fullgraph=True, and export the block; print each outcome."""
    block, outcome = block_with(gate_fn), {}
    print(label)
    torch._dynamo.reset()
    try:
        e = torch._dynamo.explain(block)(x, gate)
        outcome["breaks"] = e.graph_break_count
        print(f"  explain:          {e.graph_count} graph(s), {e.graph_break_count} graph "
              f"break(s)")
        for reason in {r.reason for r in e.break_reasons}:
            lines = [line.strip() for line in reason.splitlines()]
            print("                   ", next((line for line in lines  # the line that says why
                                               if line.startswith("Explanation")), lines[0]))
    except Exception as ex:
        outcome["breaks"] = ex
        print("  explain:         ", brief(ex))
    torch._dynamo.reset()
    try:
        same = torch.equal(torch.compile(block, backend="eager", fullgraph=True)(x, gate),
                           block(x, gate))
        outcome["fullgraph"] = same
        print(f"  fullgraph=True:   one graph; same result as eager: {same}")
    except Exception as ex:
        outcome["fullgraph"] = ex
        print("  fullgraph=True:  ", brief(ex))
    try:
        ep = torch.export.export(Block(gate_fn), (x, gate))
        outcome["export"] = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
        print("  torch.export:     graph of", ", ".join(outcome["export"]))
    except Exception as ex:
        outcome["export"] = ex
        print("  torch.export:    ", brief(ex))
    return outcome


plain = try_to_trace("the kernel called as a Python function:", sigmoid_gate_cpu)
no_fake = try_to_trace("the operator, no fake implementation:", sigmoid_gate)
assert plain["breaks"] == 2 and isinstance(plain["fullgraph"], torch._dynamo.exc.Unsupported)
assert isinstance(plain["export"], Exception)
for step in ("breaks", "fullgraph", "export"):
    assert "There was no fake impl" in str(no_fake[step])
# --8<-- [end:no-fake]


# --8<-- [start:fake]
@sigmoid_gate.register_fake
def _(x, gate):
    torch._check(x.shape == gate.shape, lambda: "x and gate must have the same shape")
    return x.new_empty(x.shape)  # the kernel's output: same shape, dtype, device; contiguous


with_fake = try_to_trace("the operator with register_fake:", sigmoid_gate)
assert with_fake["breaks"] == 0 and with_fake["fullgraph"] is True
assert "site_custom_ops.sigmoid_gate.default" in with_fake["export"]
# --8<-- [end:fake]


# --8<-- [start:autograd]
xg = x.clone().requires_grad_()
try:
    sigmoid_gate(xg, gate).sum().backward()
except RuntimeError as ex:
    print("backward before register_autograd:", brief(ex))
    no_formula = ex
assert "no autograd formula" in str(no_formula)


def setup_context(ctx, inputs, output):
    x, gate = inputs  # runs in the forward pass: keep what backward will need
    ctx.save_for_backward(x, gate)


def backward(ctx, grad):
    x, gate = ctx.saved_tensors
    s = torch.sigmoid(gate)
    return grad * s, grad * x * s * (1 - s)  # one gradient per input, in order


sigmoid_gate.register_autograd(backward, setup_context=setup_context)
inputs = [torch.randn(3, 5, dtype=torch.float64, requires_grad=True) for _ in range(2)]
ok = torch.autograd.gradcheck(sigmoid_gate, inputs)
print("gradcheck in float64, analytic against numerical Jacobian:", ok)
assert ok
# --8<-- [end:autograd]


# --8<-- [start:opcheck]
def report(result: dict) -> str:
    return ", ".join(f"{test} {'SUCCESS' if outcome == 'SUCCESS' else 'FAILED'}"
                     for test, outcome in result.items())


def print_failures(result: dict):
    for test, outcome in result.items():
        if outcome != "SUCCESS":
            print(f"  {test}: {brief(outcome)}")


samples = [  # float32 and float64, gradients on, and a transposed (non-contiguous) input
    (torch.randn(4, 8, requires_grad=True), torch.randn(4, 8, requires_grad=True)),
    (torch.randn(5, 3, dtype=torch.float64).t(),
     torch.randn(3, 5, dtype=torch.float64, requires_grad=True)),
]
for args in samples:
    result = torch.library.opcheck(sigmoid_gate, args)
    dtype_name = str(args[0].dtype).removeprefix("torch.")
    print(f"opcheck {dtype_name} {tuple(args[0].shape)}:", report(result))
    assert set(result.values()) == {"SUCCESS"}

# The same kernel, with a fake that forgets the dtype: torch.empty makes the default, float32.
wrong_fake = torch.library.custom_op(
    "site_custom_ops::sigmoid_gate_wrong_fake", sigmoid_gate_cpu, mutates_args=(),
    device_types="cpu")
wrong_fake.register_fake(lambda x, gate: torch.empty(x.shape, device=x.device))
for dtype in (torch.float32, torch.float64):
    result = torch.library.opcheck(wrong_fake, (x.to(dtype), gate.to(dtype)),
                                   raise_exception=False)
    print(f"wrong fake, opcheck {str(dtype).removeprefix('torch.')}:", report(result))
    print_failures(result)
    failed = [test for test, outcome in result.items() if outcome != "SUCCESS"]
    assert failed == ([] if dtype == torch.float32 else ["test_faketensor"])
# --8<-- [end:opcheck]


# --8<-- [start:mutation]
from torch._dynamo.backends.common import aot_autograd


@njit(cache=False)
def gate_kernel_(x, gate):
    for i in range(x.shape[0]):
        x[i] = x[i] / (1.0 + math.exp(-gate[i]))  # writes over x


def sigmoid_gate_cpu_(x: torch.Tensor, gate: torch.Tensor) -> None:
    gate_kernel_(x.view(-1).numpy(), gate.reshape(-1).numpy())  # x must be contiguous


declared = torch.library.custom_op(
    "site_custom_ops::sigmoid_gate_", sigmoid_gate_cpu_, mutates_args={"x"},
    device_types="cpu")
undeclared = torch.library.custom_op(
    "site_custom_ops::sigmoid_gate_undeclared_", sigmoid_gate_cpu_, mutates_args=(),
    device_types="cpu")
undeclared.register_fake(lambda x, gate: None)  # declared gets a trivial one by itself

forward_ops = []


def record_forward(gm, example_inputs):  # an AOTAutograd forward compiler that runs gm as is
    forward_ops[:] = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    return gm


record = aot_autograd(fw_compiler=record_forward)
expected = x.tanh() * torch.sigmoid(gate)


def gated_tanh_with(op):
    def gated_tanh(x, gate):
        h = x.tanh()
        op(h, gate)  # writes into h, a fresh tensor: how an in-place kernel is usually used
        return h
    return gated_tanh


for op in (declared, undeclared):
    gated_tanh = gated_tanh_with(op)
    torch._dynamo.reset()
    eager_ok = torch.allclose(gated_tanh(x, gate), expected)
    compiled_ok = torch.allclose(torch.compile(gated_tanh, backend=record, fullgraph=True)(
        x, gate), expected)
    print(f"{op._opoverload._schema}")
    print(f"  eager correct: {eager_ok}; compiled correct: {compiled_ok}; "
          f"compiled forward graph: {', '.join(forward_ops)}")
    result = torch.library.opcheck(op, (x.clone(), gate), raise_exception=False)
    print("  opcheck:", report(result))
    print_failures(result)
    assert eager_ok and compiled_ok == (op is declared)
    assert (result["test_schema"] == "SUCCESS") == (op is declared)
# --8<-- [end:mutation]


# --8<-- [start:gpu]
if device == "cuda":
    @sigmoid_gate.register_kernel("cuda")
    def _(x, gate):
        # Stands in for a real GPU kernel (Triton, CUDA C++): anything that computes the
        # result on x's device without leaving it.
        return x * torch.sigmoid(gate)

    args = (torch.randn(64, 64, device=device, requires_grad=True),
            torch.randn(64, 64, device=device, requires_grad=True))
    result = torch.library.opcheck(sigmoid_gate, args)
    print(f"opcheck on {torch.cuda.get_device_name()}:", report(result))
    assert set(result.values()) == {"SUCCESS"}
else:
    print("No CUDA device: the operator has a CPU kernel only, and the CUDA part did not run.")
# --8<-- [end:gpu]
