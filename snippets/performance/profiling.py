"""Profiling a training loop: a schedule that traces two of six steps, labelled ranges, tables
grouped by input shape and by call stack, memory per operator, one traced step drawn from the
Chrome trace, and NVTX ranges for Nsight (on a GPU only)."""

# snippet: timeout=120

import json
import os
import sys
import warnings
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both

OUT = Path(os.environ.get("SNIPPET_OUTPUT_DIR", "."))

# --8<-- [start:schedule]
import torch
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, schedule

device = "cuda" if torch.cuda.is_available() else "cpu"
activities = [ProfilerActivity.CPU]
if device == "cuda":
    activities.append(ProfilerActivity.CUDA)

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batches = torch.Generator().manual_seed(1)
PHASES = ("data", "forward", "backward", "optimizer")


def train_step():
    with record_function("data"):                   # stands in for a DataLoader
        x = torch.randn(32, 128, generator=batches).to(device, non_blocking=True)
        y = torch.randint(0, 10, (32,), generator=batches).to(device, non_blocking=True)
    with record_function("forward"):
        loss = nn.functional.cross_entropy(model(x), y)
    with record_function("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()


plan = schedule(wait=1, warmup=1, active=2, repeat=1)
print("step:   " + "  ".join(f"{step:<15}" for step in range(6)).rstrip())
print("action: " + "  ".join(f"{plan(step).name:<15}" for step in range(6)).rstrip())

cycles = []                                # the steps each call of on_trace_ready saw


def host_side(events):
    """The events the CPU recorded. With CUDA profiled, each record_function range that
    launched GPU work gets a copy on the GPU's side too: same name, device type CUDA."""
    return [e for e in events if e.device_type == DeviceType.CPU]


def on_trace_ready(prof):
    cycles.append(sorted(e.trace_name for e in host_side(prof.events())
                         if (e.trace_name or "").startswith("ProfilerStep#")))
    prof.export_chrome_trace(str(OUT / "trace.json"))


with profile(activities=activities, schedule=plan, on_trace_ready=on_trace_ready,
             record_shapes=True) as prof:
    for step in range(6):
        train_step()
        prof.step()                        # this step ends here, the next one begins

print(f"on_trace_ready ran {len(cycles)} time(s); the steps it saw: {', '.join(cycles[0])}")
assert cycles == [["ProfilerStep#2", "ProfilerStep#3"]]
# --8<-- [end:schedule]


# --8<-- [start:ranges]
averages = prof.key_averages()                  # one row per name, over the two traced steps
print(averages.table(sort_by="self_cpu_time_total", row_limit=4, max_name_column_width=22))

per_name = {a.key: a for a in host_side(averages)}    # the host's row of each name
for phase in PHASES:
    a = per_name[phase]
    ms = a.cpu_time_total / a.count / 1e3
    print(f"{phase:<10} {a.count} calls, {ms:8.2f} ms per step on the CPU")
    assert a.count == 2                         # once per traced step
# --8<-- [end:ranges]


# --8<-- [start:shapes]
MATMULS = ("aten::addmm", "aten::mm")
print("grouped by name:        " + ", ".join(f"{k} {per_name[k].count} calls" for k in MATMULS))
by_shape = [a for a in prof.key_averages(group_by_input_shape=True) if a.key in MATMULS]
print("grouped by input shape:")
for a in sorted(by_shape, key=lambda a: (a.key, str(a.input_shapes))):
    print(f"  {a.key:<12} {a.count} calls  {a.input_shapes}")
assert sorted(a.key for a in by_shape) == ["aten::addmm"] * 2 + ["aten::mm"] * 3
assert all(a.count == 2 for a in by_shape)      # one per traced step
# --8<-- [end:shapes]


# --8<-- [start:stacks]
def profile_one_step(**options):
    with profile(activities=activities, record_shapes=True, **options) as p:
        train_step()
    return p


plain = profile_one_step(with_stack=True)
ops = [e for e in plain.events() if e.name.startswith("aten::")]
print(f"with_stack=True alone: {sum(bool(e.stack) for e in ops)} of {len(ops)} aten events "
      f"carry a Python stack")

verbose = torch.profiler._ExperimentalConfig(verbose=True)        # private, experimental
stacked = profile_one_step(with_stack=True, experimental_config=verbose)
rows = [a for a in stacked.key_averages(group_by_stack_n=4) if a.key == "aten::addmm"]
print(f"with verbose=True, aten::addmm grouped by its top 4 frames: {len(rows)} rows")
for a in rows:
    print(f"  {a.count} call from:")
    for frame in a.stack[:4]:
        print(f"    {frame}")
assert len(rows) == 2                           # one per nn.Linear that called it
callers = {next(f for f in a.stack[:4] if f.startswith("nn.Module: ")) for a in rows}
assert callers == {"nn.Module: Linear_0", "nn.Module: Linear_1"}
# --8<-- [end:stacks]


# --8<-- [start:memory]
optimizer.zero_grad(set_to_none=True)   # so that no gradient predates the profiled step
memory = profile_one_step(profile_memory=True, with_stack=True)
column = "self_device_memory_usage" if device == "cuda" else "self_cpu_memory_usage"
top = sorted(memory.key_averages(), key=lambda a: getattr(a, column), reverse=True)[:4]
print(f"operators by {column}:")
for a in top:
    calls = f"{a.count} call" + ("s" if a.count > 1 else "")
    print(f"  {a.key:<24} {calls:<7}  {getattr(a, column):>9,} bytes")

if device == "cpu":                 # three products in backward allocate the weight gradients
    weight_grads = 4 * (256 * 128 + 10 * 256)   # and the gradient of the hidden activation
    hidden_grad = 4 * 32 * 256
    assert top[0].key == "aten::mm"
    assert top[0].self_cpu_memory_usage == weight_grads + hidden_grad
# --8<-- [end:memory]


# --8<-- [start:timeline]
from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX   # the JSON's column order

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    memory.export_memory_timeline(str(OUT / "memory_timeline.json"))
print(f"export_memory_timeline warned: {sorted({w.category.__name__ for w in caught})}")
print(f"torch.cuda.memory has _export_memory_snapshot: "
      f"{hasattr(torch.cuda.memory, '_export_memory_snapshot')}, _dump_snapshot: "
      f"{hasattr(torch.cuda.memory, '_dump_snapshot')}")

times, sizes = json.loads((OUT / "memory_timeline.json").read_text())
names = {i + 1: c.name.lower() if c else "unknown" for c, i in _CATEGORY_TO_INDEX.items()}
peak = max(range(len(times)), key=lambda i: sum(sizes[i]))
print(f"memory timeline: {len(times)} points, peak {sum(sizes[peak]):,} bytes "
      f"{(times[peak] - times[0]) / 1e3:.2f} ms after the first point:")
print("  " + ", ".join(f"{names.get(i)} {b:,}" for i, b in enumerate(sizes[peak]) if b))
print(f"  memory_timeline.json: {(OUT / 'memory_timeline.json').stat().st_size:,} bytes")

parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
column_of = {n: i for i, n in names.items()}
if device == "cpu":             # the CPU allocator reports exact sizes, the CUDA one rounds up
    assert all(row[column_of["parameter"]] == parameter_bytes for row in sizes)
    assert max(row[column_of["gradient"]] for row in sizes) == parameter_bytes


def draw_memory(fig, text):
    """The JSON's columns stacked over time: what export_memory_timeline's HTML plots."""
    ax = fig.add_subplot()
    shown = [i for i in sorted(names) if i < len(sizes[0]) and any(row[i] for row in sizes)]
    ax.stackplot([(t - times[0]) / 1e3 for t in times],
                 *[[row[i] / 1024 for row in sizes] for i in shown],
                 labels=[text[names[i]] for i in shown])
    ax.set_xlabel(text["x"])
    ax.set_ylabel(text["y"])
    ax.legend(fontsize=7, loc="upper left")


draw_both("memory_timeline", {
    "en": {"x": "time since the first point (ms)", "y": "KiB held", "parameter": "parameters",
           "optimizer_state": "optimizer state", "input": "inputs", "temporary": "temporaries",
           "activation": "activations", "gradient": "gradients",
           "autograd_detail": "autograd internals", "unknown": "unknown"},
    "zh": {"x": "从第一个记录点算起的时间（ms）", "y": "占用内存（KiB）", "parameter": "参数",
           "optimizer_state": "优化器状态", "input": "输入", "temporary": "临时张量",
           "activation": "激活值", "gradient": "梯度", "autograd_detail": "自动求导细节",
           "unknown": "未知"},
}, draw_memory)
# --8<-- [end:timeline]


# --8<-- [start:trace]
trace = json.loads((OUT / "trace.json").read_text())
print(f"trace.json: {(OUT / 'trace.json').stat().st_size:,} bytes, "
      f"{len(trace['traceEvents']):,} events")
spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]


def host_ranges(events):
    """The record_function ranges as the CPU recorded them. A range's copy on the GPU's side
    has the same name, in the category gpu_user_annotation."""
    return [e for e in events if e.get("cat") == "user_annotation"]


annotations = host_ranges(spans)
assert sorted(e["name"] for e in annotations if e["name"].startswith("ProfilerStep#")) == [
    "ProfilerStep#2", "ProfilerStep#3"]                 # the file holds the active steps only
step = next(e for e in annotations if e["name"] == "ProfilerStep#3")
t0, t1 = step["ts"], step["ts"] + step["dur"]


def inside(e):
    return t0 <= e["ts"] and e["ts"] + e["dur"] <= t1


ranges = [e for e in annotations if e["name"] in PHASES and inside(e)]
ops = sorted((e for e in spans if e.get("cat") == "cpu_op" and inside(e)),
             key=lambda e: (e["tid"], e["ts"], -e["dur"]))
top_level, open_until = [], {}                  # an op not nested in another op of its thread
for e in ops:
    if e["ts"] >= open_until.get(e["tid"], -1.0):
        top_level.append(e)
        open_until[e["tid"]] = e["ts"] + e["dur"]

launches = {e["args"]["correlation"]: e for e in spans            # on a GPU: the CPU calls
            if e.get("cat") in ("cuda_runtime", "cuda_driver")  # that queued each kernel
            and inside(e) and "correlation" in e.get("args", {})}
kernels = sorted((e for e in spans if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and e.get("args", {}).get("correlation") in launches), key=lambda e: e["ts"])
threads = [step["tid"]] + sorted({e["tid"] for e in top_level} - {step["tid"]})
streams = sorted({e["tid"] for e in kernels})
print(f"ProfilerStep#3: {(t1 - t0) / 1e3:.2f} ms, {len(top_level)} top-level ops on "
      f"{len(threads)} CPU thread(s), {len(kernels)} GPU kernels and copies")
assert {e["name"] for e in ranges} == set(PHASES)
if kernels:
    busy, first = 0.0, kernels[0]["ts"]
    end = first
    for k in kernels:                           # overlapping kernels count once
        busy += max(0.0, k["ts"] + k["dur"] - max(end, k["ts"]))
        end = max(end, k["ts"] + k["dur"])
    print(f"GPU busy {busy / (end - first):.0%} of the time from its first kernel to its last")
else:
    print("no GPU kernels in this trace: the GPU lane appears only where CUDA is profiled")
# --8<-- [end:trace]


# --8<-- [start:figure]
COLORS = dict(zip(PHASES, ("#7f7f7f", "#1f77b4", "#d62728", "#2ca02c")))


def phase_of(e):
    middle = e["ts"] + e["dur"] / 2
    return next((r["name"] for r in ranges if r["ts"] <= middle <= r["ts"] + r["dur"]), None)


def short(name):
    return name.removeprefix("autograd::engine::evaluate_function: ").removeprefix("aten::")


def draw(fig, text):
    ax = fig.add_subplot()
    lanes = []                                  # (label, boxes, bar height)
    for n, tid in enumerate(threads):
        who = text["main"] if tid == step["tid"] else text["thread"].format(n)
        if any(r["tid"] == tid for r in ranges):
            lanes.append((who + text["ranges"], [r for r in ranges if r["tid"] == tid], 0.8))
        lanes.append((who + text["ops"], [e for e in top_level if e["tid"] == tid], 0.5))
    for stream in streams or [None]:            # on a CPU: an empty lane that says why
        lanes.append((text["stream"].format(stream) if streams else text["gpu"],
                      [k for k in kernels if k["tid"] == stream], 0.5))
    span = (max([t1] + [k["ts"] + k["dur"] for k in kernels]) - t0) / 1e3
    for row, (label, boxes, height) in enumerate(lanes):
        y = len(lanes) - 1 - row
        for e in boxes:
            left, width = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
            launch = launches.get(e.get("args", {}).get("correlation"))  # a kernel: its launch
            phase = e["name"] if e["name"] in PHASES else phase_of(launch or e)
            ax.barh(y, width, left=left, height=height, color=COLORS.get(phase, "#9467bd"),
                    edgecolor="white", linewidth=0.3)
            if width / span > 0.011 * len(short(e["name"])):     # only where the name fits
                ax.text(left + width / 2, y, short(e["name"]), ha="center", va="center",
                        fontsize=7, color="white")
    if not kernels:
        ax.text(span / 2, 0, text["no_gpu"], ha="center", va="center", fontsize=8)
    ax.set_yticks(range(len(lanes)), [label for label, _, _ in reversed(lanes)], fontsize=8)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlim(0, span)
    ax.set_xlabel(text["x"])
    ax.set_title(text["title"], fontsize=10)
    handles = [ax.barh(0, 0, color=COLORS[p], label=p) for p in PHASES]
    ax.legend(handles=handles, fontsize=7, ncol=4, loc="upper center",
              bbox_to_anchor=(0.5, -0.25), frameon=False)


draw_both("trace", {
    "en": {"main": "main thread", "thread": "thread {}", "ranges": ": record_function",
           "ops": ": top-level ops", "stream": "GPU stream {}: kernels", "gpu": "GPU: kernels",
           "x": "time since ProfilerStep#3 began (ms)",
           "title": "One traced step, drawn from trace.json",
           "no_gpu": "none: this trace was recorded without a GPU"},
    "zh": {"main": "主线程", "thread": "线程 {}", "ranges": "：record_function 区间",
           "ops": "：顶层算子", "stream": "GPU 流 {}：核函数", "gpu": "GPU：核函数",
           "x": "从 ProfilerStep#3 开始算起的时间（ms）",
           "title": "trace.json 中记录的一个训练步骤",
           "no_gpu": "空：记录这份 trace 的机器没有 GPU"},
}, draw, figsize=(7.2, 1.2 + 0.45 * (1 + len(threads) + max(1, len(streams)))))
# --8<-- [end:figure]


# --8<-- [start:nvtx]
if device == "cuda":
    torch.cuda.profiler.start()                 # nsys --capture-range=cudaProfilerApi starts here
    torch.cuda.nvtx.range_push("step (range_push)")
    train_step()
    torch.cuda.nvtx.range_pop()
    with torch.cuda.nvtx.range("step {}", 7):   # the same, as a context manager
        train_step()
    with torch.autograd.profiler.emit_nvtx(record_shapes=True):   # one range per operator
        train_step()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()                  # ... and stops here
    print("NVTX ranges emitted around 3 steps: Nsight Systems and Nsight Compute show them "
          "when they run the script")
else:
    print("NVTX ranges (torch.cuda.nvtx, emit_nvtx): not run here, no CUDA device "
          "for Nsight to trace")
# --8<-- [end:nvtx]
