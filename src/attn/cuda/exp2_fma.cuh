// 2^x on the FP32 and integer pipes instead of the multi-function unit (MUFU.EX2), for the
// softmax's exponentials. A multiprocessor's MUFU pipe does 16 results a clock against 128 for
// FFMA, and with softcap each score takes two MUFU instructions (tanh, then exp2): per 128 x 128
// tile of the Hopper forward that is 2 x 16384 / 16 = 2048 clocks of MUFU, as many as the tile's
// two products take on the tensor cores (2 x 128^3 x 2 flops / 4096 a clock). Computing part of
// the exponentials here (9 instructions each, none of them MUFU) moves that share onto pipes with
// room to spare, as FlashAttention 4 does on Blackwell. Compiles on the host too, where
// tests/attn/test_exp2_fma.cpp checks it against std::exp2.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "varpack/attention_bounds.h"

namespace varpack::cuda {

// x's bits as a To of the same size (memcpy: defined behaviour, a register move once compiled).
template <class To, class From>
VARPACK_HOST_DEVICE To bits_as(From x) {
  static_assert(sizeof(To) == sizeof(From), "the same size");
  To y;
  std::memcpy(&y, &x, sizeof y);
  return y;
}

// 2^x for x < 127, with relative error below 1.1e-4 (2^-13.2: under bf16's and fp16's rounding of
// P); exactly 1 at 0, and exactly 0 below -125 (where ex2.approx.ftz gives 2^-125 .. 0) and at
// -inf (a masked score). x = n + f with n = round(x), f in [-0.5, 0.5]: 2^f by a cubic, then n
// added to its exponent field. Adding 1.5 * 2^23 rounds x to an integer held in the sum's low
// mantissa bits (two's complement), and shifting those bits by 23 (the rest of the sum shifts out
// of the word) gives n << 23 (one IMAD with the add). The cubic's coefficients: a least-squares
// fit of (2^f - 1) / f in relative error, reweighted toward the largest errors (Lawson's
// iteration) until equioscillating, over 20001 points of [-0.5, 0.5].
VARPACK_HOST_DEVICE float exp2_on_fma(float x) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23
  const float t = x + kRound;
  const float f = x - (t - kRound);
  float p = 0.05500869080424309f;
  p = std::fma(p, f, 0.24221062660217285f);
  p = std::fma(p, f, 0.6932829022407532f);
  p = std::fma(p, f, 1.f);
  const float y = bits_as<float>(bits_as<uint32_t>(p) + (bits_as<uint32_t>(t) << 23));
  return x < -125.f ? 0.f : y;
}

}  // namespace varpack::cuda
