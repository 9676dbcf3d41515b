// Event files: the record framing (shared/formats.md §3.1) and a synchronous writer that starts a
// new file when the current one would grow past max_file_size. SummaryRecord runs one on its
// background thread; nothing else needs to.
//
//   [u64 LE length N][u32 LE masked crc32c(length bytes)][N bytes payload][u32 LE masked crc32c(payload)]
//
// File names: events.out.tfevents.<10-digit unix seconds>.<hostname>.<pid>.<n><suffix>, where n
// counts the files this process opened (TensorBoard's own writer adds pid and a counter the same
// way), so rotated files and several writers in one second never collide. Every file starts with
// an Event{wall_time, file_version: "brain.Event:2"}.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "summary/proto/tensorboard.pb.h"

namespace loom::summary {

// The framed record of one payload (12 + N + 4 bytes).
std::string frame_record(std::string_view payload);

// "events.out.tfevents.<secs>.<host>.<pid>.<n><suffix>" for a file opened now.
std::string event_file_name(const std::string& suffix = "");

// Seconds since the epoch, as a double (Event.wall_time).
double wall_time_now();

class EventFileWriter {
 public:
  // Creates dir (and parents) and the first file. max_file_size: bytes per file, 0 for no limit;
  // a file is closed and a new one started before a record that would take it past the limit
  // (a record larger than the limit still goes, alone, into a file of its own). Throws loom::Error
  // when the directory or file cannot be created.
  EventFileWriter(std::string dir, std::int64_t max_file_size = 0, std::string suffix = "");
  ~EventFileWriter();  // close(), errors ignored
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Serializes and appends one event. Throws loom::Error on a write failure.
  void write(const tb::Event& event);
  void write_serialized(std::string_view payload);
  void flush();  // to the OS
  void close();

  // Every file opened, in order (full paths); the last is the current one.
  const std::vector<std::string>& files() const { return files_; }
  std::int64_t current_size() const { return size_; }

 private:
  void open_new_file();
  void append(const std::string& framed);

  std::string dir_;
  std::int64_t max_file_size_;
  std::string suffix_;
  std::FILE* file_ = nullptr;
  std::int64_t size_ = 0;          // bytes in the current file
  std::int64_t header_size_ = 0;   // bytes of the file_version record
  std::vector<std::string> files_;
};

}  // namespace loom::summary
