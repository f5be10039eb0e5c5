/* gemm_programs.cuh: the epilogue program behind gemm.h's launchers, the plain store (overwrite or accumulate) of
 * the accumulator tile through GeOut. (The trainer's programs are kernels/cuda/fused's.) */
#ifndef GEMM_PROGRAMS_CUH
#define GEMM_PROGRAMS_CUH

#include "kernels/cuda/gemm/gemm_program_decl.cuh"

/* C = acc (ACCUMULATE: C += acc), C bf16 or fp32, through GeOut (TMA store / TMA add-reduce, or direct). */
template <class T, bool ACCUMULATE>
struct GeStore : GeProgram<GeOut<T, 32, ACCUMULATE>> {
    struct Params {
        typename GeStore::Out out; /* C */
    };
    __device__ __forceinline__ void frag(const Params &p, const GeTile &t, int col, float2 (&v)[2]) {
        ge_put<0>(p.out, t, col, v);
    }
};

#endif
