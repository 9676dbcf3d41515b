/// \file
/// seed_all and the random streams every host-side draw uses (initializers now; data shuffling and
/// augmentation later). Design: docs/design.md, "Determinism".
///
/// A RandomStream is Philox-4x32-10 (core/random/philox.h) keyed by the global seed in force when the
/// stream was made, with the stream's stable id in the upper half of the counter and a 64-bit word
/// position in the lower half. Word w of a stream is philox::stream_block(seed, id, w / 4)[w % 4].
/// Each draw consumes a fixed number of words per element (uniform: 1, normal: 2, truncated
/// normal: 2), so element i of a draw is a function of (seed, id, position) alone: drawing 1000
/// then 1000 gives the same numbers as drawing 2000, and nothing depends on thread count, on how a
/// fill is chunked, or on the process. The fills here are serial (host-side initialization is
/// small next to training); a parallel fill would give the same bits because of the addressing.
///
/// ```
/// seed_all(42);
/// RandomStream s("conv1.weight");        // id = stream_id("conv1.weight"), FNV-1a 64
/// Tensor w(DType::kFloat32, {16, 3, 3, 3});
/// s.fill_normal(w, 0.0, 0.01);
/// ```
///
/// Deterministic mode: seed_all(seed, true) also makes cpu::default_gemm() choose Eigen, whose
/// results are bitwise the same for any thread count (OpenBLAS's are not). LOOM_GEMM, when set,
/// still takes precedence over this. The reductions in loom's own CPU kernels are already
/// thread-count independent (ThreadPool::parallel_for's chunk boundaries depend only on the size
/// and grain, and partials are combined in chunk order: backends/thread_pool.h), so nothing else
/// changes in deterministic mode on the CPU today.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/ir/tensor.h"

namespace loom::random {

/// Sets the global seed (read by RandomStreams made afterwards) and deterministic mode. The
/// initial state is seed 0, deterministic off. Thread-safe (atomics).
void seed_all(std::uint64_t seed, bool deterministic = false);
/// The global seed seed_all set last (0 initially).
std::uint64_t global_seed();
/// Whether seed_all turned deterministic mode on (off initially).
bool deterministic_mode();

/// A stable 64-bit id for a stream name: FNV-1a 64 of its bytes (the same in every process,
/// build and platform, unlike std::hash).
std::uint64_t stream_id(std::string_view name);

/// A stream of random words: Philox-4x32-10 keyed by (seed, id), read from a word position that
/// every draw advances (the addressing is described in random.h). Not thread-safe.
class RandomStream {
 public:
  /// Keyed by global_seed() now and stream_id(name).
  explicit RandomStream(std::string_view name);
  /// Keyed explicitly.
  RandomStream(std::uint64_t seed, std::uint64_t id, std::uint64_t position = 0);

  /// The seed the stream is keyed by.
  std::uint64_t seed() const { return seed_; }
  /// The stream's id (stream_id of its name for a named stream).
  std::uint64_t id() const { return id_; }
  /// The next word position (a counter; saved and restored with a checkpoint).
  std::uint64_t position() const { return position_; }
  /// Moves the stream to word `position` (restoring a checkpointed stream).
  void set_position(std::uint64_t position) { position_ = position; }

  /// n raw 32-bit words; advances the position by n.
  std::vector<std::uint32_t> words(std::int64_t n);
  /// n uniforms in [0, 1), each from one word's top 24 bits (philox::uniform01: exact in
  /// Float32). Advances by n.
  std::vector<float> uniform(std::int64_t n);
  /// n standard normals, each from two words by Box–Muller (the cosine branch only, so that each
  /// element owns its two words): u1 = (w0 + 0.5) 2^-32 in (0, 1), u2 = w1 2^-32,
  /// z = sqrt(-2 ln u1) cos(2π u2), computed in double. Advances by 2n.
  std::vector<double> normal(std::int64_t n);
  /// n standard normals truncated to [a, b] by the inverse CDF (no redraws, so each element owns
  /// exactly two words): U = a 53-bit uniform from the two words, p = Φ(a) + U (Φ(b) − Φ(a)),
  /// z = Φ⁻¹(p) (Acklam's approximation refined by one Halley step on erfc), clamped to [a, b].
  /// Advances by 2n. Throws ValueError unless a < b.
  std::vector<double> truncated_normal(std::int64_t n, double a = -2.0, double b = 2.0);

  /// Fills a floating tensor (Float32, Float64, Float16, BFloat16; else TypeError) in flat order
  /// with lo + (hi − lo) u, u from uniform(): in [lo, hi) up to the rounding to the tensor's dtype.
  void fill_uniform(Tensor& t, double lo, double hi);
  /// Fills a floating tensor (else TypeError) in flat order with mean + std · z, z from normal().
  void fill_normal(Tensor& t, double mean, double std);
  /// Fills a floating tensor (else TypeError) in flat order with mean + std · z, z from
  /// truncated_normal(): a standard normal truncated to [a, b] (bounds in units of std).
  void fill_truncated_normal(Tensor& t, double mean, double std, double a = -2.0, double b = 2.0);

 private:
  std::uint64_t seed_;
  std::uint64_t id_;
  std::uint64_t position_;
};

}  // namespace loom::random
