"""The CUDA C every generated translation unit starts with.

It includes no headers, so NVRTC compiles it as is, and every helper is
``__host__ __device__`` so kernel bodies also compile for the CPU (see
:mod:`host_emulation`): half-precision conversions done on the bit patterns,
NaN-propagating max/min, floor division for index arithmetic, bit counting, digamma
(CUDA has none), atomic read-modify-write for scatters and a warp-shuffle block
reduction.
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

// Atomic read-modify-write of one element, for scatters whose updates may collide.
// ``update(old) -> new`` works on the element's memory representation. On the GPU it is a
// compare-and-swap loop on the naturally aligned 32- or 64-bit word holding the element
// (so 8- and 16-bit elements work too: the CAS fails, and retries, whenever any byte of the
// word changed, and rewrites the neighbouring bytes with the values it read). Bits are
// compared, never values, so a NaN element cannot make it spin. On the host (the serial
// emulation) it is a plain update.
template <int Bytes> struct ft_cas_word { typedef unsigned int type; };
template <> struct ft_cas_word<8> { typedef unsigned long long type; };

template <class M, class Update>
__host__ __device__ inline void ft_atomic_update(M* address, Update update) {
#ifdef __CUDA_ARCH__
  typedef typename ft_cas_word<(int)sizeof(M)>::type W;
  union Word { W bits; M lanes[sizeof(W) / sizeof(M)]; };
  const unsigned long long where = (unsigned long long)address;
  W* word = (W*)(where & ~(unsigned long long)(sizeof(W) - 1));
  const int lane = (int)((where & (sizeof(W) - 1)) / sizeof(M));
  Word seen, next;
  seen.bits = *(volatile W*)word;
  while (true) {
    next.bits = seen.bits;
    next.lanes[lane] = update(seen.lanes[lane]);
    const W previous = atomicCAS(word, seen.bits, next.bits);
    if (previous == seen.bits) break;
    seen.bits = previous;
  }
#else
  *address = update(*address);
#endif
}

struct ft_add_f64 {
  double value;
  __host__ __device__ double operator()(double old) const { return old + value; }
};

// Atomic additions the hardware has (integers wrap: signed ones are added as unsigned).
__host__ __device__ inline void ft_atomic_add(float* address, float value) {
#ifdef __CUDA_ARCH__
  atomicAdd(address, value);
#else
  *address += value;
#endif
}
__host__ __device__ inline void ft_atomic_add(double* address, double value) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 600
  atomicAdd(address, value);
#elif defined(__CUDA_ARCH__)
  ft_atomic_update(address, ft_add_f64{value});
#else
  *address += value;
#endif
}
__host__ __device__ inline void ft_atomic_add(unsigned int* address, unsigned int value) {
#ifdef __CUDA_ARCH__
  atomicAdd(address, value);
#else
  *address += value;
#endif
}
__host__ __device__ inline void ft_atomic_add(unsigned long long* address, unsigned long long value) {
#ifdef __CUDA_ARCH__
  atomicAdd(address, value);
#else
  *address += value;
#endif
}
__host__ __device__ inline void ft_atomic_add(int* address, int value) {
  ft_atomic_add((unsigned int*)address, (unsigned int)value);
}
__host__ __device__ inline void ft_atomic_add(long long* address, long long value) {
  ft_atomic_add((unsigned long long*)address, (unsigned long long)value);
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
