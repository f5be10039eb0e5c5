"""bench_gemm_torch.py: torch.compile (and eager) of the GEMM-residual-RMSNorm-GEMM pattern that bench_gemm times,
on the same shapes (16384 rows, D = 2048, 4096, 8192; bf16; both weights D x D), as a ratio to the two bare GEMMs
timed the same way (median of CUDA-event timings after warm-up)."""
import torch

EPS = 1e-5


def median_ms(fn, warm=5, reps=20):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def pattern(x, res, w1, w2, g):
    h = x @ w1.t() + res
    hf = h.float()
    y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)).to(torch.bfloat16) * g
    return y @ w2.t(), h


def main():
    torch.manual_seed(0)
    dev = "cuda"
    print(f"# bench_gemm_torch on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    compiled = torch.compile(pattern)
    for D in (2048, 4096, 8192):
        M = 16384
        bf = dict(device=dev, dtype=torch.bfloat16)
        x, res, y = torch.randn(M, D, **bf), torch.randn(M, D, **bf), torch.randn(M, D, **bf)
        w1, w2 = torch.randn(D, D, **bf) * 0.02, torch.randn(D, D, **bf) * 0.02
        g = torch.ones(D, **bf)
        t_bare = median_ms(lambda: (x @ w1.t(), y @ w2.t()))
        t_eager = median_ms(lambda: pattern(x, res, w1, w2, g))
        t_comp = median_ms(lambda: compiled(x, res, w1, w2, g))
        print(f"{M:6d} {D:5d}   2 bare torch GEMMs {t_bare:7.3f} ms   eager {t_eager:7.3f} ms ({t_eager / t_bare:.3f}x)"
              f"   torch.compile {t_comp:7.3f} ms ({t_comp / t_bare:.3f}x)", flush=True)


if __name__ == "__main__":
    main()
