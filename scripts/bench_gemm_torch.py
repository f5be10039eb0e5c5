"""bench_gemm_torch.py: torch.compile (and eager) of the GEMM-residual-RMSNorm-GEMM pattern that bench_gemm times,
on the same shapes (16384 rows, D = 2048, 4096, 8192; bf16; both weights D x D), as a ratio to the two bare GEMMs,
the three timed in turns by the method that bench_gemm uses too (scripts/timing.py); then the kernels each ran
(torch.profiler). torch.compile specializes on each shape (dynamic=False), as our programs are built per shape."""
import torch

import timing

EPS = 1e-5


def pattern(x, res, w1, w2, g):
    h = x @ w1.t() + res
    hf = h.float()
    y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)).to(torch.bfloat16) * g
    return y @ w2.t(), h


def main():
    torch.manual_seed(0)
    dev = "cuda"
    print(f"# bench_gemm_torch on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"# each time: {timing.METHOD}")
    compiled = torch.compile(pattern, dynamic=False)
    for D in (2048, 4096, 8192):
        M = 16384
        bf = dict(device=dev, dtype=torch.bfloat16)
        x, res, y = torch.randn(M, D, **bf), torch.randn(M, D, **bf), torch.randn(M, D, **bf)
        w1, w2 = torch.randn(D, D, **bf) * 0.02, torch.randn(D, D, **bf) * 0.02
        g = 1 + 0.1 * torch.randn(D, **bf)
        calls = {"2 bare torch GEMMs": lambda: (x @ w1.t(), y @ w2.t()),
                 "eager": lambda: pattern(x, res, w1, w2, g),
                 "torch.compile": lambda: compiled(x, res, w1, w2, g)}
        t_bare, t_eager, t_comp = (ms for ms, _ in timing.time_each(list(calls.values())))
        print(f"{M:6d} {D:5d}   2 bare torch GEMMs {t_bare:7.3f} ms   eager {t_eager:7.3f} ms ({t_eager / t_bare:.3f}x)"
              f"   torch.compile {t_comp:7.3f} ms ({t_comp / t_bare:.3f}x)", flush=True)
        for name, fn in calls.items():
            print(f"{M:6d} {D:5d}   {name} ran: {' '.join(timing.kernel_names(fn))}", flush=True)


if __name__ == "__main__":
    main()
