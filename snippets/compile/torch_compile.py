"""torch.compile: what Dynamo captures, guards and recompiles, graph breaks, what
Inductor generates, compile time against steady-state time, the modes, CUDA graphs.

Dynamo's parts run with a counting backend (no C++ compiler needed); one small
function goes through Inductor. Without a working C++ compiler (or, on a GPU,
without Triton, or without the C compiler and Python headers that Triton builds its
launcher with) the script says what is missing and exits 0.
"""
# snippet: timeout=240 serial cpu-independent
# The CPU profiles skip this file: it asserts what Dynamo captures, guards and recompiles,
# how many kernels Inductor writes, and that compiled code computes what eager code computes
# on the same machine; its timings are printed, never asserted.

import logging
import logging.handlers
import os

# One small kernel needs no pool of compile workers; on a 2-core machine starting
# that pool costs more than it saves. Set before torch is imported.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

# --8<-- [start:setup]
import time

import torch
import torch._dynamo
from _toolchain import exit_if_missing
from torch._dynamo.utils import counters
from torch.utils.benchmark import Timer

device = "cuda" if torch.cuda.is_available() else "cpu"
THREADS = torch.get_num_threads()
captured = []   # one entry per FX graph that Dynamo hands to the backend


def counting_backend(gm: torch.fx.GraphModule, example_inputs):
    """A custom backend: remember the graph, then run it as it is (no Inductor)."""
    captured.append(gm)
    return gm.forward


def ops(gm: torch.fx.GraphModule) -> list[str]:
    return [getattr(n.target, "__name__", str(n.target)) for n in gm.graph.nodes
            if n.op in ("call_function", "call_method")]


def inputs(gm: torch.fx.GraphModule) -> list[str]:
    """The graph's inputs: a symbolic size shows up as a name such as s77."""
    found = []
    for node in gm.graph.find_nodes(op="placeholder"):
        value = node.meta.get("example_value")
        if isinstance(value, torch.Tensor):
            found.append(f"{str(value.dtype).removeprefix('torch.')}"
                         f"[{', '.join(str(s) for s in value.shape)}]")
        else:
            found.append(f"size {value}")
    return found
# --8<-- [end:setup]


# --8<-- [start:capture]
def scale_shift(x):
    return torch.relu(x) * 2 - 1


f = torch.compile(scale_shift, backend=counting_backend)
f(torch.randn(8))
f(torch.randn(8))            # same shape and dtype: the guards pass, no new graph
print(f"Dynamo captured {len(captured)} graph for 2 calls: ops {ops(captured[0])}, "
      f"inputs {inputs(captured[0])}")
assert len(captured) == 1 and ops(captured[0]) == ["relu", "mul", "sub"]
# --8<-- [end:capture]


# --8<-- [start:recompile]
def why_recompile(fn, *args) -> str:
    """Call fn under the fail_on_recompile stance: the error names the failed guard."""
    with torch.compiler.set_stance("fail_on_recompile"):
        try:
            fn(*args)
        except RuntimeError as e:
            return next(line.strip()[2:] for line in str(e).splitlines()
                        if line.strip().startswith("- "))
    return "no recompile"


print("recompile for a new shape:", why_recompile(f, torch.randn(16)))
f(torch.randn(16))           # compiles graph 2, with the size as a symbol
f(torch.randn(32))           # covered by graph 2: no new graph
print(f"after shapes 8, 16, 32: {len(captured)} graphs, graph 2 inputs "
      f"{inputs(captured[1])}")
assert len(captured) == 2 and why_recompile(f, torch.randn(64)) == "no recompile"

print("recompile for a new dtype:", why_recompile(f, torch.randn(32, dtype=torch.float64)))
f(torch.randn(32, dtype=torch.float64))
print(f"after float64: {len(captured)} graphs")
assert len(captured) == 3

torch._dynamo.reset()        # forget every compiled entry
captured.clear()
g = torch.compile(scale_shift, backend=counting_backend, dynamic=True)
for n in (8, 16, 32):
    g(torch.randn(n))
print(f"dynamic=True, shapes 8, 16, 32: {len(captured)} graph, inputs {inputs(captured[0])}")
assert len(captured) == 1
# --8<-- [end:recompile]


# --8<-- [start:graph-break]
def shift_if_positive(x):
    y = x * 2
    if y.sum() > 0:          # Python needs the value: the graph must end here
        y = y - 1
    return torch.relu(y)


def shift_if_positive_fixed(x):
    y = x * 2
    y = torch.where(y.sum() > 0, y - 1, y)   # the choice stays inside the graph
    return torch.relu(y)


x = torch.randn(100)
before = torch._dynamo.explain(shift_if_positive)(x)
after = torch._dynamo.explain(shift_if_positive_fixed)(x)
print(f"graph breaks before the fix: {before.graph_break_count} "
      f"({before.graph_count} graphs), reason: {before.break_reasons[0].reason.splitlines()[0]}")
print(f"graph breaks after the fix: {after.graph_break_count} ({after.graph_count} graph)")
assert before.graph_break_count == 1 and after.graph_break_count == 0
assert torch.equal(shift_if_positive(x), shift_if_positive_fixed(x))

try:
    torch.compile(shift_if_positive, backend=counting_backend, fullgraph=True)(x)
    raise AssertionError("fullgraph=True accepted a graph break")
except torch._dynamo.exc.Unsupported as e:
    print(f"fullgraph=True refuses the break: {type(e).__name__}")
# --8<-- [end:graph-break]


# --8<-- [start:inductor]
def gelu_tanh(x):
    """The tanh approximation of GELU: nine element-wise operations in eager mode."""
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


eager_ops = torch._dynamo.explain(gelu_tanh)(torch.randn(8)).op_count
print(f"gelu_tanh in eager mode: {eager_ops} operations, each a pass over memory")
assert eager_ops == 9

torch._dynamo.reset()
grab = logging.handlers.BufferingHandler(capacity=10_000)  # keeps the records: the output_code artifact
logging.getLogger("torch._inductor").addHandler(grab)
torch._logging.set_logs(output_code=True)     # the same as TORCH_LOGS="output_code"
compiled = torch.compile(gelu_tanh)           # backend "inductor", mode "default"
x = torch.randn(2**20, device=device)
start = time.perf_counter()
try:
    y = compiled(x)                           # first call: trace, generate, build
except Exception as error:
    exit_if_missing(error, "torch.compile could not build a kernel",
                    "Inductor needs a C++ compiler (g++ or clang++, found through CXX or "
                    "torch._inductor.config.cpp.cxx) and Python's headers for the CPU; for a GPU, "
                    "Triton, which needs a C compiler (CC, gcc or clang) and Python's headers too "
                    "(python3-dev on Debian and Ubuntu). Not run: Inductor's part of this page.")
    raise
if device == "cuda":
    torch.cuda.synchronize()
compile_s = time.perf_counter() - start
torch._logging.set_logs()                     # logging back to its defaults
logging.getLogger("torch._inductor").removeHandler(grab)

hits = counters["inductor"]["fxgraph_cache_hit"]
print(f"first call (compile included): {compile_s:.1f} s, FX graph cache "
      f"{'hit: compiled code reused from disk' if hits else 'miss: compiled from scratch'}")
torch.testing.assert_close(y, gelu_tanh(x), rtol=1e-5, atol=1e-5)
with torch.compiler.set_stance("fail_on_recompile"):   # raises if it recompiled
    compiled(torch.randn(2**20, device=device))
print(f"second call, same shape: no recompile; max |compiled - eager| = "
      f"{(y - gelu_tanh(x)).abs().max().item():.1e}")
# --8<-- [end:inductor]


# --8<-- [start:generated]
code = next(m for r in grab.buffer if (m := r.getMessage()).startswith("Output code:")).splitlines()
kernels = [line.split(" = ")[0] for line in code
           if " = async_compile.cpp_pybinding(" in line or " = async_compile.triton(" in line]
print(f"generated kernels: {kernels}")
assert len(kernels) == 1                      # nine operations fused into one loop
first = next(i for i, line in enumerate(code) if line.startswith(kernels[0] + " = "))
last = next(i for i in range(first + 1, len(code)) if code[i].startswith("'''"))
wanted = ("extern", "for(", "tanh", "store", "out_ptr0[", "def triton", "tl.load")
source = [line.strip() for line in code[first + 1:last] if any(w in line for w in wanted)]
caller = next(line.strip() for line in code[last:]
              if line.strip().startswith((kernels[0] + "(", kernels[0] + ".run(")))
print("\n".join(["  " + line for line in source[:6]] + ["  ...", "  " + caller]))
# --8<-- [end:generated]


# --8<-- [start:timing]
def seconds_per_call(fn, x) -> float:
    """Median time per call; Timer repeats it for about 0.3 s (syncs a GPU itself)."""
    timer = Timer("fn(x)", globals={"fn": fn, "x": x}, num_threads=THREADS)
    return timer.blocked_autorange(min_run_time=0.3).median


eager_s = seconds_per_call(gelu_tanh, x)
compiled_s = seconds_per_call(compiled, x)
print(f"steady state on {device}, 2**20 floats: eager {eager_s * 1e3:.2f} ms, "
      f"compiled {compiled_s * 1e3:.2f} ms per call")
if compiled_s < eager_s:
    print(f"the compile pays for itself after about "
          f"{compile_s / (eager_s - compiled_s):,.0f} calls")
else:
    print("compiled is not faster here: the compile never pays for itself")
# --8<-- [end:timing]


# --8<-- [start:modes]
modes = torch._inductor.list_mode_options()
print(f"modes: {', '.join(modes)}")
for mode in ("default", "reduce-overhead", "max-autotune"):
    print(f"  {mode}: {modes[mode] or 'no option changed'}")

torch._dynamo.reset()
skips = counters["inductor"]["cudagraph_skips"]
overhead = torch.compile(gelu_tanh, mode="reduce-overhead")
small = torch.randn(1024, device=device)
for _ in range(3):                            # warm-up, record, replay
    out = overhead(small).clone()             # replays reuse the output's memory
torch.testing.assert_close(out, gelu_tanh(small), rtol=1e-5, atol=1e-5)
skipped = counters["inductor"]["cudagraph_skips"] - skips
if device == "cuda":
    overhead_s = seconds_per_call(overhead, small)
    torch._dynamo.reset()                     # then the default mode, compiled for 1024 floats
    compiled(small)
    print(f"reduce-overhead on a GPU ({skipped} skips): {overhead_s * 1e6:.1f} µs per call "
          f"on 1024 floats, default mode {seconds_per_call(compiled, small) * 1e6:.1f} µs, "
          f"eager {seconds_per_call(gelu_tanh, small) * 1e6:.1f} µs")
else:
    print(f"reduce-overhead on the CPU: CUDA graphs skipped ({skipped}), "
          f"the ordinary compiled kernel ran")
    assert skipped >= 1
# --8<-- [end:modes]


# --8<-- [start:launch]
def chain(x):
    for _ in range(20):      # 20 × (mul, add): 40 kernels on a GPU
        x = x * 1.0001 + 0.0001
    return x


tiny = torch.randn(1024, device=device)
per_op = seconds_per_call(chain, tiny) / 40
print(f"eager, 40 operations on 1024 floats ({device}): {per_op * 1e6:.1f} µs per operation")
# --8<-- [end:launch]


# --8<-- [start:cuda-graphs]
if device == "cuda":
    static_in = torch.randn(1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):             # warm up outside the capture
        for _ in range(3):
            chain(static_in)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):             # records the 40 kernels, runs none
        static_out = chain(static_in)

    new = torch.randn(1024, device="cuda")
    static_in.copy_(new)                      # new data goes into the same memory
    graph.replay()                            # one launch for the whole sequence
    torch.testing.assert_close(static_out, chain(new))
    replay_s = Timer("g.replay()", globals={"g": graph}).blocked_autorange(min_run_time=0.3).median
    print(f"CUDA graph: 40 kernels replayed in {replay_s * 1e6:.1f} µs, "
          f"eager {per_op * 40 * 1e6:.1f} µs")
else:
    print("CUDA graph capture and replay: not run here, no CUDA device")
# --8<-- [end:cuda-graphs]
