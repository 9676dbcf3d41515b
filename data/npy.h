/// \file
/// NumPy .npy files (format versions 1.0, 2.0 and 3.0): read and write one array.
///
///     Tensor x = data::load_npy("x.npy");            // FormatError naming the file on any problem
///     data::save_npy("y.npy", logits);
///
/// Reading checks everything before trusting it: the magic `"\x93NUMPY"`, the version (1.0, 2.0 or
/// 3.0), the header length against the file, the header dict (exactly the keys 'descr',
/// 'fortran_order', 'shape'; descr one of '<f4' '<f8' '<f2' '<i4' '<i8' '|u1' '|b1' ('<u1' and
/// '<b1' are read too); fortran_order False only; shape a tuple of non-negative integers), and the
/// data size against product(shape) × item size. Big-endian and Fortran-order arrays are refused
/// with a message saying so.
///
/// Writing uses version 1.0 (2.0 when the header needs more than 65535 bytes), a header padded
/// with spaces to a multiple of 64 bytes ending in `'\n'`, as NumPy writes it.
#pragma once

#include <cstddef>
#include <string>

#include "core/ir/tensor.h"

namespace loom::data {

/// The array of the .npy file at `path`; throws FormatError naming the file when it cannot be
/// read or fails a check above.
Tensor load_npy(const std::string& path);
/// The same from bytes in memory; `what` names them in messages.
Tensor parse_npy(const void* data, std::size_t size, const std::string& what);

/// Writes `tensor` to the .npy file at `path`. Throws FormatError when the file cannot be
/// written, ValueError for a dtype NumPy has not (BFloat16).
void save_npy(const std::string& path, const Tensor& tensor);
/// The bytes of `tensor` as a .npy file (what save_npy writes); ValueError for a dtype NumPy has
/// not (BFloat16).
std::string serialize_npy(const Tensor& tensor);

}  // namespace loom::data
