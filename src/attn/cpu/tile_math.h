// The vector arithmetic of the CPU attention tiles: one register-blocked matrix-multiply micro-kernel
// (every product of the forward and backward is C (+)= A * B with B row-major) and a vector exp and
// tanh, written with GCC vector extensions. Included only by the ISA translation units
// (kernels_*.cpp), each of which sets the vector width native to its level and compiles its entry
// points for that level; everything here is always-inline, so it takes the entry point's
// instruction set, and sits in an unnamed namespace, so the levels' copies never mix at link time.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "tiling.h"

#if !defined(VARPACK_VECTOR_BYTES) || !defined(VARPACK_ROW_VECTORS)
#error "tile_math.h is included by the kernels_*.cpp files, which set VARPACK_VECTOR_BYTES and VARPACK_ROW_VECTORS"
#endif

#define VARPACK_ALWAYS_INLINE inline __attribute__((always_inline))

namespace varpack::cpu {
namespace {

// Native vector width of the level (64: AVX-512, 32: AVX2, 16: SSE2 / NEON). Wider than native
// would be split by the compiler, through the stack: 20-30x slower, measured.
inline constexpr int kVectorBytes = VARPACK_VECTOR_BYTES;
// Vectors per row of a gemm register block (4 rows x this many accumulators): 4 fills 16 of
// AVX-512's 32 registers; with 16 registers (AVX2, SSE2) 2 avoids spills.
inline constexpr int kRowVectors = VARPACK_ROW_VECTORS;

template <typename T>
struct Simd;
template <>
struct Simd<float> {
  typedef float V __attribute__((vector_size(kVectorBytes)));
  typedef int32_t I __attribute__((vector_size(kVectorBytes)));  // lane masks and indices
  using Lane = int32_t;
  static constexpr int width = kVectorBytes / sizeof(float);
};
template <>
struct Simd<double> {
  typedef double V __attribute__((vector_size(kVectorBytes)));
  typedef int64_t I __attribute__((vector_size(kVectorBytes)));
  using Lane = int64_t;
  static constexpr int width = kVectorBytes / sizeof(double);
};
static_assert(kBlockQ % Simd<float>::width == 0 && kBlockQ % Simd<double>::width == 0,
              "score tiles are [key][query]: a key's scores must be whole vectors");

// head_dim rounded up to whole vectors: the padded columns of local tiles are zero.
template <typename T>
constexpr int64_t padded_dim(int64_t d) {
  return (d + Simd<T>::width - 1) / Simd<T>::width * Simd<T>::width;
}

// A bfloat16 element as stored (the top half of a float32). The tiles never compute in it: inputs
// are widened to float as they are loaded into the tile buffers, results narrowed as they are
// written out, so bf16 runs the float tile code with float accumulation.
struct Bf16 {
  uint16_t bits;
};

// Element of storage type S as compute type T (exact: bf16 widens by appending 16 zero bits).
template <typename T, typename S>
VARPACK_ALWAYS_INLINE T widen(S x) {
  if constexpr (std::is_same_v<S, Bf16>) {
    const uint32_t u = static_cast<uint32_t>(x.bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return static_cast<T>(f);
  } else {
    return static_cast<T>(x);
  }
}

// Compute type T to storage type S; to bf16 with round-to-nearest-even (ties keep an even last
// bit; overflow rounds to inf as IEEE does), NaN kept a (quiet) NaN instead of rounding to inf.
template <typename S, typename T>
VARPACK_ALWAYS_INLINE S narrow(T x) {
  if constexpr (std::is_same_v<S, Bf16>) {
    const float f = static_cast<float>(x);
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{static_cast<uint16_t>((u >> 16) | 0x40u)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return Bf16{static_cast<uint16_t>(u >> 16)};
  } else {
    return static_cast<S>(x);
  }
}

template <typename T>
VARPACK_ALWAYS_INLINE void load(typename Simd<T>::V& v, const T* p) {
  std::memcpy(&v, p, sizeof v);
}
template <typename T>
VARPACK_ALWAYS_INLINE void store(T* p, const typename Simd<T>::V& v) {
  std::memcpy(p, &v, sizeof v);
}

// C[R x NV vectors] (+)= A[R x k] * B[k x NV vectors], accumulators in registers. A(r, kk) is
// a[r * lda + kk * a_step]: A can be read row-major (a_step 1) or transposed (lda 1).
template <typename T, int R, int NV>
VARPACK_ALWAYS_INLINE void gemm_block(T* c, int64_t ldc, const T* a, int64_t lda, int64_t a_step, const T* b,
                                      int64_t ldb, int64_t k, bool accumulate) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::width;
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      if (accumulate) {
        load<T>(acc[r][v], c + r * ldc + v * W);
      } else {
        acc[r][v] = V{};
      }
    }
  for (int64_t kk = 0; kk < k; ++kk) {
    V bv[NV];
    for (int v = 0; v < NV; ++v) load<T>(bv[v], b + kk * ldb + v * W);
    for (int r = 0; r < R; ++r) {
      const T av = a[r * lda + kk * a_step];
      for (int v = 0; v < NV; ++v) acc[r][v] += av * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) store<T>(c + r * ldc + v * W, acc[r][v]);
}

template <typename T, int NV>
VARPACK_ALWAYS_INLINE void gemm_columns(T* c, int64_t ldc, const T* a, int64_t lda, int64_t a_step, const T* b,
                                        int64_t ldb, int64_t m, int64_t k, bool accumulate) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) gemm_block<T, 4, NV>(c + r * ldc, ldc, a + r * lda, lda, a_step, b, ldb, k, accumulate);
  switch (m - r) {
    case 3: gemm_block<T, 3, NV>(c + r * ldc, ldc, a + r * lda, lda, a_step, b, ldb, k, accumulate); break;
    case 2: gemm_block<T, 2, NV>(c + r * ldc, ldc, a + r * lda, lda, a_step, b, ldb, k, accumulate); break;
    case 1: gemm_block<T, 1, NV>(c + r * ldc, ldc, a + r * lda, lda, a_step, b, ldb, k, accumulate); break;
    default: break;
  }
}

// C[m x n] (+)= A[m x k] * B[k x n] with A(r, kk) = a[r * lda + kk * a_step]; n is a multiple of
// the vector width. The sum over k runs in order 0..k-1 for every element, whatever m and n, so
// results do not depend on the tiling.
template <typename T>
VARPACK_ALWAYS_INLINE void gemm(T* c, int64_t ldc, const T* a, int64_t lda, int64_t a_step, const T* b, int64_t ldb,
                                int64_t m, int64_t n, int64_t k, bool accumulate) {
  constexpr int W = Simd<T>::width;
  for (int64_t col = 0; col < n; col += kRowVectors * W) {
    const int64_t nv = (n - col) / W;
    if (nv >= kRowVectors) {
      gemm_columns<T, kRowVectors>(c + col, ldc, a, lda, a_step, b + col, ldb, m, k, accumulate);
    } else if (nv == 3) {
      gemm_columns<T, 3>(c + col, ldc, a, lda, a_step, b + col, ldb, m, k, accumulate);
    } else if (nv == 2) {
      gemm_columns<T, 2>(c + col, ldc, a, lda, a_step, b + col, ldb, m, k, accumulate);
    } else {
      gemm_columns<T, 1>(c + col, ldc, a, lda, a_step, b + col, ldb, m, k, accumulate);
    }
  }
}

// exp of a vector, in place (a reference, not a by-value vector: passing 64-byte vectors by value
// has no stable ABI without AVX-512). float: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2,
// degree-7 Taylor polynomial (truncation error < 6e-9, under half an ulp), 2^n built in the exponent
// bits; inputs below ln(FLT_MIN) give exactly 0, so masked scores (-inf) give probability 0.
// double: the library's exp lane by lane (the f64 path serves gradient checks: exactness first).
VARPACK_ALWAYS_INLINE void exp_in_place(Simd<float>::V& x) {
  using V = Simd<float>::V;
  using I = Simd<float>::I;
  const V lo = V{} - 87.33654f, hi = V{} + 88.0f;  // n stays <= 127: 2^n is finite
  const auto underflow = x < lo;
  V y = x < lo ? lo : x;
  y = y > hi ? hi : y;
  const V magic = V{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low bits
  V fn = y * 1.44269504088896341f + magic;
  I n;
  std::memcpy(&n, &fn, sizeof n);
  n -= 0x4B400000;  // the bits of `magic`
  fn -= magic;
  const V r = y - fn * 0.693145751953125f - fn * 1.428606765330187045e-06f;
  V p = V{} + (1.0f / 5040);
  p = p * r + (1.0f / 720);
  p = p * r + (1.0f / 120);
  p = p * r + (1.0f / 24);
  p = p * r + (1.0f / 6);
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const I bits = (n + 127) << 23;
  V two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  x = underflow ? V{} : p * two_n;
}

VARPACK_ALWAYS_INLINE void exp_in_place(Simd<double>::V& x) {
  for (int i = 0; i < Simd<double>::width; ++i) x[i] = std::exp(x[i]);
}

// tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)), in place: absolute error about one ulp of 1.
VARPACK_ALWAYS_INLINE void tanh_in_place(Simd<float>::V& x) {
  using V = Simd<float>::V;
  V e = x < 0.0f ? -2.0f * x : 2.0f * x;
  exp_in_place(e);
  const V t = 1.0f - 2.0f / (e + 1.0f);
  x = x < 0.0f ? -t : t;
}

VARPACK_ALWAYS_INLINE void tanh_in_place(Simd<double>::V& x) {
  for (int i = 0; i < Simd<double>::width; ++i) x[i] = std::tanh(x[i]);
}

}  // namespace
}  // namespace varpack::cpu
