/// \file
/// MindSpore-compatible checkpoints (.ckpt). Layout: docs/formats.md (MindSpore's checkpoint
/// protobuf); design: docs/design.md "checkpoint/".
///
///     checkpoint::save_checkpoint(net, "lenet.ckpt");
///     checkpoint::Checkpoint ck = checkpoint::load_checkpoint("lenet.ckpt");
///     auto [param_not_load, ckpt_not_load] = checkpoint::load_param_into_net(net, ck.tensors);
///
/// Writing: one serialized Checkpoint message per Value, concatenated, in the order given; a tensor
/// over `chunk_bytes` (MindSpore: 512 MiB) is cut into raw byte slices written as adjacent Values
/// with the same tag, full dims and type. 0-d tensors are written with dims [0] (read as 0-d by
/// every MindSpore 2.x). Strings are written as MindSpore's `str` entries (UTF-32LE). The file is
/// written ATOMICALLY: to a temporary file in the same directory, flushed and fsync'ed, renamed
/// over the target, and the directory fsync'ed; a process killed at any point leaves either the
/// previous file or the new one, both complete (and perhaps the temporary file, which the next
/// save or resume in that directory removes: remove_orphaned_temporaries). As MindSpore, ".ckpt" is appended to a path
/// without it and the final file is made read-only (0400).
///
/// Reading checks everything before trusting it and throws FormatError naming the file, the
/// entry (index, byte offset, tag) and what is wrong: a truncated or overlong length, a field of
/// the wrong wire type, an unknown tensor_type, dims that are negative or overflow, content whose
/// size is not product(dims) × element size (over all chunks of a tag), non-adjacent chunks with
/// differing dims or types, an encrypted file (MindSpore's cipher magic numbers), a CRC trailer
/// that does not match (when checked), an empty checkpoint. It never crashes and never returns a
/// silently wrong tensor.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/tensor.h"

namespace loom::nn {
class Cell;
}  // namespace loom::nn

namespace loom::checkpoint {

/// Tensors by name (tag), in order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// What a checkpoint holds, in file order: tensors, and string values (MindSpore's append_dict
/// strings), each by tag.
struct Checkpoint {
  NamedTensors tensors;  ///< the tensors, by tag
  std::vector<std::pair<std::string, std::string>> strings;  ///< UTF-8

  /// The tensor with this tag, or null.
  const Tensor* find(const std::string& name) const;
};

/// MindSpore's chunk size, 512 MiB: SaveOptions::chunk_bytes's default.
inline constexpr std::int64_t kDefaultChunkBytes = std::int64_t{512} << 20;

/// The options of save_checkpoint and serialize_checkpoint.
struct SaveOptions {
  std::int64_t chunk_bytes = kDefaultChunkBytes;  ///< the largest tensor_content of one Value
  /// Append MindSpore 2.3+'s CRC trailer ("crc_num" + 10-byte big-endian zlib CRC-32). Readers
  /// before MindSpore 2.3 cannot parse such files, so it is off by default (as in MindSpore).
  bool crc = false;
};

/// Writes `ck`, `tensors` (in the order given) or every parameter of `cell` (parameters_and_names
/// order) to `path`. Returns the path written (with ".ckpt" appended when missing). Throws
/// ValueError on an empty or repeated name or a tensor not in host memory (backend::to_host
/// first; the Cell overload and checkpoint::training_state copy device parameters themselves),
/// FormatError (with errno text) when the file cannot be written; on any error the previous file
/// at `path` is untouched.
///@{
std::string save_checkpoint(const Checkpoint& ck, const std::string& path,
                            const SaveOptions& options = {});
std::string save_checkpoint(const NamedTensors& tensors, const std::string& path,
                            const SaveOptions& options = {});
std::string save_checkpoint(nn::Cell& cell, const std::string& path,
                            const SaveOptions& options = {});
///@}

/// Removes the temporary files ("<name>.ckpt.XXXXXX.tmp") that saves into `directory` left when
/// their process was killed before the rename, and returns their paths. A save in progress holds
/// a lock (flock) on its temporary file, which a killed process's save no longer does, so only
/// orphans go. save_checkpoint calls it for its directory; `loom train --resume` for --ckpt-dir.
/// A directory that cannot be read removes nothing.
std::vector<std::string> remove_orphaned_temporaries(const std::string& directory);

/// The bytes save_checkpoint writes (for in-memory use and tests).
std::string serialize_checkpoint(const Checkpoint& ck, const SaveOptions& options = {});

/// The options of load_checkpoint and parse_checkpoint.
struct LoadOptions {
  bool crc_check = false;  ///< verify the CRC trailer when present (it is stripped either way)
};

/// Throws ValueError when `path` does not end in ".ckpt" or does not exist.
Checkpoint load_checkpoint(const std::string& path, const LoadOptions& options = {});
/// The same from bytes (`what` names the source in errors).
Checkpoint parse_checkpoint(const void* data, std::size_t size, const std::string& what,
                            const LoadOptions& options = {});

/// MindSpore's load_param_into_net: copies each checkpoint tensor into the cell's parameter of the
/// same name (in place: the parameter keeps its storage, on its device). Returns (param_not_load:
/// the cell's parameters that got no value, ckpt_not_load: checkpoint tensors that matched no
/// parameter).
/// strict_load=false also matches a parameter by a checkpoint name ending in "." + its name (or
/// the reverse), and converts float↔float and int↔int dtypes. A shape mismatch (after squeezing
/// trailing 1s, as MindSpore allows) or a dtype mismatch not converted is a ValueError naming the
/// parameter and both shapes / dtypes; nothing is copied then (the net is left as it was).
std::pair<std::vector<std::string>, std::vector<std::string>> load_param_into_net(
    nn::Cell& cell, const NamedTensors& params, bool strict_load = false);

/// MindSpore's tensor_type string for a dtype ("Float32", "UInt8", "Bool"...).
std::string tensor_type_name(DType dtype);

}  // namespace loom::checkpoint
