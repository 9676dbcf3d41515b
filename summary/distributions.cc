// A collected step's histograms and gradient norms, from values taken at the step.
#include "summary/distributions.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "backends/backend.h"
#include "backends/thread_pool.h"
#include "summary/histogram.h"

namespace loom::summary {
namespace {

// Σx² in double (every value, NaN and inf included, as the norm should show them).
double sum_of_squares(const Tensor& t) {
  double lanes[8] = {};
  if (t.dtype() == DType::kFloat32) {
    const float* p = t.data<float>();
    const std::int64_t n = t.numel();
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int j = 0; j < 8; ++j) lanes[j] += static_cast<double>(p[i + j]) * p[i + j];
    }
    for (; i < n; ++i) lanes[0] += static_cast<double>(p[i]) * p[i];
  } else {
    for (double x : t.to_doubles()) lanes[0] += x * x;
  }
  double sq = 0;
  for (double l : lanes) sq += l;
  return sq;
}

HistogramParts parts_of(const ValuesCopy& v) {
  if (v.float32) return HistogramParts(std::span<const float>(v.f));
  return HistogramParts(std::span<const double>(v.d));
}

}  // namespace

void ValuesCopy::assign(const Tensor& t) {
  float32 = t.dtype() == DType::kFloat32;
  if (float32) {
    f.resize(static_cast<std::size_t>(t.numel()));
    if (f.empty()) return;
    if (t.is_host()) {
      std::memcpy(f.data(), t.data<float>(), f.size() * sizeof(float));
    } else {  // straight from the device into the reused vector
      backend::get_backend(t.device()).copy_to_host(f.data(), t.raw_data(), t.nbytes());
    }
  } else {
    d = backend::to_host(t).to_doubles();
  }
}

void StepValues::take(std::shared_ptr<const DistributionSelection> sel, std::int64_t s,
                      const std::vector<std::pair<std::string, Tensor>>* grads) {
  selection = std::move(sel);
  step = s;
  params.resize(selection->params.size());
  for (std::size_t i = 0; i < params.size(); ++i) params[i].assign(*selection->params[i]);
  gradients.clear();
  if (grads) {
    // Host tensors are referenced; device ones copied to the host now (the idle thread reads them).
    for (const auto& [name, g] : *grads) gradients.push_back(backend::to_host(g));
  }
}

std::vector<tb::Event> compute_distributions(const StepValues& in, bool use_pool) {
  const DistributionSelection& sel = *in.selection;
  // One job per histogram or norm, in the order of the events.
  struct Job {
    const std::string* name;  // a parameter histogram's tag; a gradient's parameter name
    const Tensor* gradient;   // null for a parameter
    bool histogram;
    std::optional<HistogramParts> parts;
    Histogram h;
    double sum_sq = 0;
  };
  std::vector<Job> jobs;
  jobs.reserve(in.params.size() + in.gradients.size());
  for (std::size_t i = 0; i < in.params.size(); ++i) {
    jobs.push_back({.name = &sel.param_tags[i], .gradient = nullptr, .histogram = true});
    jobs.back().parts.emplace(parts_of(in.params[i]));
  }
  for (std::size_t k = 0; k < in.gradients.size(); ++k) {
    jobs.push_back({.name = &sel.gradient_names[k],
                    .gradient = &in.gradients[k],
                    .histogram = sel.gradient_histogram[k] != 0});
    if (jobs.back().histogram) jobs.back().parts.emplace(in.gradients[k]);
  }
  std::vector<tb::Event> events;
  if (jobs.empty()) return events;
  struct Task {
    std::size_t job;
    std::int64_t part;  // the HistogramParts task; -1: the norm of a gradient without histogram
    std::int64_t size;
  };
  std::vector<Task> tasks;
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    Job& j = jobs[k];
    if (!j.histogram) {
      tasks.push_back({k, -1, j.gradient->numel()});
      continue;
    }
    for (std::int64_t i = 0; i < j.parts->num_tasks(); ++i)
      tasks.push_back({k, i, j.parts->task_size(i)});
  }
  auto run = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const Task& t = tasks[static_cast<std::size_t>(i)];
      Job& j = jobs[t.job];
      if (t.part >= 0) {
        j.parts->run(t.part);
      } else {
        j.sum_sq = sum_of_squares(*j.gradient);
      }
    }
  };
  const auto count = static_cast<std::int64_t>(tasks.size());
  if (use_pool) {
    std::stable_sort(tasks.begin(), tasks.end(),
                     [](const Task& a, const Task& b) { return a.size > b.size; });
    backend::ThreadPool::global().parallel_for(count, 1, run);
  } else {
    run(0, count);
  }
  for (Job& j : jobs) {
    if (!j.histogram) continue;
    j.h = j.parts->finish();
    j.parts.reset();
    // The histogram's sum of squares is the norm's, unless NaN / inf were left out.
    if (j.gradient)
      j.sum_sq = j.h.skipped == 0 ? j.h.proto.sum_squares() : sum_of_squares(*j.gradient);
  }
  auto event = [&](const std::string& tag) {
    tb::Event e;
    e.set_step(in.step);
    tb::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    return e;
  };
  double total = 0;
  for (Job& j : jobs) {
    if (j.gradient) total += j.sum_sq;
    if (!j.histogram) continue;
    events.push_back(event(j.gradient ? *j.name + "/grad" : *j.name));
    *events.back().mutable_summary()->mutable_value(0)->mutable_histo() = std::move(j.h.proto);
    if (j.gradient) {
      events.push_back(event("gradient_norm/" + *j.name));
      events.back().mutable_summary()->mutable_value(0)->set_simple_value(
          static_cast<float>(std::sqrt(j.sum_sq)));
    }
  }
  if (!in.gradients.empty()) {
    events.push_back(event("gradient_norm"));
    events.back().mutable_summary()->mutable_value(0)->set_simple_value(
        static_cast<float>(std::sqrt(total)));
  }
  return events;
}

}  // namespace loom::summary
