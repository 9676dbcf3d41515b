// .npy reading and writing: round trips for every dtype, files as NumPy writes them (versions
// 1.0, 2.0, 3.0), and every malformed-header and size check.
#include "data/npy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/ir/error.h"

namespace loom::data {
namespace {

std::string npy(int major, const std::string& dict, const std::string& data) {
  std::string h = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  if (major > 1) out += std::string(2, '\0');
  return out + h + data;
}

std::string error_of(const std::string& bytes) {
  try {
    parse_npy(bytes.data(), bytes.size(), "x.npy");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "no error";
}

std::string f32_bytes(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

TEST(Npy, RoundTripsEveryDType) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt32, DType::kInt64,
                  DType::kUInt8, DType::kBool}) {
    Tensor t(d, {2, 3});
    for (int i = 0; i < 6; ++i) t.set(i, d == DType::kBool ? i % 2 : i * 1.5 - 2);
    const std::string bytes = serialize_npy(t);
    EXPECT_EQ(bytes.size() % 64, t.nbytes() % 64) << "header padded to 64";
    Tensor back = parse_npy(bytes.data(), bytes.size(), "t");
    EXPECT_TRUE(back.bitwise_equal(t)) << dtype_name(d);
  }
  Tensor scalar = Tensor::scalar(DType::kFloat32, 3.5);
  std::string b = serialize_npy(scalar);
  EXPECT_NE(b.find("'shape': ()"), std::string::npos);
  EXPECT_TRUE(parse_npy(b.data(), b.size(), "s").bitwise_equal(scalar));
  Tensor vec = Tensor::from_vector<float>({3}, {1, 2, 3});
  b = serialize_npy(vec);
  EXPECT_NE(b.find("'shape': (3,)"), std::string::npos);
  EXPECT_EQ(b.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
}

TEST(Npy, ReadsNumPyFilesOfEachVersion) {
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  for (int major : {1, 2, 3}) {
    const std::string bytes = npy(major, dict, f32_bytes({1.5f, -2.f}));
    Tensor t = parse_npy(bytes.data(), bytes.size(), "x.npy");
    ASSERT_EQ(t.shape(), Shape({2}));
    EXPECT_EQ(t.data<float>()[0], 1.5f);
    EXPECT_EQ(t.data<float>()[1], -2.f);
  }
}

TEST(Npy, SaveAndLoadAFile) {
  const std::string path = ::testing::TempDir() + "/npy_test.npy";
  Tensor t = Tensor::from_vector<std::int64_t>({2, 2}, {1, -2, 3, 1LL << 40});
  save_npy(path, t);
  EXPECT_TRUE(load_npy(path).bitwise_equal(t));
  EXPECT_THROW(load_npy(path + ".missing"), FormatError);
}

TEST(Npy, RejectsMalformedFiles) {
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string data = f32_bytes({1.f, 2.f});
  EXPECT_NE(error_of("\x93NUMPX" + std::string(60, ' ')).find("magic"), std::string::npos);
  EXPECT_NE(error_of("").find("magic"), std::string::npos);
  std::string v4 = npy(1, good_dict, data);
  v4[6] = 4;
  EXPECT_NE(error_of(v4).find("version 1.0, 2.0 or 3.0, got 4.0"), std::string::npos);
  std::string v11 = npy(1, good_dict, data);
  v11[7] = 1;
  EXPECT_NE(error_of(v11).find("got 1.1"), std::string::npos);
  EXPECT_NE(error_of(npy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", data))
                .find("little-endian"),
            std::string::npos);
  EXPECT_NE(error_of(npy(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", data))
                .find("'<c8'"),
            std::string::npos);
  EXPECT_NE(error_of(npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data))
                .find("fortran_order False"),
            std::string::npos);
  EXPECT_NE(error_of(npy(1, "{'descr': '<f4', 'shape': (2,), }", data)).find("header keys"),
            std::string::npos);
  EXPECT_NE(error_of(npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", data))
                .find("non-negative"),
            std::string::npos);
  EXPECT_NE(error_of(npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", data))
                .find("expected 12 bytes of data"),
            std::string::npos);
  EXPECT_NE(error_of(npy(1, good_dict, data + "x")).find("got 9"), std::string::npos);
  EXPECT_NE(error_of(npy(1, "{'descr': '<f4' 'fortran_order': False}", data)).find("expected"),
            std::string::npos);
  EXPECT_NE(error_of(npy(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (1,), }",
                         std::string(1, '\x02')))
                .find("bool"),
            std::string::npos);
  // Every truncation of a valid file is an error.
  const std::string whole = npy(1, good_dict, data);
  for (std::size_t n = 0; n < whole.size(); ++n) {
    EXPECT_THROW(parse_npy(whole.data(), n, "cut"), FormatError) << n;
  }
}

}  // namespace
}  // namespace loom::data
