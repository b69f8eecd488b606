// Level-1 element-wise operators: softplus, gelu (erf and tanh forms), silu, leaky_relu, elu, hardswish, clamp,
// axpby.
//
// One kernel family: a grid-stride loop that reads and writes 128-bit packs when both pointers are 16-byte
// aligned (a scalar loop takes the remainder, or everything when they are not), converts each element to float,
// applies the operator's functor and rounds once to the output dtype. The functors use the CUDA math library's
// full-precision functions (the build does not ask for fast math).
#include "device_common.cuh"

namespace cann_cuda {
namespace {

// ---- the map kernels --------------------------------------------------------------------------------------------

template <typename T, typename Op, bool kVector>
__global__ void __launch_bounds__(kThreads) unary_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if constexpr (kVector) {
    constexpr int V = kPack<T>;
    const int64_t packs = n / V;
    const Pack<T>* xp = reinterpret_cast<const Pack<T>*>(x);
    Pack<T>* yp = reinterpret_cast<Pack<T>*>(y);
    for (int64_t i = start; i < packs; i += stride) {
      Pack<T> p = xp[i];
#pragma unroll
      for (int k = 0; k < V; ++k) p.v[k] = store<T>(op(to_float(p.v[k])));
      yp[i] = p;
    }
    done = packs * V;
  }
  for (int64_t i = done + start; i < n; i += stride) y[i] = store<T>(op(to_float(x[i])));
}

template <typename T, typename Op>
void map_unary(const void* x_raw, void* y_raw, int64_t n, Op op, cudaStream_t s) {
  const T* x = static_cast<const T*>(x_raw);
  T* y = static_cast<T*>(y_raw);
  if (aligned16(x) && aligned16(y)) {
    unary_kernel<T, Op, true><<<grid_for(n / kPack<T> + 1), kThreads, 0, s>>>(x, y, n, op);
  } else {
    unary_kernel<T, Op, false><<<grid_for(n), kThreads, 0, s>>>(x, y, n, op);
  }
}

template <typename Op>
void map_float(DType dt, const void* x, void* y, int64_t n, Op op, cudaStream_t s) {
  visit_float(dt, [&](auto tag) {
    using T = decltype(tag);
    map_unary<T>(x, y, n, op, s);
  });
}

// ---- functors ---------------------------------------------------------------------------------------------------

// sigmoid(t) without overflow: e = exp(-|t|) is at most 1, and for t < 0 the result e / (1 + e) keeps its
// relative precision far into the tail. NaN stays NaN.
__device__ __forceinline__ float stable_sigmoid(float t) {
  const float e = expf(-fabsf(t));
  const float r = 1.0f / (1.0f + e);
  return t >= 0.0f ? r : e * r;
}

constexpr float kNegInf = -INFINITY;

struct SoftplusOp {
  float beta_f;
  double beta, threshold;
  __device__ float operator()(float v) const {
    // The tail test in double: x * beta is exact there, so the switch happens exactly where the formula says.
    if (static_cast<double>(v) * beta > threshold) return v;  // linear tail (also +inf)
    const float z = v * beta_f;
    // log(1 + e^z) = max(z, 0) + log1p(e^-|z|): never overflows; NaN reaches the log1p term and stays NaN
    const float positive = z > 0.0f ? z : 0.0f;
    return (positive + log1pf(expf(-fabsf(z)))) / beta_f;
  }
};

// gelu(x) = x * Phi(x) = 0.5 * x * erfc(-x / sqrt 2): erfc keeps the negative tail precise where 1 + erf(x)
// would cancel. -inf gives the limit 0 (the product would be -inf * 0), +inf gives +inf.
struct GeluErfOp {
  __device__ float operator()(float v) const {
    if (v == kNegInf) return 0.0f;
    return 0.5f * v * erfcf(-0.70710678118654752f * v);
  }
};

// 0.5 * x * (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2 / pi) * (x + 0.044715 x^3): no cancellation for x < 0.
struct GeluTanhOp {
  __device__ float operator()(float v) const {
    if (v == kNegInf) return 0.0f;
    const float two_u = 1.5957691216057308f * (v + 0.044715f * v * v * v);  // 2 * sqrt(2 / pi) = 1.59576912...
    return v * stable_sigmoid(two_u);
  }
};

struct SiluOp {
  __device__ float operator()(float v) const { return v == kNegInf ? 0.0f : v * stable_sigmoid(v); }
};

// x for x >= 0, slope * x elsewhere; NaN fails the test and gives NaN * slope = NaN.
struct LeakyReluOp {
  float slope;
  __device__ float operator()(float v) const { return v >= 0.0f ? v : v * slope; }
};

// x for x > 0, alpha * (e^x - 1) elsewhere; expm1 keeps small negative x precise, -inf gives -alpha.
struct EluOp {
  float alpha;
  __device__ float operator()(float v) const { return v > 0.0f ? v : alpha * expm1f(v); }
};

// x * min(max(x + 3, 0), 6) / 6 with comparisons (not fminf/fmaxf, which would drop a NaN); -inf gives 0.
struct HardswishOp {
  __device__ float operator()(float v) const {
    if (v == kNegInf) return 0.0f;
    float t = v + 3.0f;
    t = t < 0.0f ? 0.0f : t;
    t = t > 6.0f ? 6.0f : t;
    return v * t / 6.0f;
  }
};

// min(max(x, lo), hi): NaN fails both tests and passes through; lo > hi gives hi everywhere (torch's rule).
// Float16/bfloat16 values compare exactly in float, and rounding a float bound to the dtype afterwards gives
// the same result as clamping to the rounded bound.
struct ClampOp {
  float lo, hi;
  __device__ float operator()(float v) const {
    const float w = v < lo ? lo : v;
    return w > hi ? hi : w;
  }
};

// ---- integer clamp ----------------------------------------------------------------------------------------------

template <typename I>
__global__ void __launch_bounds__(kThreads) clamp_int_kernel(const I* __restrict__ x, I* __restrict__ y, int64_t n,
                                                             I lo, I hi) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const I w = x[i] < lo ? lo : x[i];
    y[i] = w > hi ? hi : w;
  }
}

// ---- axpby ------------------------------------------------------------------------------------------------------

// Rounded like the unfused native reference: nvcc contracts alpha * a + beta * b into one FMA, whose single
// rounding differs from two products and a sum where the two nearly cancel (seen on an H200: one point in a
// million over the normal-region bound where the native reference had none, a timed_output_wrong).
struct AxpbyOp {
  float alpha, beta;
  __device__ float operator()(float a, float b) const { return __fadd_rn(__fmul_rn(alpha, a), __fmul_rn(beta, b)); }
};

template <typename T, bool kVector>
__global__ void __launch_bounds__(kThreads) axpby_same_kernel(const T* __restrict__ x, const T* __restrict__ y,
                                                              T* __restrict__ z, int64_t n, AxpbyOp op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if constexpr (kVector) {
    constexpr int V = kPack<T>;
    const int64_t packs = n / V;
    const Pack<T>* xp = reinterpret_cast<const Pack<T>*>(x);
    const Pack<T>* yp = reinterpret_cast<const Pack<T>*>(y);
    Pack<T>* zp = reinterpret_cast<Pack<T>*>(z);
    for (int64_t i = start; i < packs; i += stride) {
      const Pack<T> a = xp[i];
      const Pack<T> b = yp[i];
      Pack<T> c;
#pragma unroll
      for (int k = 0; k < V; ++k) c.v[k] = store<T>(op(to_float(a.v[k]), to_float(b.v[k])));
      zp[i] = c;
    }
    done = packs * V;
  }
  for (int64_t i = done + start; i < n; i += stride) z[i] = store<T>(op(to_float(x[i]), to_float(y[i])));
}

// x's dimensions after merging (size-1 dimensions dropped, neighbours of the same kind joined) and y's stride in
// each: 0 where y broadcasts, its contiguous stride elsewhere.
struct BroadcastIndex {
  int ndim;
  int64_t size[kMaxDims];
  int64_t y_stride[kMaxDims];
};

template <typename T>
__global__ void __launch_bounds__(kThreads) axpby_broadcast_kernel(const T* __restrict__ x, const T* __restrict__ y,
                                                                   T* __restrict__ z, int64_t n, BroadcastIndex b,
                                                                   AxpbyOp op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t rest = i, offset = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d < b.ndim) {
        const int64_t extent = b.size[d];
        offset += (rest % extent) * b.y_stride[d];
        rest /= extent;
      }
    }
    z[i] = store<T>(op(to_float(x[i]), to_float(y[offset])));
  }
}

}  // namespace

// ---- launchers --------------------------------------------------------------------------------------------------

void launch_softplus(DType dt, const void* x, void* y, int64_t n, double beta, double threshold, cudaStream_t s) {
  map_float(dt, x, y, n, SoftplusOp{static_cast<float>(beta), beta, threshold}, s);
}

void launch_gelu(DType dt, const void* x, void* y, int64_t n, bool tanh_form, cudaStream_t s) {
  if (tanh_form) {
    map_float(dt, x, y, n, GeluTanhOp{}, s);
  } else {
    map_float(dt, x, y, n, GeluErfOp{}, s);
  }
}

void launch_silu(DType dt, const void* x, void* y, int64_t n, cudaStream_t s) { map_float(dt, x, y, n, SiluOp{}, s); }

void launch_leaky_relu(DType dt, const void* x, void* y, int64_t n, double negative_slope, cudaStream_t s) {
  map_float(dt, x, y, n, LeakyReluOp{static_cast<float>(negative_slope)}, s);
}

void launch_elu(DType dt, const void* x, void* y, int64_t n, double alpha, cudaStream_t s) {
  map_float(dt, x, y, n, EluOp{static_cast<float>(alpha)}, s);
}

void launch_hardswish(DType dt, const void* x, void* y, int64_t n, cudaStream_t s) {
  map_float(dt, x, y, n, HardswishOp{}, s);
}

void launch_clamp_float(DType dt, const void* x, void* y, int64_t n, double min_val, double max_val, cudaStream_t s) {
  map_float(dt, x, y, n, ClampOp{static_cast<float>(min_val), static_cast<float>(max_val)}, s);
}

void launch_clamp_int(DType dt, const void* x, void* y, int64_t n, int64_t lo, int64_t hi, cudaStream_t s) {
  if (dt == DType::Int32) {
    clamp_int_kernel<int32_t><<<grid_for(n), kThreads, 0, s>>>(static_cast<const int32_t*>(x),
                                                                static_cast<int32_t*>(y), n,
                                                                static_cast<int32_t>(lo), static_cast<int32_t>(hi));
  } else if (dt == DType::Int8) {
    clamp_int_kernel<int8_t><<<grid_for(n), kThreads, 0, s>>>(static_cast<const int8_t*>(x), static_cast<int8_t*>(y),
                                                               n, static_cast<int8_t>(lo), static_cast<int8_t>(hi));
  }
}

void launch_axpby(DType dt, const void* x_raw, const void* y_raw, void* z_raw, int ndim, const int64_t* x_sizes,
                  const int64_t* y_sizes, double alpha, double beta, cudaStream_t s) {
  // Merge x's dimensions: drop the size-1 ones, join neighbours that y either broadcasts both or follows both.
  BroadcastIndex b{};
  bool kind[kMaxDims] = {};
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) {
    n *= x_sizes[d];
    if (x_sizes[d] == 1) continue;
    const bool broadcast = y_sizes[d] == 1;
    if (b.ndim > 0 && kind[b.ndim - 1] == broadcast) {
      b.size[b.ndim - 1] *= x_sizes[d];
    } else {
      kind[b.ndim] = broadcast;
      b.size[b.ndim] = x_sizes[d];
      ++b.ndim;
    }
  }
  // y is contiguous over its own shape: its stride in a merged dimension is the product of the non-broadcast
  // sizes after it.
  int64_t y_step = 1;
  for (int d = b.ndim - 1; d >= 0; --d) {
    b.y_stride[d] = kind[d] ? 0 : y_step;
    if (!kind[d]) y_step *= b.size[d];
  }
  const bool same_shape = b.ndim == 0 || (b.ndim == 1 && !kind[0]);
  const AxpbyOp op{static_cast<float>(alpha), static_cast<float>(beta)};
  visit_float(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(x_raw);
    const T* y = static_cast<const T*>(y_raw);
    T* z = static_cast<T*>(z_raw);
    if (!same_shape) {
      axpby_broadcast_kernel<T><<<grid_for(n), kThreads, 0, s>>>(x, y, z, n, b, op);
    } else if (aligned16(x) && aligned16(y) && aligned16(z)) {
      axpby_same_kernel<T, true><<<grid_for(n / kPack<T> + 1), kThreads, 0, s>>>(x, y, z, n, op);
    } else {
      axpby_same_kernel<T, false><<<grid_for(n), kThreads, 0, s>>>(x, y, z, n, op);
    }
  });
}

}  // namespace cann_cuda
