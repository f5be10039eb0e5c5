"""timing.py: the one timing method of the benchmarks that compare with PyTorch, for their PyTorch side (the CUDA
programs use tests/gpu/bench_timing.h, which implements the same method and prints the same METHOD text), and the
names of the CUDA kernels a callable launches, from torch.profiler.

Kernel timing (time_each, time_ms): WARMUP_CALLS calls of each callable, then SAMPLES samples of CALLS_PER_SAMPLE
back-to-back calls, each sample between two CUDA events on the current stream, after an L2 flush (a buffer larger
than L2 written just before the first event, which also gives the host a head start so that the GPU does not wait
for launches); the result is the median over the samples of the time per call. Several callables are timed in
turns, in an order shuffled each round, so that the clock's drift as the card heats biases none of them.

Training steps (time_steps): the way ./train times its steps (train.c: the host clock from the step's start to a
device synchronize that ends the step), so that a PyTorch step and a ./train step are measured alike.
"""
import random
import re
import statistics
import time
from collections import defaultdict

import torch

WARMUP_CALLS = 10
SAMPLES = 30
CALLS_PER_SAMPLE = 10
FLUSH_MIN_BYTES = 256 << 20
METHOD = ("median over 30 samples of 10 back-to-back calls, each sample timed by CUDA events after an L2 flush "
          "(a buffer of max(256 MiB, 2 x L2) written); 10 warm-up calls first")
STEP_METHOD = ("per step: host clock from the step's start to a device synchronize that ends it (as ./train's "
               "log.jsonl \"ms\"); median over the timed steps, after the same warm-up steps on both sides")


def flush_bytes():
    return max(FLUSH_MIN_BYTES, 2 * torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)


def time_each(fns):
    """Times the callables in turns by METHOD; returns, for each, (median ms per call, the samples' ms per call)."""
    flush = torch.empty(flush_bytes(), dtype=torch.uint8, device="cuda")
    for fn in fns:
        for _ in range(WARMUP_CALLS):
            fn()
    samples = [[] for _ in fns]
    order = list(range(len(fns)))
    rng = random.Random(0)
    for _ in range(SAMPLES):
        rng.shuffle(order)
        events = []
        for k in order:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush.zero_()
            start.record()
            for _ in range(CALLS_PER_SAMPLE):
                fns[k]()
            end.record()
            events.append((k, start, end))
        torch.cuda.synchronize()
        for k, start, end in events:
            samples[k].append(start.elapsed_time(end) / CALLS_PER_SAMPLE)
    del flush
    return [(statistics.median(s), s) for s in samples]


def time_ms(fn):
    """time_each for one callable: (median ms per call, the samples' ms per call)."""
    return time_each([fn])[0]


def time_steps(step, warmup, steps):
    """Runs warmup + steps calls of step(); returns the host-clock ms of each timed one, each ending with a device
    synchronize (STEP_METHOD)."""
    times = []
    for i in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def short_name(name):
    """A kernel's name without its template arguments and parameter list."""
    name = name.replace("(anonymous namespace)::", "")
    return re.sub(r"[<(].*", "", name).removeprefix("void ").strip()


def gpu_activities(fn):
    """Runs fn once (after one call outside the profiler) under torch.profiler; returns (short name, ms) of each
    kernel, memset or copy it ran on the GPU, in order."""
    fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        torch.cuda.synchronize()
    # on the GPU's timeline, but not work of their own: the profiler's buffer events and user annotations (such as
    # "Optimizer.step#AdamW.step", a range over the optimizer's kernels)
    gpu = [e for e in prof.events()
           if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("Activity Buffer")
           and not getattr(e, "is_user_annotation", False) and "#" not in e.name]
    gpu.sort(key=lambda e: e.time_range.start)
    return [(short_name(e.name), (e.time_range.end - e.time_range.start) * 1e-3) for e in gpu]


def kernel_names(fn):
    """The names of what fn ran on the GPU (gpu_activities), each once, in order."""
    return list(dict.fromkeys(name for name, _ in gpu_activities(fn)))


def top_kernels(fn, n=10):
    """What fn ran on the GPU grouped by name: [(name, launches, ms)] for the n with the most time, and the total
    (launches, ms) of all."""
    groups = defaultdict(lambda: [0, 0.0])
    acts = gpu_activities(fn)
    for name, ms in acts:
        groups[name][0] += 1
        groups[name][1] += ms
    top = sorted(groups.items(), key=lambda kv: -kv[1][1])[:n]
    return [(name, c, ms) for name, (c, ms) in top], (len(acts), sum(ms for _, ms in acts))
