"""Hangs, crashes and restarts: which rank is stuck, on which collective; how torchrun restarts.

Part 1. Two gloo ranks on 127.0.0.1 train three steps. In step 2, rank 1 hangs in its
input pipeline, so rank 0 waits in all_reduce. Four tools find the culprit: the group's
timeout (rank 0 raises, without saying who is missing), a faulthandler stack dump of each
rank, the Flight Recorder (each rank's collectives by sequence number, read by torch's
analyser torchfrtrace), and TORCH_DISTRIBUTED_DEBUG=DETAIL (each collective is compared
across ranks before it runs).
Part 2. torchrun --max-restarts=1 runs _restart_worker.py with 2 workers. In the first
attempt rank 1 dies by SIGKILL in step 3; torchrun restarts both workers, which resume from
the last checkpoint. The final parameters must equal, bit for bit, those of a run that
never crashed. No process of either part may outlive the script, even when it is killed.
"""
# snippet: timeout=180 cpu-independent
# The CPU profiles skip this file: what it shows is how processes behave (timeouts, stacks,
# restarts), which no CPU kernel or thread count changes; its arithmetic, a few tiny
# matmuls, runs the same way in the workers and in the reference computed here.

# --8<-- [start:setup]
import faulthandler
import io
import json
import linecache
import logging
import multiprocessing
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import _restart_worker as worker  # the training script that torchrun runs in part 2
from ddp import LOOPBACK, host_store, join_store

sys.path.append(str(Path(__file__).resolve().parents[1]))  # snippets/: the shared figure helper
from _figures import draw_both

HERE = Path(__file__).resolve()
MAIN = __name__ == "__main__"  # False in the ranks, which import this file
# --8<-- [end:setup]


# --8<-- [start:hang]
GROUP_TIMEOUT = timedelta(seconds=2)  # how long a collective may wait (default: 30 min)
STEP_DEADLINE = 1.0  # seconds: a slower step dumps the Python stack of every thread


def load_batch(rank, step, store):
    """Rank 1's input pipeline hangs in step 2, as a stuck read from a file system would."""
    if rank == 1 and step == 2:
        store.wait(["rank 0 gave up"], timedelta(seconds=60))  # the demo ends the hang
        return None
    return torch.full((4,), float(step))


def exit_with_parent():
    """If this script dies, even by SIGKILL, its ranks end too: spawn's parent sentinel."""
    parent = multiprocessing.parent_process()
    threading.Thread(target=lambda: (parent.join(), os._exit(1)), daemon=True).start()


def meet(store, rank, name):
    """Wait until both ranks got here: a short timeout must not count a slow start-up."""
    store.set(f"{name} {rank}", "here")
    store.wait([f"{name} 0", f"{name} 1"], timedelta(seconds=60))


def stuck_job(rank, world_size, port, folder):
    exit_with_parent()
    store = join_store(port)
    meet(store, rank, "start")
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                            timeout=GROUP_TIMEOUT)
    stacks = open(folder / f"stacks_{rank}.txt", "w")
    for step in range(3):
        faulthandler.dump_traceback_later(STEP_DEADLINE, file=stacks)  # a step watchdog
        batch = load_batch(rank, step, store)
        if batch is None:
            break
        start = time.perf_counter()
        try:
            dist.all_reduce(batch)  # in step 2, rank 0 waits here for rank 1 ...
        except RuntimeError as error:  # ... until GROUP_TIMEOUT has passed
            said = dict(error=f"{type(error).__name__}: {error}",
                        waited=time.perf_counter() - start, step=step)
            (folder / "timeout.json").write_text(json.dumps(said))
            break
        finally:
            faulthandler.cancel_dump_traceback_later()
    faulthandler.cancel_dump_traceback_later()
    stacks.close()
    # The Flight Recorder's ring buffer: the collectives this rank issued (a private API)
    (folder / f"fr_rank_{rank}").write_bytes(torch._C._distributed_c10d._dump_fr_trace())
    if rank == 0:
        store.set("rank 0 gave up", "yes")
    checked_by_detail(rank, store, folder)
    dist.destroy_process_group()  # all groups, the failed ones too
# --8<-- [end:hang]


# --8<-- [start:detail]
def checked_by_detail(rank, store, folder):
    """What TORCH_DISTRIBUTED_DEBUG=DETAIL adds: every collective is compared across ranks."""
    meet(store, rank, "detail")
    dist.set_debug_level(dist.DebugLevel.DETAIL)  # the variable, read at import, sets this
    checked = dist.new_group(timeout=timedelta(seconds=1))  # made now: it gets the checks
    errors = {}
    try:
        dist.all_reduce(torch.ones(4 + rank), group=checked)  # shapes [4] and [5]
    except RuntimeError as error:
        errors["shapes"] = f"{type(error).__name__}: {error}"
    if rank == 0:
        try:
            dist.all_reduce(torch.ones(4), group=checked)  # rank 1 never calls this one
        except RuntimeError as error:
            errors["missing"] = f"{type(error).__name__}: {error}"
        store.set("rank 0 checked", "yes")
    else:
        store.wait(["rank 0 checked"], timedelta(seconds=60))
    (folder / f"detail_{rank}.json").write_text(json.dumps(errors))
# --8<-- [end:detail]


# --8<-- [start:run-hang]
def run_ranks(fn, nprocs, folder, limit=60):
    """fn(rank, nprocs, store_port, folder) in nprocs processes; none outlives this call."""
    store, listener = host_store()  # a TCPStore on 127.0.0.1, port chosen by the OS
    ranks = mp.start_processes(fn, args=(nprocs, store.port, folder), nprocs=nprocs,
                               join=False, start_method="spawn")
    try:
        deadline = time.monotonic() + limit
        while not ranks.join(timeout=0.2):  # raises if a rank failed
            assert time.monotonic() < deadline, f"the ranks took longer than {limit} s"
    finally:
        for p in ranks.processes:  # on any error: SIGTERM, then SIGKILL
            if p.is_alive():
                p.terminate()
                p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
    return [p.exitcode for p in ranks.processes]


if MAIN:
    # `timeout`, a scheduler or Ctrl-C stop this script with SIGTERM or SIGINT: unwind, so
    # that every `finally` below stops the processes it started
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", LOOPBACK)  # gloo's sockets on loopback
    work = tempfile.TemporaryDirectory(prefix="debugging_")
    folder = Path(work.name)
    exitcodes = run_ranks(stuck_job, 2, folder)
    said = json.loads((folder / "timeout.json").read_text())
    short = said["error"].split("] ", 1)[-1]  # without gloo's source file and line
    print(f"rank 0, step {said['step']}, after {said['waited']:.1f} s in all_reduce: "
          f"{said['error'].split(':')[0]}: {short}")
    assert said["error"].startswith("RuntimeError") and "Timed out" in said["error"]
    assert said["step"] == 2 and said["waited"] >= GROUP_TIMEOUT.total_seconds() * 0.9
# --8<-- [end:run-hang]


# --8<-- [start:stacks]
def last_dump(path):
    """The frames, innermost first, of the training thread in the last dump of a file."""
    threads = path.read_text().split("Timeout (")[-1].split("\n\n")
    training = [thread for thread in threads if " in stuck_job" in thread][0]
    return re.findall(r'File "(.+)", line (\d+) in (\S+)', training)


def show(frames):
    for filename, line, function in frames:
        if filename == str(HERE):  # our own code: show the line itself
            code = linecache.getline(filename, int(line)).split("  #")[0].strip()
            print(f"    {function:<11} {HERE.name}:{line}  {code}")
        elif (filename, line, function) == frames[0]:  # the innermost frame, in torch
            print(f"    {function:<11} {Path(filename).parent.name}/{Path(filename).name}")


if MAIN:
    stacks = {rank: last_dump(folder / f"stacks_{rank}.txt") for rank in (0, 1)}
    for rank, frames in stacks.items():
        print(f"rank {rank}, {STEP_DEADLINE:.0f} s into step 2, innermost frame first:")
        show(frames)
    assert stacks[0][0][2] == "all_reduce" and stacks[0][2][2] == "stuck_job"
    assert stacks[1][0][2] == "load_batch" and stacks[1][1][2] == "stuck_job"
# --8<-- [end:stacks]


# --8<-- [start:flight]
if MAIN:
    dumps = {r: pickle.loads((folder / f"fr_rank_{r}").read_bytes()) for r in (0, 1)}
    for rank, dump in dumps.items():
        calls = dump["entries"]
        last = calls[-1]
        ours = [f for f in last["frames"] if f["filename"] == str(HERE)][0]
        print(f"Flight Recorder, rank {rank}: {len(calls)} collectives issued, the last "
              f"#{last['collective_seq_id']} {last['profiling_name']} {last['input_sizes']} "
              f"from {ours['name']} ({HERE.name}:{ours['line']})")
    seq = {r: [c["collective_seq_id"] for c in d["entries"]] for r, d in dumps.items()}
    assert seq == {0: [1, 2, 3], 1: [1, 2]}, seq
# --8<-- [end:flight]


# --8<-- [start:analyser]
def torchfrtrace(dumps, directory):
    """torch's analyser (the `torchfrtrace` command) on one dump file per rank."""
    directory.mkdir()
    renamed = False
    for rank, dump in dumps.items():
        names = {entry["process_group"][0] for entry in dump["entries"]}  # e.g. {"0"}
        config = dump["pg_config"]
        if "" in config and not names & config.keys():  # gloo, torch 2.13: see the page
            config.update({name: dict(config.pop(""), name=name) for name in names})
            renamed = True
        (directory / f"rank_{rank}").write_bytes(pickle.dumps(dump))
    from torch.distributed.flight_recorder.components.fr_logger import FlightRecorderLogger
    log, text = FlightRecorderLogger().logger, io.StringIO()  # it logs to stderr: capture
    handlers, log.handlers = log.handlers, [logging.StreamHandler(text)]
    try:
        from torch.distributed.flight_recorder.fr_trace import main
        main([str(directory)])
    finally:
        log.handlers = handlers
    return text.getvalue(), renamed


if MAIN:
    report, renamed = torchfrtrace(dumps, folder / "traces")
    if renamed:
        print("(pg_config of the gloo dumps was keyed by '', renamed to the group's name)")
    for line in report.splitlines():
        if line.startswith(("Not all ranks", "collective:", "missing ranks")):
            print("torchfrtrace:", line.strip())
    assert "missing ranks: {1}" in report and "sequence number: 3" in report
# --8<-- [end:analyser]


# --8<-- [start:run-detail]
if MAIN:
    detail = json.loads((folder / "detail_0.json").read_text())
    mismatch = re.search(r"^(\w+: Detected mismatch between collectives on ranks)\..*"
                         r"(Collectives differ in the following aspects:.*)$",
                         detail["shapes"], re.S)
    print("DETAIL, shapes [4] and [5]:", mismatch[1], "...", " ".join(mismatch[2].split()))
    print("DETAIL, rank 1 skips a collective:", detail["missing"])
    assert "TensorShape=[4]" in detail["shapes"] and "TensorShape=[5]" in detail["shapes"]
    assert "Ranks 1 failed to pass monitoredBarrier" in detail["missing"]
    assert exitcodes == [0, 0]
# --8<-- [end:run-detail]


# --8<-- [start:torchrun]
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(folder):
    """`torchrun --max-restarts=1 ...` in a session of its own, and its output."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
               "--nproc-per-node=2", "--max-restarts=1", "--rdzv-backend=c10d",
               f"--rdzv-endpoint=127.0.0.1:{free_port()}",
               f"--log-dir={folder / 'logs'}",  # else a torchelastic_* folder stays in /tmp
               str(HERE.with_name("_restart_worker.py")), str(folder)]
    env = dict(os.environ, GLOO_SOCKET_IFNAME=LOOPBACK, LOGLEVEL="INFO",  # log restarts
               TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")  # a fresh store per attempt
    job = subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, start_new_session=True,
                           preexec_fn=worker.die_with_parent)  # the script killed: it too
    try:
        out, log = job.communicate(timeout=120)
    finally:
        if job.poll() is None:  # timeout or SIGTERM: torchrun stops its workers first
            os.killpg(job.pid, signal.SIGTERM)
            try:
                job.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)  # its workers die with it (above)
                job.wait()
    assert job.returncode == 0, log[-3000:]
    return out, log


if MAIN:
    job = folder / "job"
    job.mkdir()
    launched = time.time()
    _, log = torchrun(job)
    keep = ("closing signal", "failed (exitcode", "Worker group FAILED", "restart_count=",
            "successfully finished")
    story = []
    for line in log.splitlines():
        if line[:1] in "IWE" and "] " in line and any(k in line for k in keep):
            message = line.split("] ", 1)[1].strip()
            message = re.sub(r"(process |pid: )\d+", r"\1<pid>", message)
            story.append(re.sub(r"of binary: .*", "of binary: <python>", message))
            print("torchrun:", story[-1])
    told = "\n".join(story)
    assert "failed (exitcode: -9) local_rank: 1" in told and "1/1 attempts left" in told
    assert "restart_count=1" in told and "successfully finished" in told
# --8<-- [end:torchrun]


# --8<-- [start:resume]
def uninterrupted(world_size=2):
    """The same training in one process, without a crash: the reference."""
    model = worker.make_model()
    for step in range(worker.STEPS):
        gradients = [worker.local_gradient(model, step, r) for r in range(world_size)]
        worker.sgd_step(model, torch.stack(gradients).sum(0) / world_size)
    return model.state_dict()


if MAIN:
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]

    def steps(attempt, rank, kind="step"):
        return [e["step"] for e in events
                if (e["attempt"], e["rank"], e["event"]) == (attempt, rank, kind)]

    assert steps(0, 0) == steps(0, 1) == [0, 1, 2] and steps(0, 1, "crash") == [3]
    assert steps(1, 0, "resume") == steps(1, 1, "resume") == [2]
    assert steps(1, 0) == steps(1, 1) == [3, 4, 5]
    print("attempt 0 (TORCHELASTIC_RESTART_COUNT=0): ranks 0 and 1 ran steps 0-2, "
          "rank 1 was killed (SIGKILL) in step 3")
    print("attempt 1 (TORCHELASTIC_RESTART_COUNT=1): both loaded the checkpoint of step 2 "
          "and ran steps 3-5")
    final, reference = torch.load(job / "final.pt"), uninterrupted()
    same = all(torch.equal(final[name], reference[name]) for name in reference)
    print(f"final parameters == those of a run that never crashed, bit for bit: {same}")
    assert same
# --8<-- [end:resume]


# --8<-- [start:figure]
LABELS = {
    "en": dict(title="torchrun --max-restarts=1: a crash, a restart, a resume",
               x="seconds since torchrun started", rank="rank {}",
               startup="start-up (Python, import torch, process group)",
               a0="step, attempt 0", a1="step, attempt 1", crash="rank 1 killed (SIGKILL)",
               restart="torchrun stops rank 0 and restarts both",
               resume="resume from the checkpoint of step {}"),
    "zh": dict(title="torchrun --max-restarts=1：崩溃、重启、断点续训",
               x="自 torchrun 启动起的秒数", rank="rank {}",
               startup="启动（Python、import torch、进程组）",
               a0="第 0 次尝试的训练步", a1="第 1 次尝试的训练步", crash="rank 1 被 SIGKILL 杀死",
               restart="torchrun 停掉 rank 0，重启两个工作进程",
               resume="从第 {} 步的检查点续训"),
}


def t(seconds):
    return seconds - launched  # since torchrun was started


def draw(fig, text):
    ax = fig.subplots()
    colors = {0: "tab:blue", 1: "tab:green"}
    for e in events:
        y = 1 - e["rank"]
        if e["event"] in ("ready", "resume"):
            begin = [s["start"] for s in events if (s["attempt"], s["rank"], s["event"])
                     == (e["attempt"], e["rank"], "start")][0]
            ax.barh(y, t(e["end"]) - t(begin), left=t(begin), height=0.35, color="0.8",
                    label=text["startup"])
        elif e["event"] in ("step", "crash"):
            ax.barh(y, t(e["end"]) - t(e["start"]), left=t(e["start"]), height=0.35,
                    color=colors[e["attempt"]], label=text[f"a{e['attempt']}"])
            ax.text((t(e["start"]) + t(e["end"])) / 2, y + 0.24, str(e["step"]),
                    ha="center", fontsize=7)
    crash = [e for e in events if e["event"] == "crash"][0]
    ax.plot(t(crash["end"]), 0, "x", color="tab:red", markersize=11, mew=2.5,
            label=text["crash"])
    restarted = min(e["start"] for e in events if e["attempt"] == 1)
    ax.axvspan(t(crash["end"]), t(restarted), color="tab:red", alpha=0.08,
               label=text["restart"])
    first = min((e for e in events if e["event"] == "step" and e["attempt"] == 1),
                key=lambda e: e["start"])
    ax.annotate(text["resume"].format(first["step"] - 1), (t(first["start"]), 1.18),
                xytext=(t(restarted) - 0.3, 1.55), fontsize=8,
                arrowprops=dict(arrowstyle="->", color="0.3"))
    ax.set_yticks([1, 0], [text["rank"].format(0), text["rank"].format(1)])
    ax.set_ylim(-0.45, 1.85)
    ax.set_xlim(0, None)
    ax.set_xlabel(text["x"])
    ax.set_title(text["title"], fontsize=10)
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles))  # one entry per label
    ax.legend(unique.values(), unique.keys(), fontsize=7, ncol=2, loc="upper center",
              bbox_to_anchor=(0.5, -0.2))


if MAIN:
    draw_both("restart", LABELS, draw, figsize=(7.4, 3.4))
# --8<-- [end:figure]


# --8<-- [start:leftovers]
def survivors(marker):
    """Live processes whose command line contains `marker` (Linux: read from /proc)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # it ended meanwhile
            continue
        if marker in command and int(entry.name) != os.getpid():
            found.append(f"{entry.name}: {command[:100]}")
    return found


if MAIN:
    if Path("/proc/self/cmdline").exists():
        # every process of the torchrun job has this run's unique folder on its command line
        left = survivors(str(job))
        print(f"processes of the torchrun job still alive: {len(left)}", *left)
        assert not left
    else:
        print("no /proc here: the check for processes left behind runs on Linux only")
    work.cleanup()
# --8<-- [end:leftovers]
