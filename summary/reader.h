/// \file
/// Reading event files back, checking every record: the length CRC and the data CRC, short reads,
/// and that each payload parses as an Event. Used by the tests and by `loom summary show DIR`.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "summary/proto/tensorboard.pb.h"

namespace loom::summary {

/// One record of an event file.
struct EventRecord {
  std::uint64_t offset = 0;  ///< of the record's first byte in the file
  tb::Event event;           ///< its payload, parsed
};

/// What read_event_file_checked read from a file.
struct EventFileContents {
  std::vector<EventRecord> records;  ///< every good record before the first bad one
  /// Set when the file is corrupt or truncated: "<path>: record at offset <R>: <what>" where what
  /// is e.g. "length CRC mismatch at offset 8 (stored 0x..., computed 0x...)" or
  /// "data CRC mismatch over bytes 12..40 (stored ..., computed ...)" (absolute file offsets).
  std::optional<std::string> error;
};

/// Reads a whole file; stops at the first bad record. Throws loom::FormatError when the file
/// cannot be opened.
EventFileContents read_event_file_checked(const std::string& path);
/// The same from a file's bytes in memory; `path` names them in the error.
EventFileContents parse_event_file(const std::string& data, const std::string& path);
/// The same, throwing loom::FormatError with that message on a bad record.
std::vector<EventRecord> read_event_file(const std::string& path);

/// The event files in dir (basename containing "tfevents"), in natural order of their names
/// (digit runs compared as numbers: by creation time within one writer). A path naming a file
/// gives that file alone. Throws FormatError when the path does not exist.
std::vector<std::string> list_event_files(const std::string& dir);

/// Prints, per file, its records and steps, then each tag in order of first appearance with its
/// kind and last value; then the errors. Returns 0 when every record of every file is good, 1
/// otherwise (the good records before a bad one are still shown).
///
///     events.out.tfevents.1700000000.host.42.0: 14 records, steps 0..10
///       scalar     loss                  step 10  0.25
///       histogram  fc.weight             step 10  num 12 min -0.5 max 0.5 mean 0.01
///       image      input                 step 1   28x28x1 PNG 345 bytes
///       text       note                  step 0   "hello"
///       hparams    _hparams_/session_start_info  step 0  batch_size=32 lr=0.1 model="LeNet5"
///       graph      (graph_def)           step 0   12 nodes
///     error: <path>: record at offset 120: data CRC mismatch over bytes 132..160 (...)
int show(const std::string& dir, std::ostream& out);
/// What show() prints for one file's good records (named `name`), without its error.
void describe(const std::string& name, const EventFileContents& contents, std::ostream& out);

}  // namespace loom::summary
