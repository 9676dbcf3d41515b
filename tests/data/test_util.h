// Helpers for the data/ tests: a scratch directory, file writers, error capture.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/ir/tensor.h"
#include "data/dataset.h"
#include "tests/temp_dir.h"

namespace loom::data::testing {

using loom::testing::TempDir;


inline void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

inline void write_gzip(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (!bytes.empty()) gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

// An IDX file: magic, big-endian dims, then the payload.
inline std::vector<std::uint8_t> idx_bytes(std::uint32_t magic,
                                           const std::vector<std::uint32_t>& dims,
                                           const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> b;
  auto be = [&](std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
  };
  be(magic);
  for (std::uint32_t d : dims) be(d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

// The message of the E that f() throws, or "<no error>" / "<other error: ...>".
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<other error: ") + e.what() + ">";
  }
  return "<no error>";
}

// Every row of `d` for `epoch`, in index order.
inline std::vector<Row> all_rows(const DatasetPtr& d, std::int64_t epoch = 0) {
  std::vector<Row> rows;
  for (std::int64_t i = 0; i < d->size(); ++i) rows.push_back(d->get(epoch, i));
  return rows;
}

// Column c of every row as a flat list of doubles (for exact comparisons).
inline std::vector<double> column_values(const std::vector<Row>& rows, std::size_t c) {
  std::vector<double> out;
  for (const Row& r : rows) {
    for (double v : r[c].to_doubles()) out.push_back(v);
  }
  return out;
}

}  // namespace loom::data::testing
