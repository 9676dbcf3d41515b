// Static memory planning: lifetimes in launch order, offsets in one arena.
#include "runtime/memory_plan.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/ir/error.h"

namespace loom::runtime {

namespace {

bool overlaps_in_time(const BufferLife& a, const BufferLife& b) {
  return a.first <= b.last && b.first <= a.last;
}

struct Placed {
  std::size_t offset, end;
};

// The placed ranges of buffers live at the same time as `b`, sorted by offset.
std::vector<Placed> conflicts(const std::vector<BufferLife>& lives, const MemoryPlan& plan,
                              const std::vector<bool>& placed, const BufferLife& b) {
  std::vector<Placed> out;
  for (std::size_t j = 0; j < lives.size(); ++j) {
    if (placed[j] && lives[j].bytes > 0 && overlaps_in_time(lives[j], b)) {
      out.push_back({plan.offsets[j], plan.offsets[j] + round_up(lives[j].bytes)});
    }
  }
  std::sort(out.begin(), out.end(), [](const Placed& x, const Placed& y) { return x.offset < y.offset; });
  return out;
}

}  // namespace

std::size_t round_up(std::size_t bytes, std::size_t align) {
  return (bytes + align - 1) / align * align;
}

MemoryPlan plan_memory(const std::vector<BufferLife>& lives, PlanStrategy strategy) {
  if (strategy == PlanStrategy::kSmallerOfBoth) {
    MemoryPlan a = plan_memory(lives, PlanStrategy::kBestFit);
    MemoryPlan b = plan_memory(lives, PlanStrategy::kFirstFitDecreasing);
    return b.peak_bytes < a.peak_bytes ? b : a;
  }
  MemoryPlan plan;
  plan.offsets.assign(lives.size(), 0);
  std::vector<std::size_t> order(lives.size());
  std::iota(order.begin(), order.end(), 0);
  if (strategy == PlanStrategy::kFirstFitDecreasing) {
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return lives[a].bytes > lives[b].bytes;
    });
  } else {
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return lives[a].first < lives[b].first;
    });
  }
  std::vector<bool> placed(lives.size(), false);
  for (std::size_t i : order) {
    const std::size_t size = round_up(lives[i].bytes);
    plan.sum_bytes += size;
    if (size == 0) {
      placed[i] = true;
      continue;
    }
    std::vector<Placed> busy = conflicts(lives, plan, placed, lives[i]);
    // Walk the gaps between busy ranges.
    std::size_t cursor = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
    for (const Placed& p : busy) {
      if (p.offset > cursor) {
        const std::size_t gap = p.offset - cursor;
        if (gap >= size) {
          if (strategy == PlanStrategy::kFirstFitDecreasing) {
            best = cursor;
            break;
          }
          if (gap < best_gap) best = cursor, best_gap = gap;
        }
      }
      cursor = std::max(cursor, p.end);
    }
    if (best == SIZE_MAX) best = cursor;  // after every busy range
    plan.offsets[i] = best;
    plan.peak_bytes = std::max(plan.peak_bytes, best + size);
    placed[i] = true;
  }
  return plan;
}

void check_plan(const std::vector<BufferLife>& lives, const MemoryPlan& plan) {
  if (plan.offsets.size() != lives.size()) {
    throw InternalError("check_plan: expected " + std::to_string(lives.size()) +
                        " offsets, got " + std::to_string(plan.offsets.size()));
  }
  for (std::size_t i = 0; i < lives.size(); ++i) {
    const std::size_t size = round_up(lives[i].bytes);
    if (plan.offsets[i] % MemoryPlan::kAlign != 0 || plan.offsets[i] + size > plan.peak_bytes) {
      if (size == 0) continue;
      throw InternalError("check_plan: expected buffer " + std::to_string(i) +
                          " aligned and inside the arena, got offset " +
                          std::to_string(plan.offsets[i]));
    }
    for (std::size_t j = i + 1; j < lives.size(); ++j) {
      if (size == 0 || lives[j].bytes == 0 || !overlaps_in_time(lives[i], lives[j])) continue;
      const std::size_t a0 = plan.offsets[i], a1 = a0 + size;
      const std::size_t b0 = plan.offsets[j], b1 = b0 + round_up(lives[j].bytes);
      if (a0 < b1 && b0 < a1) {
        throw InternalError("check_plan: expected live buffers " + std::to_string(i) + " and " +
                            std::to_string(j) + " disjoint, got overlapping bytes [" +
                            std::to_string(a0) + ", " + std::to_string(a1) + ") and [" +
                            std::to_string(b0) + ", " + std::to_string(b1) + ")");
      }
    }
  }
}

}  // namespace loom::runtime
