// Philox-4x32-10, the counter-based random generator of Salmon et al., "Parallel random numbers:
// as easy as 1, 2, 3" (SC'11, the Random123 library), and how loom's random kernels address it.
//
// A counter-based generator is a keyed bijection: block(counter, key) gives four 32-bit words,
// and each (counter, key) pair is drawn from independently. A kernel that gives element i the
// counter i / 4 and the word i % 4 draws the same numbers whatever its chunking or thread count,
// which is what makes Dropout's mask a function of (key, i) alone. The results agree with
// Random123's philox4x32 at R = 10 (its known-answer vectors are checked in
// tests/ops/activation_test.cc).
//
//   const philox::Block r = philox::stream_block(seed, stream, i / 4);
//   const float u = philox::uniform01(r[i % 4]);  // in [0, 1)
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace loom::random::philox {

using Block = std::array<std::uint32_t, 4>;  // a counter, or the four words drawn for it
using Key = std::array<std::uint32_t, 2>;

inline constexpr std::uint32_t kMultiplier0 = 0xD2511F53u;
inline constexpr std::uint32_t kMultiplier1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;  // 2^32 / golden ratio
inline constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;  // 2^32 (sqrt(3) - 1)
inline constexpr int kRounds = 10;

// One Philox round: two 32x32→64 multiplies, the high halves mixed with the other words and key.
inline Block one_round(const Block& c, const Key& k) {
  const std::uint64_t p0 = static_cast<std::uint64_t>(kMultiplier0) * c[0];
  const std::uint64_t p1 = static_cast<std::uint64_t>(kMultiplier1) * c[2];
  return {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
          static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
}

// The four words Philox-4x32-10 draws for `counter` under `key`.
inline Block block(Block counter, Key key) {
  for (int r = 0; r < kRounds; ++r) {
    if (r > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    counter = one_round(counter, key);
  }
  return counter;
}

// Block `index` of the stream named by two 64-bit words, the layout of a random op's Int64 key
// tensor of shape (2,): `seed` is the Philox key (low word first) and `stream` fills the upper
// half of the counter, `index` the lower. Every bit of both words matters, and distinct
// (seed, stream, index) triples never share a (key, counter) pair.
inline Block stream_block(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return block({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)},
               {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}

// The same blocks as stream_block for indices first .. first + kBatch - 1, word w of block
// first + j in words[w][j]: laid out so the compiler runs the rounds on vectors of blocks.
inline constexpr int kBatch = 16;
inline void stream_batch(std::uint64_t seed, std::uint64_t stream, std::uint64_t first,
                         std::uint32_t (&words)[4][kBatch]) {
  std::uint32_t* c0 = words[0];
  std::uint32_t* c1 = words[1];
  std::uint32_t* c2 = words[2];
  std::uint32_t* c3 = words[3];
  for (int j = 0; j < kBatch; ++j) {
    const std::uint64_t index = first + static_cast<std::uint64_t>(j);
    c0[j] = static_cast<std::uint32_t>(index);
    c1[j] = static_cast<std::uint32_t>(index >> 32);
    c2[j] = static_cast<std::uint32_t>(stream);
    c3[j] = static_cast<std::uint32_t>(stream >> 32);
  }
  Key key = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  for (int r = 0; r < kRounds; ++r) {
    if (r > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    for (int j = 0; j < kBatch; ++j) {
      const std::uint64_t p0 = static_cast<std::uint64_t>(kMultiplier0) * c0[j];
      const std::uint64_t p1 = static_cast<std::uint64_t>(kMultiplier1) * c2[j];
      const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1[j] ^ key[0];
      const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3[j] ^ key[1];
      c1[j] = static_cast<std::uint32_t>(p1);
      c3[j] = static_cast<std::uint32_t>(p0);
      c0[j] = n0;
      c2[j] = n2;
    }
  }
}

// A uniform float in [0, 1) from the word's top 24 bits: exact in Float32, and every value a
// multiple of 2^-24, so comparing it with a probability gives the same answer in any precision.
inline float uniform01(std::uint32_t word) {
  return static_cast<float>(word >> 8) * 0x1p-24f;
}

// The bound b with uniform01(w) < p exactly when (w >> 8) < b, for p in (0, 1]: an integer test
// with the same answers (uniform01(w) < p means (w >> 8) < p * 2^24, and p * 2^24 is exact).
inline std::uint32_t uniform01_bound(double p) {
  return static_cast<std::uint32_t>(std::ceil(p * 0x1p24));
}

}  // namespace loom::random::philox
