"""One operation, relu(x + y), made into PyTorch operators two ways: a Triton kernel through
torch.library.triton_op, whose kernel torch.compile sees, and a C++ kernel registered with
TORCH_LIBRARY and built by torch.utils.cpp_extension.load_inline, which compile treats as opaque."""
# snippet: timeout=180 cpu-independent
# The CPU profiles skip this file: it asserts what the graphs contain, which kernels are
# registered, and that every kernel computes exactly what relu(x + y) computes (one rounded
# addition, then an exact comparison); the compiler's time is printed, never asserted.

# --8<-- [start:triton-op]
import logging
import os
import re
import sys
import time

import torch
from torch.library import triton_op, wrap_triton

device = "cuda" if torch.cuda.is_available() else "cpu"
os.environ.pop("TRITON_INTERPRET", None)  # the interpreter (Triton page) cannot be traced
try:
    import triton
    import triton.language as tl
except ImportError as error:  # no triton wheel for macOS or Windows
    triton = None
    print(f"triton cannot be imported here ({error}): the Triton part of this page did not run.")

if triton is not None:
    @triton.jit
    def add_relu_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        s = tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, tl.where(s < 0, 0.0, s), mask=mask)

    def launch_add_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        torch._check(x.shape == y.shape, lambda: "x and y must have the same shape")
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        grid = (triton.cdiv(x.numel(), 1024),)
        wrap_triton(add_relu_kernel)[grid](x, y, out, x.numel(), BLOCK=1024)
        return out

    @triton_op("site_kernel_ops::add_relu_triton", mutates_args=())
    def add_relu_triton(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return launch_add_relu(x, y)

    print("registered:", add_relu_triton._opoverload._schema)
# --8<-- [end:triton-op]


def first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"


def call_ops(gm: torch.fx.GraphModule) -> list[str]:
    """The operators a graph calls, in order, less the getitems that unpack a result."""
    return [str(n.target) for n in gm.graph.nodes
            if n.op == "call_function" and "getitem" not in str(n.target)]


# --8<-- [start:triton-graph]
from functools import partial

from torch._dynamo.backends.debugging import aot_eager

from _toolchain import missing_toolchain  # snippets/compile/_toolchain.py

forward = {}


def record_forward(gm, example_inputs):  # AOTAutograd's forward graph, run as it is
    forward["graph"] = gm
    return gm


record = partial(aot_eager, fw_compiler=record_forward)  # aot_eager, keeping the graph


def block(x, y):
    return add_relu_triton(x, y) * 2


if device == "cpu" and triton is not None:  # torch cannot compile the kernel to read what it
    logging.getLogger("torch._dynamo").addFilter(  # writes (no GPU target), and warns at length
        lambda r: "identify_accessed_tensors" not in r.getMessage())
torch.manual_seed(0)
x, y = torch.randn(10_000, device=device), torch.randn(10_000, device=device)
compiled = torch.compile(block, backend=record, fullgraph=True)
ran = {}
for label, fn in (("eager", block), ("compiled", compiled)) if triton is not None else ():
    try:
        ran[label] = torch.equal(fn(x, y), torch.relu(x + y) * 2)
        print(f"{label} call on {device}: equal to relu(x + y) * 2: {ran[label]}")
    except Exception as error:  # on a CPU: Triton has no target to run the kernel on
        if device == "cuda" and missing_toolchain(error) is None:
            raise
        ran[label] = missing_toolchain(error) or first_line(error)
        print(f"{label} call on {device}: {ran[label]}")
        if device == "cuda":  # Triton could not build its launcher (the Triton page)
            triton = None
            break
if triton is not None:
    assert set(ran.values()) == {True} if device == "cuda" else True not in ran.values()
    print("forward graph:", ", ".join(call_ops(forward["graph"])))
    wrapper = next(n for n in forward["graph"].graph.nodes if "triton" in str(n.target))
    print("  the kernel's arguments that torch treats as written:",
          wrapper.kwargs["tensors_to_clone"])
    assert "triton_kernel_wrapper_functional" in call_ops(forward["graph"])
    assert device == "cuda" or wrapper.kwargs["tensors_to_clone"] == ["x_ptr", "y_ptr", "out_ptr"]
# --8<-- [end:triton-graph]


# --8<-- [start:cpu-kernel]
if triton is not None:
    @add_relu_triton.register_kernel("cpu")
    def _(x, y):
        return torch.relu(x + y)

    a, b = torch.randn(1000), torch.randn(1000)
    same = torch.equal(add_relu_triton(a, b), torch.relu(a + b))
    print(f"with register_kernel('cpu'), eager on cpu: equal to relu(a + b): {same}")
    torch._dynamo.reset()
    try:
        torch.compile(block, backend=record, fullgraph=True)(a, b)
        outcome = "ran"
    except Exception as error:
        outcome = first_line(error)
    print(f"  compiled on cpu: {outcome}")
    print("  its forward graph:", ", ".join(call_ops(forward["graph"])))
    assert same and "triton_kernel_wrapper_functional" in call_ops(forward["graph"])
    assert outcome != "ran" or device == "cuda"  # it launches the Triton kernel on CPU tensors
# --8<-- [end:cpu-kernel]


# --8<-- [start:anywhere]
if triton is not None:
    @triton_op("site_kernel_ops::add_relu_anywhere", mutates_args=())
    def add_relu_anywhere(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cuda":  # no Triton kernel here: operators that compile traces
            return torch.relu(x + y)
        return launch_add_relu(x, y)

    torch._dynamo.reset()
    anywhere = torch.compile(lambda x, y: add_relu_anywhere(x, y) * 2, backend=record,
                             fullgraph=True)
    same = torch.equal(anywhere(a, b), torch.relu(a + b) * 2)
    print(f"add_relu_anywhere, compiled on cpu: equal to relu(a + b) * 2: {same}")
    print("  its forward graph:", ", ".join(call_ops(forward["graph"])))
    assert same and call_ops(forward["graph"]) == ["aten.add.Tensor", "aten.relu.default",
                                                   "aten.mul.Tensor"]
# --8<-- [end:anywhere]


# --8<-- [start:inductor]
if triton is not None and device == "cuda":
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    out, (code, *_) = run_and_get_code(torch.compile(block), x, y)  # Inductor
    assert torch.equal(out, torch.relu(x + y) * 2)
    names = re.findall(r"async_compile\.triton\('(\w+)'", code)
    print("Triton kernels in Inductor's output code:", ", ".join(names))
    assert any(name.startswith("add_relu_kernel") for name in names)
elif triton is not None:
    print("Inductor with the Triton kernel: not run here, no CUDA device")
# --8<-- [end:inductor]


# --8<-- [start:cpp-source]
CPP = r"""
#include <torch/library.h>

at::Tensor add_relu_cpu(const at::Tensor& x, const at::Tensor& y) {
  TORCH_CHECK(x.sizes() == y.sizes(), "add_relu: x and y must have the same shape");
  TORCH_CHECK(x.scalar_type() == at::kFloat && y.scalar_type() == at::kFloat,
              "add_relu: float32 only");
  at::Tensor xc = x.contiguous(), yc = y.contiguous();
  at::Tensor out = xc.new_empty(xc.sizes());
  const float* a = xc.const_data_ptr<float>();
  const float* b = yc.const_data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    float s = a[i] + b[i];
    o[i] = s < 0.0f ? 0.0f : s;  // a NaN stays NaN, as in torch.relu
  }
  return out;
}

TORCH_LIBRARY(site_kernel_ops, m) {
  m.def("add_relu(Tensor x, Tensor y) -> Tensor");
}

TORCH_LIBRARY_IMPL(site_kernel_ops, CPU, m) {
  m.impl("add_relu", &add_relu_cpu);
}
"""
# --8<-- [end:cpp-source]


# --8<-- [start:cuda-source]
CUDA = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

__global__ void add_relu_kernel(const float* x, const float* y, float* out, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // one thread per element
  if (i < n) {
    float s = x[i] + y[i];
    out[i] = s < 0.0f ? 0.0f : s;
  }
}

at::Tensor add_relu_cuda(const at::Tensor& x, const at::Tensor& y) {
  TORCH_CHECK(x.sizes() == y.sizes(), "add_relu: x and y must have the same shape");
  TORCH_CHECK(x.scalar_type() == at::kFloat && y.scalar_type() == at::kFloat,
              "add_relu: float32 only");
  TORCH_CHECK(x.device() == y.device(), "add_relu: x and y must be on the same GPU");
  const c10::cuda::CUDAGuard guard(x.device());  // launch on x's GPU, in its current stream
  at::Tensor xc = x.contiguous(), yc = y.contiguous();
  at::Tensor out = xc.new_empty(xc.sizes());
  int64_t n = out.numel();
  if (n > 0) {
    int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    add_relu_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.const_data_ptr<float>(), yc.const_data_ptr<float>(),
        out.mutable_data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return out;
}

TORCH_LIBRARY_IMPL(site_kernel_ops, CUDA, m) {
  m.impl("add_relu", &add_relu_cuda);
}
"""
# --8<-- [end:cuda-source]


# --8<-- [start:toolchain]
import shutil
import subprocess

from torch.utils import cpp_extension


def put_pip_ninja_on_path() -> None:
    """torch runs `ninja` from PATH. pip's ninja package puts it beside the venv's python,
    which is on PATH only while the venv is activated."""
    if shutil.which("ninja") is None:
        try:
            import ninja
        except ImportError:
            return
        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


put_pip_ninja_on_path()
compiler = cpp_extension.get_cxx_compiler()  # $CXX, else c++ (cl on Windows)
missing = [what for what, found in (
    (f"C++ compiler {compiler} ($CXX, else c++)", shutil.which(compiler)),
    ("ninja on PATH", cpp_extension.is_ninja_available())) if not found]
if missing:
    print(f"load_inline cannot build the C++ operator here: no {' and no '.join(missing)}.")
    print("A C++ extension needs a C++ compiler (g++ or clang++; MSVC on Windows) and ninja "
          "(pip install ninja). Not run: the C++ part of this page.")
    sys.exit(0)
version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
print(f"C++ compiler: {compiler}, {version.splitlines()[0]}; "
      f"ninja {subprocess.check_output(['ninja', '--version'], text=True).strip()}")
# --8<-- [end:toolchain]


def remove_stale_lock(name: str, older_than_s: float = 600) -> None:
    """load_inline waits, with no time limit, for the file `lock` in its build folder to go
    away; a build that was killed (a timeout, SIGKILL) leaves it there. No build takes 10 min."""
    lock = os.path.join(cpp_extension._get_build_directory(name, verbose=False), "lock")
    try:
        if time.time() - os.path.getmtime(lock) > older_than_s:
            os.remove(lock)
    except FileNotFoundError:
        pass


# --8<-- [start:build]
def build(with_cuda: bool) -> str:
    """Compile and load the extension, if its sources changed; print what it cost."""
    name = "site_kernel_ops_cuda" if with_cuda else "site_kernel_ops"
    remove_stale_lock(name)
    start = time.time()
    library = cpp_extension.load_inline(
        name, cpp_sources=[CPP], cuda_sources=[CUDA] if with_cuda else None,
        is_python_module=False,    # a plain shared library, loaded by torch.ops.load_library
        no_implicit_headers=True)  # without torch/extension.h (all of torch, pybind11)
    built = os.path.getmtime(library) >= start
    print(f"load_inline: {time.time() - start:.1f} s, "
          f"{'built now' if built else 'nothing to rebuild'}: "
          f"{library.replace(os.path.expanduser('~'), '~', 1)}")
    return library


nvcc = os.path.join(cpp_extension.CUDA_HOME or "", "bin", "nvcc")
with_cuda = device == "cuda" and os.path.isfile(nvcc)
if device == "cuda" and not with_cuda:
    print(f"no nvcc (CUDA_HOME: {cpp_extension.CUDA_HOME}): the CUDA kernel is left out")
try:
    build(with_cuda)
except RuntimeError as error:  # nvcc failed: its messages go to stderr
    if not with_cuda:
        raise
    print(error, file=sys.stderr)
    print("nvcc could not build the CUDA kernel (its messages are in stderr): it is left out")
    with_cuda = False
    build(with_cuda)
# --8<-- [end:build]


def kernels_of(op: str) -> list[tuple[str, str]]:
    """(dispatch key, source file) of each kernel that the dispatcher holds for op."""
    table = torch._C._dispatch_dump(op)
    return [(key, os.path.basename(where))
            for key, where in re.findall(r"^(\w+): registered at (\S+?):\d+ ::", table, re.M)]


# --8<-- [start:call]
add_relu = torch.ops.site_kernel_ops.add_relu
kernels = kernels_of("site_kernel_ops::add_relu")
print("registered:", add_relu.default._schema)
print("  kernels:", ", ".join(f"{key} (from {where})" for key, where in kernels))
assert {key for key, _ in kernels} == ({"CPU", "CUDA"} if with_cuda else {"CPU"})
cpp_device = device if with_cuda else "cpu"
for where in sorted({"cpu", cpp_device}):
    x, y = torch.randn(10_000, device=where), torch.randn(10_000, device=where)
    same = torch.equal(add_relu(x, y), torch.relu(x + y))
    print(f"torch.ops.site_kernel_ops.add_relu on {where}: equal to relu(x + y): {same}")
    assert same
# --8<-- [end:call]


# --8<-- [start:fake]
def block_cpp(x, y):
    return add_relu(x, y) * 2


x, y = torch.randn(10_000, device=cpp_device), torch.randn(10_000, device=cpp_device)
torch._dynamo.reset()
try:
    torch.compile(block_cpp, backend="aot_eager", fullgraph=True)(x, y)
    unsupported = None
except torch._dynamo.exc.Unsupported as error:
    unsupported = error
    print("compiled before register_fake:", first_line(error))
assert "does not support running with fake tensors" in str(unsupported)


@torch.library.register_fake("site_kernel_ops::add_relu")
def _(x, y):
    torch._check(x.shape == y.shape, lambda: "x and y must have the same shape")
    return x.new_empty(x.shape)  # what the kernel returns, without its values


torch._dynamo.reset()
same = torch.equal(torch.compile(block_cpp, backend=record, fullgraph=True)(x, y),
                   torch.relu(x + y) * 2)
print(f"after register_fake, compiled with fullgraph=True: equal to relu(x + y) * 2: {same}")
print("  forward graph:", ", ".join(call_ops(forward["graph"])))
print("  kernels:", ", ".join(f"{key} (from {where})"
                             for key, where in kernels_of("site_kernel_ops::add_relu")))
assert same and call_ops(forward["graph"]) == ["site_kernel_ops.add_relu.default",
                                               "aten.mul.Tensor"]
# --8<-- [end:fake]
