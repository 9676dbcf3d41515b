/// \file
/// The static memory plan of a compiled graph (ggml style: planned once from the graph, never per
/// run): every intermediate tensor gets an offset in one arena, from its lifetime in the launch
/// order. Values whose lifetimes overlap never share bytes; check_plan proves it.
///
///     std::vector<BufferLife> lives = ...;       // size and [first, last] launch of each buffer
///     MemoryPlan plan = plan_memory(lives);       // best-fit or first-fit by size, the smaller
///     check_plan(lives, plan);                    // throws InternalError on an overlap
///     plan.peak_bytes <= sum of sizes
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::runtime {

/// One buffer to place: its byte size and the launches at which it is live (written at `first`,
/// last read at `last`; a graph output lives to the last launch).
struct BufferLife {
  std::size_t bytes = 0;   ///< the buffer's size in bytes (rounded up to kAlign when placed)
  std::int64_t first = 0;  ///< the launch that writes it first
  std::int64_t last = 0;   ///< the last launch that reads it (inclusive)
};

/// How plan_memory places the buffers.
enum class PlanStrategy {
  kBestFit,               ///< in order of first use, the smallest free gap that fits (then the end)
  kFirstFitDecreasing,    ///< largest first, at the lowest offset free over its lifetime
  kSmallerOfBoth,         ///< runs both, keeps the smaller peak (the default of compile())
};

/// Where each buffer lives in the arena, and the arena's size.
struct MemoryPlan {
  std::vector<std::size_t> offsets;  ///< one per BufferLife, multiples of kAlign
  std::size_t peak_bytes = 0;        ///< the arena size
  std::size_t sum_bytes = 0;         ///< Σ rounded sizes: the footprint without reuse
  static constexpr std::size_t kAlign = 64;  ///< the alignment of every offset, in bytes
};

/// `bytes` rounded up to a multiple of `align`.
std::size_t round_up(std::size_t bytes, std::size_t align = MemoryPlan::kAlign);

/// Places every buffer of `lives` in one arena with `strategy`: buffers live at the same time
/// never share bytes; the offsets are multiples of MemoryPlan::kAlign.
MemoryPlan plan_memory(const std::vector<BufferLife>& lives,
                       PlanStrategy strategy = PlanStrategy::kSmallerOfBoth);

/// Throws InternalError naming the two buffers when two simultaneously live buffers overlap, an
/// offset is misaligned, or a buffer exceeds the arena.
void check_plan(const std::vector<BufferLife>& lives, const MemoryPlan& plan);

}  // namespace loom::runtime
