// Synthetic dumps in MindSpore's layout for the dump reader's and `loom compare`'s tests: a
// temporary folder removed at the end, tensors written with data::save_npy under the names the
// layout gives them, and the text files (execution order, statistic.csv, graphs) as given.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/ir/tensor.h"
#include "data/npy.h"

namespace loom::debug::testing {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("loom_dump_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_text(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
}

// One dump: {root}/rank_{rank}/...
class DumpWriter {
 public:
  DumpWriter(std::filesystem::path root, int rank = 0, std::string net = "Net")
      : rank_dir_(root / ("rank_" + std::to_string(rank))), net_(std::move(net)) {
    std::filesystem::create_directories(rank_dir_ / ".dump_metadata");
    write_text(rank_dir_ / ".dump_metadata" / "data_dump.json", "{}\n");
  }
  const std::filesystem::path& rank_dir() const { return rank_dir_; }
  std::filesystem::path iteration_dir(std::int64_t graph, std::int64_t iteration) const {
    return rank_dir_ / net_ / std::to_string(graph) / std::to_string(iteration);
  }
  // Writes {op_type}.{op_name}.0.0.{ts}.{io}.{slot}.DefaultFormat.npy; returns its path.
  std::string tensor(std::int64_t graph, std::int64_t iteration, const std::string& op_type,
                     const std::string& op_name, std::int64_t ts, const std::string& io,
                     std::int64_t slot, const Tensor& t) const {
    const std::filesystem::path dir = iteration_dir(graph, iteration);
    std::filesystem::create_directories(dir);
    const std::string file = (dir / (op_type + "." + op_name + ".0.0." + std::to_string(ts) + "." +
                                     io + "." + std::to_string(slot) + ".DefaultFormat.npy"))
                                 .string();
    data::save_npy(file, t);
    return file;
  }
  void execution_order(std::int64_t graph, const std::string& csv) const {
    write_text(rank_dir_ / "execution_order" /
                   ("ms_execution_order_graph_" + std::to_string(graph) + ".csv"),
               csv);
  }
  void graph_ir(std::int64_t graph, const std::string& text) const {
    write_text(rank_dir_ / "graphs" / ("ms_output_trace_code_graph_" + std::to_string(graph) +
                                       ".ir"),
               text);
  }

 private:
  std::filesystem::path rank_dir_;
  std::string net_;
};

inline Tensor f32(Shape shape, const std::vector<float>& v) {
  return Tensor::from_vector<float>(std::move(shape), v);
}
inline Tensor f64(Shape shape, const std::vector<double>& v) {
  return Tensor::from_vector<double>(std::move(shape), v);
}

}  // namespace loom::debug::testing
