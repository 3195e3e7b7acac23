"""torch.export and AOTInductor: capture a whole model ahead of time as an ExportedProgram,
what export refuses that torch.compile tolerates, torch.cond, dynamic shapes, and a .pt2
package that AOTInductor compiles, which is loaded back and compared with eager.

Everything before the AOTInductor part needs no compiler. AOTInductor builds C++ with the
system compiler (and, on a GPU, Triton kernels and a wrapper that needs the CUDA toolkit's
headers); where that is missing the script says what is missing and exits 0.
"""
# snippet: timeout=240 cpu-independent
# The CPU profiles skip this file: it asserts what export captures and refuses, and that the
# exported program, the reloaded one and the AOTInductor package compute what the eager model
# computes on the same machine; its timings are printed, never asserted.

import os
import sys
import tempfile
import time
import zipfile
from collections import defaultdict
from pathlib import Path

# One small model needs no pool of compile workers; on a 2-core machine starting that
# pool costs more than it saves. Set before torch is imported.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

# --8<-- [start:setup]
import torch
from _toolchain import exit_if_missing
from torch.export import Dim

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class MLP(torch.nn.Module):
    """Two linear layers: small enough for AOTInductor to compile in seconds."""

    def __init__(self, d_in=16, hidden=32, d_out=4):
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, hidden)
        self.fc2 = torch.nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


model = MLP().to(device).eval()
x = torch.randn(8, 16, device=device)


def aten_ops(ep) -> list[str]:
    """The operations of an exported graph, in order, without the graph's inputs/outputs."""
    names = []
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if isinstance(target, torch._ops.HigherOrderOperator):
            names.append(f"higher_order.{target.name()}")
        else:                   # an ATen OpOverload prints as aten.<op>.<overload>
            names.append(str(target) if isinstance(target, torch._ops.OpOverload) else target.__name__)
    return names
# --8<-- [end:setup]


# --8<-- [start:figure]
sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both  # noqa: E402

LABELS = {
    "en": {"model": "eager model\n(nn.Module)", "compile": "torch.compile",
           "compile_note": "JIT, inside Python;\na graph break falls back to Python",
           "jit_run": "runs in the same\nPython process",
           "export": "torch.export", "export_note": "the whole graph, or an error",
           "ep": "ExportedProgram\n(ATen graph + weights)",
           "aoti": "AOTInductor\naoti_compile_and_package", ".pt2": ".pt2 package\n(.so + metadata)",
           "cpp": "C++\nAOTIModelPackageLoader", "py": "Python\naoti_load_package",
           "top": "just in time: compiles on the first call",
           "bottom": "ahead of time: compiled once, shipped as a file"},
    "zh": {"model": "eager 模式的模型\n（nn.Module）", "compile": "torch.compile",
           "compile_note": "即时编译，在 Python 里；\n图中断处退回 Python",
           "jit_run": "在同一个\nPython 进程里运行",
           "export": "torch.export", "export_note": "整张图，否则报错",
           "ep": "ExportedProgram\n（ATen 图 + 权重）",
           "aoti": "AOTInductor\naoti_compile_and_package", ".pt2": ".pt2 包\n（.so + 元数据）",
           "cpp": "C++\nAOTIModelPackageLoader", "py": "Python\naoti_load_package",
           "top": "即时编译：第一次调用时编译",
           "bottom": "提前编译：只编译一次，以文件形式交付"},
}


def draw(fig, t):
    from matplotlib.patches import FancyBboxPatch

    ax = fig.add_axes([0, 0, 1, 1])
    ax.set(xlim=(0, 12.4), ylim=(-0.2, 6.2))
    ax.axis("off")

    def box(cx, cy, key, color, w, note=None):
        ax.add_patch(FancyBboxPatch((cx - w / 2, cy - 0.45), w, 0.9, boxstyle="round,pad=0.05",
                                    facecolor=color, edgecolor="black", lw=1))
        ax.text(cx, cy, t[key], ha="center", va="center", fontsize=7.5)
        if note:
            ax.text(cx, cy - 0.6, t[note], ha="center", va="top", fontsize=6.5, color="dimgray")
        return cx, cy, w / 2

    def arrow(a, b, side="x"):
        (x0, y0, w0), (x1, y1, w1) = a, b
        if side == "x":       # from a's right edge to b's left edge
            start, end = (x0 + w0 + 0.06, y0), (x1 - w1 - 0.06, y1)
        else:                 # vertical: from a's top or bottom edge to b's
            sign = 1 if y1 > y0 else -1
            start, end = (x0, y0 + sign * 0.52), (x1, y1 - sign * 0.52)
        ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "lw": 1.2})

    model_box = box(1.0, 3.3, "model", "#dddddd", 1.8)
    compiled = box(4.4, 5.1, "compile", "#cfe2f3", 1.7, note="compile_note")
    ran = box(8.3, 5.1, "jit_run", "#cfe2f3", 2.0)
    exported = box(3.3, 1.9, "export", "#d9ead3", 1.5, note="export_note")
    program = box(5.65, 1.9, "ep", "#d9ead3", 2.2)
    aoti = box(8.35, 1.9, "aoti", "#d9ead3", 2.3)
    package = box(11.2, 1.9, ".pt2", "#fff2cc", 1.7)
    python = box(11.2, 3.55, "py", "#fff2cc", 2.0)
    cpp = box(11.2, 0.35, "cpp", "#fff2cc", 2.0)
    for a, b in ((model_box, compiled), (compiled, ran), (model_box, exported),
                 (exported, program), (program, aoti), (aoti, package)):
        arrow(a, b)
    arrow(package, python, side="y")
    arrow(package, cpp, side="y")
    ax.text(0.1, 6.1, t["top"], fontsize=8, fontweight="bold", va="top")
    ax.text(0.1, -0.1, t["bottom"], fontsize=8, fontweight="bold", va="bottom")


draw_both("export_paths", LABELS, draw, figsize=(9.0, 4.4))
# --8<-- [end:figure]


# --8<-- [start:export]
ep = torch.export.export(model, (x,))         # runs forward once on fake tensors
print(f"{type(ep).__name__}: {len(aten_ops(ep))} operations: {', '.join(aten_ops(ep))}")
assert aten_ops(ep) == ["aten.linear.default", "aten.relu.default", "aten.linear.default"]

inputs = ep.graph_signature.input_specs       # parameters became inputs of the graph
for spec in inputs:
    print(f"  graph input {spec.arg.name:14} {spec.kind.name:10} {spec.target or ''}")
assert [s.kind.name for s in inputs] == ["PARAMETER"] * 4 + ["USER_INPUT"]

core = ep.run_decompositions()                # down to the core ATen operator set
print(f"after run_decompositions(): {', '.join(aten_ops(core))}")

with torch.no_grad():
    eager = model(x)
torch.testing.assert_close(ep.module()(x), eager, rtol=0, atol=0)
print(f"ep.module() is a {torch.fx.GraphModule.__name__} and equals eager exactly")

with tempfile.TemporaryDirectory() as tmp:
    torch.export.save(ep, Path(tmp, "mlp_ep.pt2"))   # graph + weights, not compiled code
    size = Path(tmp, "mlp_ep.pt2").stat().st_size
    reloaded = torch.export.load(Path(tmp, "mlp_ep.pt2"))
torch.testing.assert_close(reloaded.module()(x), eager, rtol=0, atol=0)
print(f"torch.export.save: {size:,} bytes, loaded back by torch.export.load, same result")
# --8<-- [end:export]


# --8<-- [start:refuse]
class Gate(torch.nn.Module):
    """Python control flow that depends on the data: the branch depends on x's values."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        if x.sum() > 0:
            return torch.relu(self.fc(x))
        return self.fc(-x)


gate = Gate().to(device).eval()
pos = torch.ones(4, 8, device=device)           # takes the first branch
neg = -pos                                      # takes the second
compiled_gate = torch.compile(gate, backend="eager")   # Dynamo only, no code generated
with torch.no_grad():
    for inp in (pos, neg):
        torch.testing.assert_close(compiled_gate(inp), gate(inp), rtol=0, atol=0)
report = torch._dynamo.explain(gate)(pos)
print(f"torch.compile runs it: {report.graph_count} graphs, {report.graph_break_count} graph "
      f"break ({report.break_reasons[0].reason.splitlines()[0]})")
assert report.graph_break_count == 1


def first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"


for strict in (False, True):
    try:
        torch.export.export(gate, (pos,), strict=strict)
        raise AssertionError("torch.export accepted data-dependent control flow")
    except (torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode,
            torch._dynamo.exc.Unsupported) as error:
        print(f"torch.export(strict={strict}) refuses it: {first_line(error)}")
# --8<-- [end:refuse]


# --8<-- [start:cond]
class GateCond(Gate):
    def forward(self, x):
        return torch.cond(x.sum() > 0,                     # a tensor predicate
                          lambda x: torch.relu(self.fc(x)),  # both branches become subgraphs
                          lambda x: self.fc(-x),
                          (x,))


gate_cond = GateCond().to(device).eval()
gate_cond.load_state_dict(gate.state_dict())
ep_cond = torch.export.export(gate_cond, (pos,))
print(f"exported with torch.cond: {', '.join(aten_ops(ep_cond))}")
print(f"  subgraphs: {', '.join(name for name, _ in ep_cond.graph_module.named_children())}")
with torch.no_grad():
    for name, inp in (("x.sum() > 0", pos), ("x.sum() <= 0", neg)):
        torch.testing.assert_close(ep_cond.module()(inp), gate(inp), rtol=0, atol=0)
        print(f"  branch for {name}: equals eager")
# --8<-- [end:cond]


# --8<-- [start:dynamic]
batch = Dim("batch", min=2, max=64)
ep_dyn = torch.export.export(model, (x,), dynamic_shapes={"x": {0: batch}})
(symbol, bounds), = ep_dyn.range_constraints.items()
shape = ep_dyn.graph.find_nodes(op="placeholder")[-1].meta["val"].shape
print(f"input x: {list(shape)}, {symbol} in [{bounds.lower}, {bounds.upper}]")
assert (bounds.lower, bounds.upper) == (2, 64)

dyn_module = ep_dyn.module()
with torch.no_grad():
    for n in (3, 64):
        xn = torch.randn(n, 16, device=device)
        torch.testing.assert_close(dyn_module(xn), model(xn), rtol=0, atol=0)
        print(f"  batch {n}: equals eager")
for bad in (torch.randn(65, 16, device=device), torch.randn(4, 17, device=device)):
    try:
        dyn_module(bad)
        raise AssertionError(f"the exported module accepted shape {list(bad.shape)}")
    except AssertionError as error:
        if not str(error).startswith("Guard failed"):
            raise
        print(f"  shape {list(bad.shape)} refused: {first_line(error)}")
# --8<-- [end:dynamic]

# Off the page: AOTInductor precompiles the headers its wrapper includes, about 10 s of a core
# on a machine's first compile, and keeps them in /tmp/torchinductor_<user>, not in
# TORCHINDUCTOR_CACHE_DIR, under a name that follows the compiler's flags (a new virtual
# environment's include paths give a new pair of about 150 MB each; torch/_inductor/codecache.py,
# _HEADER_DIR). For one small model that costs more than it saves.
torch._inductor.config.aot_inductor.precompile_headers = False


# --8<-- [start:aoti]
def kind_of(name: str) -> tuple[str, str]:
    """(kind, short name) of a member of the archive; the folders and hashes left out."""
    for suffix, kind in ((".so", "shared library"), (".cpp", "C++ source"),
                         (".cubin", "GPU kernel binary"), (".json", "metadata")):
        if name.endswith(suffix):
            return kind, name.rsplit("/", 1)[-1].split(".", 1)[-1]   # <hash>.wrapper.so
    return "archive bookkeeping", name.split("/", 1)[-1]           # mlp/archive_format


with tempfile.TemporaryDirectory() as tmp:
    package = Path(tmp, "mlp.pt2")
    start = time.perf_counter()
    try:
        torch._inductor.aoti_compile_and_package(ep_dyn, package_path=str(package))
    except Exception as error:
        exit_if_missing(error, "AOTInductor could not build the package",
                        "It needs a C++ compiler (g++ or clang++, through CXX) for a CPU; for a GPU, "
                        "Triton and the CUDA toolkit's headers (CUDA_HOME) too. Not run: the .pt2 part.")
        raise
    compile_s = time.perf_counter() - start
    print(f"aoti_compile_and_package: {compile_s:.1f} s, {package.name} is "
          f"{package.stat().st_size / 2**20:.1f} MiB")

    groups = defaultdict(list)                      # kind -> [(short name, bytes)]
    with zipfile.ZipFile(package) as archive:       # a .pt2 is a zip archive
        for info in archive.infolist():
            kind, short = kind_of(info.filename)
            groups[kind].append((short, info.file_size))
    for kind, members in groups.items():
        files = f"{len(members)} file{'s' if len(members) > 1 else ''},"
        print(f"  {kind:20} {files:8} {sum(size for _, size in members):>9,} bytes: "
              f"{', '.join(sorted(short for short, _ in members))}")
    assert len(groups["shared library"]) == 1

    os.environ["AOTI_RUNTIME_CHECK_INPUTS"] = "1"   # read once, at the package's first call
    loaded = torch._inductor.aoti_load_package(str(package))
    meta = loaded.get_metadata()
    gpu = f", compute capability {meta['AOTI_COMPUTE_CAPABILITY']}" if device == "cuda" else ""
    print(f"  built for: {meta['AOTI_DEVICE_KEY']}, {meta['AOTI_PLATFORM']} {meta['AOTI_MACHINE']}, "
          f"CPU ISA '{meta['AOTI_CPU_ISA']}'{gpu}")
    with torch.no_grad():
        for n in (3, 64):
            xn = torch.randn(n, 16, device=device)
            torch.testing.assert_close(loaded(xn), model(xn), rtol=1e-5, atol=1e-5)
            print(f"  aoti_load_package(...)(batch {n}): equals eager within 1e-5")
    try:
        loaded(torch.randn(65, 16, device=device))
        raise AssertionError("the package accepted a batch of 65")
    except RuntimeError as error:
        print(f"  batch 65 refused by the package: {first_line(error)}")
# --8<-- [end:aoti]
