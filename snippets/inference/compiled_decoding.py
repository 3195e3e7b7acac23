"""Decoding under torch.compile: a cache that grows changes shape every step and makes Dynamo
compile again; a preallocated cache written at a position held in a tensor keeps one decode
graph, which CUDA graphs (mode="reduce-overhead") replay on a GPU.

Dynamo's part runs with backends that compile nothing, so it needs no C++ compiler."""
# snippet: timeout=240

import logging
import logging.handlers
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared helpers

# --8<-- [start:setup]
import torch
import torch._dynamo
from torch._dynamo.utils import counters
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.benchmark import Timer
from _model import Config, KVCache, StaticKVCache, TinyLM, prompt

device = "cuda" if torch.cuda.is_available() else "cpu"
cfg = Config(layers=1)  # one block: the graphs count the same, and each trace costs half
torch.manual_seed(0)
model = TinyLM(cfg).eval().requires_grad_(False).to(device)  # untrained: shapes matter here
PROMPT = prompt(cfg, batch=1, length=8).to(device)
STEPS = 16                                         # decode steps after the prompt
# Tells CUDA graph trees that a new step begins, so the memory of the last step's outputs may
# be reused. A CPU has no CUDA graphs, and the call would only import their machinery.
mark_step = torch.compiler.cudagraph_mark_step_begin if device == "cuda" else lambda: None


def next_token(model, idx, cache, pos):
    """One forward call, then the greedy choice: the token after the last of idx."""
    return model(idx, cache, pos)[:, -1:].argmax(-1)


def generate(decode, cache, pos, prefill=None, steps=STEPS):
    """Greedy decoding: one call for the prompt, then one call per new token. Returns the new
    tokens and, after each call, how many graphs Dynamo has compiled so far."""
    graphs, tokens = [], []
    for i in range(steps + 1):
        idx = PROMPT if i == 0 else tokens[-1]
        step = (prefill or decode) if i == 0 else decode
        mark_step()                                 # a new step begins
        tokens.append(step(model, idx, cache, pos).clone())  # the next replay overwrites it
        graphs.append(counters["stats"]["unique_graphs"])
        pos += idx.shape[1]                          # in place when pos is a tensor
    return torch.cat(tokens, dim=1)[0].tolist(), graphs


@contextmanager
def kept(name: str):
    """The messages of one torch logger meanwhile, kept instead of printed to stderr;
    the list is filled as the block ends."""
    log, handler, messages = logging.getLogger(name), logging.handlers.BufferingHandler(10_000), []
    propagate, log.propagate = log.propagate, False
    log.addHandler(handler)
    try:
        yield messages
    finally:
        log.removeHandler(handler)
        log.propagate = propagate
        messages += [record.getMessage() for record in handler.buffer]


graphs_seen = []


def keep_graph(gm: torch.fx.GraphModule, example_inputs):
    """A backend that keeps each graph Dynamo hands it and runs it as it is: no Inductor."""
    graphs_seen.append(gm)
    return gm.forward


def compiled(backend=None, **options):
    """A fresh torch.compile of next_token, with Dynamo's state and counters reset."""
    torch._dynamo.reset()
    counters.clear()
    graphs_seen.clear()
    return torch.compile(next_token, backend=backend or keep_graph, **options)


def symbols(gm: torch.fx.GraphModule) -> dict[str, str]:
    """The graph's inputs that are symbols (s0, s1, …) instead of numbers: a size or an int."""
    found = {}
    for node in gm.graph.find_nodes(op="placeholder"):
        if isinstance(node.meta.get("example_value"), torch.SymInt):
            name = node._dynamo_source.name.replace("L['", "").replace("']", "")
            found[name.replace(".size()[2]", " length")] = str(node.meta["example_value"])
    return found


eager_tokens, _ = generate(next_token, KVCache(cfg), 0)
print(f"eager, growing cache: {len(eager_tokens)} tokens {eager_tokens}")
# --8<-- [end:setup]


# --8<-- [start:growing]
torch._logging.set_logs(recompiles=True)   # Dynamo logs why each recompilation happened
with kept("torch._dynamo.guards.__recompiles") as reasons:
    tokens, grow_graphs = generate(compiled(), KVCache(cfg), 0)
torch._logging.set_logs()
print(f"growing cache, torch.compile defaults: graphs after each call {grow_graphs}")
for n, message in enumerate(reasons, 1):
    failures = [line.strip()[2:] for line in message.splitlines() if line.strip().startswith("- ")]
    print(f"  recompile {n}: {failures[0]}")
for n in (1, 2):
    found = symbols(graphs_seen[n])
    print(f"  graph {n + 1}, symbols: " + ", ".join(f"{k} {v}" for k, v in found.items()))
assert tokens == eager_tokens
assert grow_graphs == [1, 2] + [3] * (STEPS - 1)  # prompt, first step, then every length
assert list(symbols(graphs_seen[1])) == ["pos"]                    # the int that changed
assert len(symbols(graphs_seen[2])) == 1 + 2 * cfg.layers            # pos, and each k, v length
# --8<-- [end:growing]


# --8<-- [start:limit]
LIMIT = 4  # the default, torch._dynamo.config.recompile_limit, is 8: 4 costs half the tracing
assert torch._dynamo.config.recompile_limit == 8
with torch._dynamo.config.patch(recompile_limit=LIMIT), \
        kept("torch._dynamo.convert_frame") as warnings:
    tokens, fixed_graphs = generate(compiled(dynamic=False), KVCache(cfg), 0)
print(f"growing cache, dynamic=False, recompile_limit {LIMIT}: graphs after each call "
      f"{fixed_graphs}")
print(f"  {warnings[0].splitlines()[0]}; the calls after it ran eagerly")
assert tokens == eager_tokens and "recompile_limit" in warnings[0]
assert fixed_graphs == list(range(1, LIMIT + 1)) + [LIMIT] * (STEPS + 1 - LIMIT)
# --8<-- [end:limit]


# --8<-- [start:static]
def static_cache():
    """A preallocated cache whose tensors CUDA graphs may treat as fixed addresses."""
    cache = StaticKVCache(cfg, batch=1, device=device)
    torch._dynamo.mark_static_address(cache.k)  # written in place by every step: the graph
    torch._dynamo.mark_static_address(cache.v)  # may keep their addresses, not copy them
    return cache


step = compiled(fullgraph=True)                   # fullgraph: a graph break would raise
tokens, static_graphs = generate(step, static_cache(), torch.tensor(0, device=device))
decode_graph = graphs_seen[1]
inputs = {n._dynamo_source.name: n.meta.get("tensor_dict", {}).get("_dynamo_static_input_type")
          for n in decode_graph.graph.find_nodes(op="placeholder")}
print(f"static cache, position as a tensor: graphs after each call {static_graphs}")
print(f"  decode graph: {len(inputs)} inputs, {sum(v is not None for v in inputs.values())} "
      f"at fixed addresses (the parameters, cache.k and cache.v); copied in each step: "
      f"{[name for name, v in inputs.items() if v is None]}; symbolic: "
      f"{symbols(decode_graph) or 'none'}")
assert tokens == eager_tokens
assert static_graphs == [1] + [2] * STEPS                 # prompt, then one decode graph
assert not symbols(decode_graph)
assert inputs["L['cache'].k"] and inputs["L['cache'].v"]
assert sum(v is not None for v in inputs.values()) == len(list(model.parameters())) + 2
assert [n for n, v in inputs.items() if v is None] == ["L['idx']", "L['pos']"]
# --8<-- [end:static]


# --8<-- [start:overhead]
class CountOps(TorchDispatchMode):
    """Counts the ATen operations of a call: those that write memory (a kernel each, on a
    GPU) and those that only give existing memory another shape (views and the like)."""

    def __init__(self):
        super().__init__()
        self.writes = self.reshapes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        storage = lambda tree: {t.untyped_storage().data_ptr() for t in tree_leaves(tree)
                                if isinstance(t, torch.Tensor)}
        if func._schema.is_mutable or storage(out) - storage((args, kwargs)):
            self.writes += 1
        else:
            self.reshapes += 1
        return out


cache, pos = StaticKVCache(cfg, batch=1, device=device), torch.tensor(8, device=device)
token = torch.zeros(1, 1, dtype=torch.long, device=device)
with CountOps() as ops:
    model(token, cache, pos)
linear_weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
timer = Timer("model(token, cache, pos)", globals=globals())  # one thread: the operations are tiny
seconds = timer.blocked_autorange(min_run_time=0.3).median
print(f"one eager decode step on the {device}: {ops.writes} operations that write memory, "
      f"{ops.reshapes} that only reshape it; {seconds * 1e6:.0f} µs, "
      f"{seconds / ops.writes * 1e6:.1f} µs per writing operation")
print(f"  its matmuls: {2 * linear_weights:,} FLOPs, 2 per weight ({linear_weights:,} weights)")
assert linear_weights == cfg.layers * 12 * cfg.d**2 + cfg.d * cfg.vocab
# --8<-- [end:overhead]


# --8<-- [start:cuda-graphs]
def per_token(decode, cache, pos_of, prefill=None) -> float:
    """Seconds per new token of generate(), median of runs for about 0.5 s."""
    times = []
    while len(times) < 3 or (sum(times) < 0.5 and len(times) < 50):
        pos = pos_of()
        torch.cuda.synchronize()
        start = time.perf_counter()
        generate(decode, cache, pos, prefill)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / (STEPS + 1))
    return sorted(times)[len(times) // 2]


if device == "cuda":
    from compile._toolchain import exit_if_missing  # says which build tool is missing
    at_zero = lambda: torch.tensor(0, device=device)
    results = {"eager": per_token(next_token, static_cache(), at_zero)}
    for mode in ("default", "reduce-overhead"):
        decode = compiled("inductor", mode=mode, fullgraph=True)
        try:
            tokens, _ = generate(decode, static_cache(), at_zero(), prefill=next_token)
        except Exception as error:
            exit_if_missing(error, "torch.compile could not build the decode step",
                            "Inductor needs Triton on a GPU, and Triton a C compiler and "
                            "Python's headers (see ../compile/torch_compile.md#no-compiler).")
            raise
        assert tokens == eager_tokens                 # the prompt runs eagerly, as in gpt-fast
        results[mode] = per_token(decode, static_cache(), at_zero, prefill=next_token)
        assert counters["inductor"]["cudagraph_skips"] == 0, "a CUDA graph was skipped"
    print(f"{torch.cuda.get_device_name()}, µs per token: "
          + ", ".join(f"{k} {v * 1e6:.0f}" for k, v in results.items()))
else:
    print("mode=\"reduce-overhead\" (CUDA graphs): not run here, no CUDA device; "
          "with CPU tensors Inductor would skip the CUDA graphs")
# --8<-- [end:cuda-graphs]
