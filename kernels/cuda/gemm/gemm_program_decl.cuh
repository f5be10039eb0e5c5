/* gemm_program_decl.cuh: how an epilogue program declares what it writes and reads, and the bases it derives from:
 * its staged outputs (GeOutputs, which GeProgram<Os...> holds as `Out`; ge_put<i> puts a fragment of output i), its
 * inputs bound to their sources (ge_in, ge_inputs, ge_in_if: a GeInputs list, whose hooks the engine calls),
 * GeEpilogue (the base of every program: its hooks and optional members, with their defaults) and GeProgram. The
 * primitives, GeOut and the input types are gemm_epilogue.cuh's. */
#ifndef GEMM_PROGRAM_DECL_CUH
#define GEMM_PROGRAM_DECL_CUH

#include <utility>

#include "kernels/cuda/gemm/gemm_epilogue.cuh"

/* ---------------------------------------------------------------- declared outputs */

/* The GeOut outputs of a program, in the order it declares them (GeProgram<Os...>; its Params hold them as
 * `Out out`). Output i's staging starts at the sum of the earlier outputs' units; flush_from(t) issues them in order;
 * any_direct() says whether one of them cannot be a TMA target (then the engine runs the direct-store
 * instantiation). ge_put<i>(p.out, t, col, v) puts a fragment of output i. */
template <class... Os>
struct GeOutputs;
template <>
struct GeOutputs<> {
    static constexpr int kUnits = 0;
    bool any_direct() const { return false; }
    template <int U = 0>
    __device__ __forceinline__ void flush_from(const GeTile &) const {}
};
template <class O, class... Rest>
struct GeOutputs<O, Rest...> {
    O head;
    GeOutputs<Rest...> tail;
    static constexpr int kUnits = O::kUnits + GeOutputs<Rest...>::kUnits;
    bool any_direct() const { return !head.tma || tail.any_direct(); }
    template <int U = 0>
    __device__ __forceinline__ void flush_from(const GeTile &t) const {
        ge_out_flush(head, t, U);
        tail.template flush_from<U + O::kUnits>(t);
    }
};
/* Output I of a list: get(list) and its first staging unit. */
template <int I, class L>
struct GeOutAt;
template <class O, class... Rest>
struct GeOutAt<0, GeOutputs<O, Rest...>> {
    static constexpr int kUnit = 0;
    static __device__ __forceinline__ const O &get(const GeOutputs<O, Rest...> &l) { return l.head; }
};
template <int I, class O, class... Rest>
struct GeOutAt<I, GeOutputs<O, Rest...>> {
    using Next = GeOutAt<I - 1, GeOutputs<Rest...>>;
    static constexpr int kUnit = O::kUnits + Next::kUnit;
    static __device__ __forceinline__ const auto &get(const GeOutputs<O, Rest...> &l) { return Next::get(l.tail); }
};
template <int I, class L, class V>
__device__ __forceinline__ void ge_put(const L &out, const GeTile &t, int col, V &v) {
    ge_out_put(GeOutAt<I, L>::get(out), t, GeOutAt<I, L>::kUnit, col, v);
}

/* ---------------------------------------------------------------- declared inputs */

/* The arguments of ge_in: references to the Params' fields (values where they are temporaries, e.g. constants).
 * make<Src>() builds the input's Src from them when a hook is called, so that each field is read where the input
 * uses it, as a direct call with these arguments would read it. */
template <class... A>
struct GeArgs {
    template <class S, class... B>
    __device__ __forceinline__ S make(const B &...b) const {
        return S{b...};
    }
};
template <class A0, class... A>
struct GeArgs<A0, A...> {
    A0 a;
    GeArgs<A...> rest;
    __host__ __device__ __forceinline__ GeArgs(A0 &&a0, A &&...r)
        : a(static_cast<A0 &&>(a0)), rest(static_cast<A &&>(r)...) {}
    template <class S, class... B>
    __device__ __forceinline__ S make(const B &...b) const {
        return rest.template make<S>(b..., a);
    }
};

/* An input bound to its source: ge_in(input, the fields of its Src...), in a program's inputs(). */
template <class In, class... A>
struct GeIn {
    In &in;
    GeArgs<A...> args;
    static constexpr int kVecFloats = In::kVecFloats, kInUnits = In::kInUnits;
    __device__ __forceinline__ typename In::Src src() const { return args.template make<typename In::Src>(); }
    __device__ __forceinline__ void prefetch(const GeTile &t) const { in.prefetch(src(), t); }
    __device__ __forceinline__ void during(const GeTile &t, int kb, int nk) const { in.during(src(), t, kb, nk); }
    __device__ __forceinline__ void begin(const GeTile &t) const { in.begin(src(), t); }
    __device__ __forceinline__ void flush(const GeTile &t) const { in.flush(src(), t); }
};
template <class In, class... A>
__host__ __device__ __forceinline__ GeIn<In, A...> ge_in(In &in, A &&...src) {
    return {in, GeArgs<A...>(static_cast<A &&>(src)...)};
}

/* The inputs a program declares, in the order the engine calls their hooks: its inputs(p) returns
 * ge_inputs(ge_in(member, source...), ...). An element may itself be a list (ge_in_if's, empty when its condition
 * is false). Their shared scratch is summed for sizing, but each input uses its kind's area from its start
 * (t.eng.vec_scratch, t.eng.in_slots), so a list holds at most one GeColStage and one GeTileInTma. */
template <class... Is>
struct GeInputs;
template <>
struct GeInputs<> : GeInput {};
template <class I, class... Rest>
struct GeInputs<I, Rest...> {
    I head;
    GeInputs<Rest...> tail;
    static constexpr int kVecFloats = I::kVecFloats + GeInputs<Rest...>::kVecFloats;
    static constexpr int kInUnits = I::kInUnits + GeInputs<Rest...>::kInUnits;
    __host__ __device__ __forceinline__ GeInputs(const I &i, const Rest &...rest) : head(i), tail(rest...) {}
    __device__ __forceinline__ void prefetch(const GeTile &t) const { head.prefetch(t), tail.prefetch(t); }
    __device__ __forceinline__ void during(const GeTile &t, int kb, int nk) const {
        head.during(t, kb, nk), tail.during(t, kb, nk);
    }
    __device__ __forceinline__ void begin(const GeTile &t) const { head.begin(t), tail.begin(t); }
    __device__ __forceinline__ void flush(const GeTile &t) const { head.flush(t), tail.flush(t); }
};
template <class... Is>
__host__ __device__ __forceinline__ GeInputs<Is...> ge_inputs(const Is &...in) {
    return GeInputs<Is...>(in...);
}
/* ge_in(in, src...) where ON, else no input (an input that only some instantiations of a program have). */
template <bool ON, class In, class... A>
__host__ __device__ __forceinline__ auto ge_in_if(In &in, A &&...src) {
    if constexpr (ON)
        return ge_inputs(ge_in(in, static_cast<A &&>(src)...));
    else
        return GeInputs<>{};
}

/* ---------------------------------------------------------------- the programs' bases */

/* The base of every epilogue program: no per-tile work, no scratch, no inputs. A program overrides what it needs. */
struct GeEpilogue {
    static constexpr bool kColPartials = false; /* true: 8 warps x BN floats of scratch for ge_col_partial_add/_store */
    static constexpr int kStageUnits = 0; /* GeOut staging per 32-column chunk, in 4 KB units */
    static constexpr int kVecFloats = 0;  /* column-vector scratch (GeColStage) beyond the declared inputs', floats */
    static constexpr int kInUnits = 0;    /* input-tile staging (GeTileInTma) beyond the declared inputs', 4 KB units */
    static constexpr int kMaxStages = 0;  /* 0: as many ring stages as fit (at most 6, or 4 at BN = 256) */
    /* The declared inputs (GeInputs): the engine calls their prefetch, during and flush hooks before the program's
     * and their begin after the program's begin(). */
    template <class P>
    __host__ __device__ __forceinline__ GeInputs<> inputs(const P &) { return {}; }
    /* true: some GeOut output of these params cannot be a TMA target (ge_out() set tma = 0), so the engine runs
     * the program's direct-store instantiation (cooperative schedule). A program with GeOut outputs defines it. */
    template <class P>
    static bool direct(const P &) { return false; }
    /* true: the kernel returns at once (work the device decides to skip, such as the LM head's second pass). Every
     * thread asks, before anything else. */
    template <class P>
    __device__ __forceinline__ static bool skip(const P &) { return false; }
    template <class P>
    __device__ __forceinline__ void prefetch(const P &, const GeTile &) {}
    template <class P>
    __device__ __forceinline__ void during(const P &, const GeTile &, int, int) {}
    template <class P>
    __device__ __forceinline__ void begin(const P &, const GeTile &) {}
    template <class P>
    __device__ __forceinline__ void flush(const P &, const GeTile &) {}
    template <class P>
    __device__ __forceinline__ void end(const P &, const GeTile &) {}
};

/* The base of a program whose staged outputs are Os... (GeOut types, in this order), held in its Params as
 * `Out out`: the engine's staging units, the direct-store choice and the flush of every output follow from that
 * declaration, so the program only says what it computes (ge_put<i>(p.out, t, col, v) in frag()). A program with
 * more to flush (an output written in place of a GeTileInTma input) overrides flush() and calls out.flush_from(t). */
template <class... Os>
struct GeProgram : GeEpilogue {
    using Out = GeOutputs<Os...>;
    static constexpr int kStageUnits = Out::kUnits;
    template <class P>
    static bool direct(const P &p) { return p.out.any_direct(); }
    template <class P>
    __device__ __forceinline__ void flush(const P &p, const GeTile &t) { p.out.flush_from(t); }
};

/* The type of a program's declared inputs (the engine sizes their shared scratch from it). */
template <class Program>
using GeInputsOf = decltype(std::declval<Program &>().inputs(std::declval<const typename Program::Params &>()));

#endif
