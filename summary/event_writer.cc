#include "summary/event_writer.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/ir/error.h"
#include "summary/crc32c.h"

namespace loom::summary {
namespace {

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::atomic<std::uint64_t> g_file_counter{0};

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

std::string frame_record(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_u64(out, payload.size());
  put_u32(out, masked_crc32c(out.data(), 8));
  out.append(payload);
  put_u32(out, masked_crc32c(payload.data(), payload.size()));
  return out;
}

double wall_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string event_file_name(const std::string& suffix) {
  const auto secs = static_cast<long long>(wall_time_now());
  return "events.out.tfevents." + std::to_string(secs) + "." + host_name() + "." +
         std::to_string(::getpid()) + "." + std::to_string(g_file_counter.fetch_add(1)) + suffix;
}

EventFileWriter::EventFileWriter(std::string dir, std::int64_t max_file_size, std::string suffix)
    : dir_(std::move(dir)), max_file_size_(max_file_size), suffix_(std::move(suffix)) {
  if (max_file_size_ < 0)
    throw ValueError("SummaryRecord: expected max_file_size >= 0, got " +
                     std::to_string(max_file_size_));
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw Error("SummaryRecord: cannot create directory '" + dir_ + "': " + ec.message());
  open_new_file();
}

EventFileWriter::~EventFileWriter() {
  try {
    close();
  } catch (...) {
  }
}

void EventFileWriter::open_new_file() {
  if (file_) close();
  const std::string path = (std::filesystem::path(dir_) / event_file_name(suffix_)).string();
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_)
    throw Error("SummaryRecord: cannot create event file '" + path + "': " + std::strerror(errno));
  files_.push_back(path);
  size_ = 0;
  tb::Event first;
  first.set_wall_time(wall_time_now());
  first.set_file_version("brain.Event:2");
  first.mutable_source_metadata()->set_writer("loom");
  append(frame_record(first.SerializeAsString()));
  header_size_ = size_;
}

void EventFileWriter::append(const std::string& framed) {
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size())
    throw Error("SummaryRecord: cannot write event file '" + files_.back() +
                "': " + std::strerror(errno));
  size_ += static_cast<std::int64_t>(framed.size());
}

void EventFileWriter::write(const tb::Event& event) { write_serialized(event.SerializeAsString()); }

void EventFileWriter::write_serialized(std::string_view payload) {
  std::string framed = frame_record(payload);
  if (!file_) open_new_file();
  if (max_file_size_ > 0 && size_ > header_size_ &&
      size_ + static_cast<std::int64_t>(framed.size()) > max_file_size_)
    open_new_file();
  append(framed);
}

void EventFileWriter::flush() {
  if (file_ && std::fflush(file_) != 0)
    throw Error("SummaryRecord: cannot flush event file '" + files_.back() +
                "': " + std::strerror(errno));
}

void EventFileWriter::close() {
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fclose(f) != 0)
    throw Error("SummaryRecord: cannot close event file '" + files_.back() +
                "': " + std::strerror(errno));
}

}  // namespace loom::summary
