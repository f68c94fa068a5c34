// harness_loads.cuh -- bounded loads used by the gemm-harness's own
// epilogue functors: included by harness.cu after the coda headers, and
// appended after them by nvrtc_check.cu (read from this directory), so the
// two builds share one copy.
#ifndef CODA_HARNESS_LOADS_CUH
#define CODA_HARNESS_LOADS_CUH

// Bounded loads of the harness's own functors (0 outside M x N): a tile
// pair at the thread's (row(i), col(j)), col(j) + 1 and a per-column pair.
namespace harness {
template <class Frag, class T>
__device__ __forceinline__ float2 load_pair(const Frag& f, int i, int j, const T* src, long long ld) {
    const int r = f.row(i), c = f.col(j);
    if (r >= f.m) return make_float2(0.0f, 0.0f);
    const T* p = src + (long long)r * ld + c;
    if (c + 1 < f.n && ((ld | (long long)c) & 1) == 0) return coda::load2(p);  // aligned pair
    return make_float2(c < f.n ? coda::load1(p) : 0.0f, c + 1 < f.n ? coda::load1(p + 1) : 0.0f);
}
template <class Frag, class T>
__device__ __forceinline__ float2 load_col_pair(const Frag& f, int j, const T* vec) {
    const int c = f.col(j);
    return make_float2(c < f.n ? coda::load1(vec + c) : 0.0f, c + 1 < f.n ? coda::load1(vec + c + 1) : 0.0f);
}
}  // namespace harness

#endif  // CODA_HARNESS_LOADS_CUH
