"""The CUDA C every generated translation unit starts with.

It includes no headers, so NVRTC compiles it as is, and every helper is
``__host__ __device__`` so kernel bodies also compile for the CPU (see
:mod:`host_emulation`): half-precision conversions done on the bit patterns,
NaN-propagating max/min, floor division for index arithmetic, bit counting, digamma
(CUDA has none) and a warp-shuffle block reduction.
"""

PRELUDE = r"""

union ft_f32_bits { float f; unsigned int u; };
union ft_f64_bits { double f; unsigned long long u; };

__host__ __device__ inline float ft_f32(unsigned int u) { ft_f32_bits b; b.u = u; return b.f; }
__host__ __device__ inline unsigned int ft_bits32(float f) { ft_f32_bits b; b.f = f; return b.u; }
__host__ __device__ inline double ft_f64(unsigned long long u) { ft_f64_bits b; b.u = u; return b.f; }

// float16 and bfloat16 live in memory as their 16-bit patterns and in registers as float.
__host__ __device__ inline float ft_h2f(unsigned short h) {
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
  unsigned int exponent = ((unsigned int)h >> 10) & 0x1fu, mantissa = (unsigned int)h & 0x3ffu;
  if (exponent == 0x1fu) return ft_f32(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0u) {  // zero or subnormal: mantissa * 2^-24
    float v = (float)mantissa * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return ft_f32(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

__host__ __device__ inline unsigned short ft_f2h(float f) {  // round to nearest even
  unsigned int u = ft_bits32(f);
  unsigned int sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);        // NaN
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);       // >= 65520: infinity
  if (a < 0x38800000u) {                                               // below 2^-14: subnormal
    float scaled = ft_f32(a) * 16777216.0f;                            // exact: times 2^24
    return (unsigned short)(sign | (unsigned int)rintf(scaled));
  }
  unsigned int r = a - 0x38000000u;                                    // rebias the exponent
  r = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  return (unsigned short)(sign | r);
}

__host__ __device__ inline float ft_bf2f(unsigned short h) { return ft_f32((unsigned int)h << 16); }

__host__ __device__ inline unsigned short ft_f2bf(float f) {  // round to nearest even
  unsigned int u = ft_bits32(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

__host__ __device__ inline float ft_round_h(float x) { return ft_h2f(ft_f2h(x)); }
__host__ __device__ inline float ft_round_bf(float x) { return ft_bf2f(ft_f2bf(x)); }

// max/min that propagate NaN, as the reference (np.maximum) does; fmaxf would drop it.
template <class T> __host__ __device__ inline T ft_fmax(T a, T b) {
  return (a != a) ? a : (b != b) ? b : (a > b ? a : b);
}
template <class T> __host__ __device__ inline T ft_fmin(T a, T b) {
  return (a != a) ? a : (b != b) ? b : (a < b ? a : b);
}

// Floor division and modulo by a positive constant, for index arithmetic that can go negative.
template <class T> __host__ __device__ inline T ft_floordiv(T a, T d) {
  T q = a / d;
  return (q * d != a && a < 0) ? q - 1 : q;
}
template <class T> __host__ __device__ inline T ft_floormod(T a, T d) {
  T r = a % d;
  return r < 0 ? r + d : r;
}

__host__ __device__ inline int ft_popc32(unsigned int x) {
#ifdef __CUDA_ARCH__
  return __popc(x);
#else
  return __builtin_popcount(x);
#endif
}
__host__ __device__ inline int ft_popc64(unsigned long long x) {
#ifdef __CUDA_ARCH__
  return __popcll(x);
#else
  return __builtin_popcountll(x);
#endif
}
__host__ __device__ inline int ft_clz32(unsigned int x) {
#ifdef __CUDA_ARCH__
  return __clz((int)x);
#else
  return x == 0u ? 32 : __builtin_clz(x);
#endif
}
__host__ __device__ inline int ft_clz64(unsigned long long x) {
#ifdef __CUDA_ARCH__
  return __clzll((long long)x);
#else
  return x == 0ull ? 64 : __builtin_clzll(x);
#endif
}

// digamma: CUDA has none. Reflection below zero, recurrence up to 6, then the asymptotic series.
__host__ __device__ inline double ft_digamma(double x) {
  const double pi = 3.14159265358979323846;
  if (x != x) return x;
  double result = 0.0;
  if (x <= 0.0) {
    if (x == floor(x)) return x == 0.0 ? ft_f64(0xfff0000000000000ull) : ft_f64(0x7ff8000000000000ull);
    result = -pi / tan(pi * x);
    x = 1.0 - x;
  }
  while (x < 6.0) {
    result -= 1.0 / x;
    x += 1.0;
  }
  double f = 1.0 / (x * x);
  double tail = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))));
  return result + log(x) - 0.5 / x - tail;
}

#ifdef __CUDACC__
// Reduce one value per thread to thread 0 of the block (blockDim.x a multiple of 32).
template <class T, class Combine>
__device__ inline T ft_block_reduce(T v, T identity, Combine combine) {
  __shared__ T partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int offset = 16; offset > 0; offset >>= 1)
    v = combine(v, __shfl_down_sync(0xffffffffu, v, offset));
  __syncthreads();  // a previous call may still be reading partial[]
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)((blockDim.x + 31) >> 5) ? partial[lane] : identity;
    for (int offset = 16; offset > 0; offset >>= 1)
      v = combine(v, __shfl_down_sync(0xffffffffu, v, offset));
  }
  return v;
}
#endif
"""
