// IDX (MNIST / Fashion-MNIST) and CIFAR-10 readers: small synthetic files read back exactly, every
// malformed-file check with its exact message, and the real Fashion-MNIST test set.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>

#include "core/ir/error.h"
#include "data/dataset.h"
#include "tests/data/test_util.h"

namespace loom::data {
namespace {

using testing::error_of;
using testing::idx_bytes;
using testing::TempDir;

// 3 images of 2 x 3 pixels with pixel p of image n = 10 n + p, and labels 7, 0, 9.
std::vector<std::uint8_t> images3() {
  std::vector<std::uint8_t> px;
  for (int n = 0; n < 3; ++n) {
    for (int p = 0; p < 6; ++p) px.push_back(static_cast<std::uint8_t>(10 * n + p));
  }
  return idx_bytes(0x803, {3, 2, 3}, px);
}
std::vector<std::uint8_t> labels3() { return idx_bytes(0x801, {3}, {7, 0, 9}); }

void write_set(const TempDir& dir, const std::string& prefix, bool gzip,
               const std::vector<std::uint8_t>& images, const std::vector<std::uint8_t>& labels) {
  const std::string ext = gzip ? ".gz" : "";
  auto write = gzip ? testing::write_gzip : testing::write_bytes;
  write(dir.file(prefix + "-images-idx3-ubyte" + ext), images);
  write(dir.file(prefix + "-labels-idx1-ubyte" + ext), labels);
}

void expect_three_rows(const DatasetPtr& d) {
  ASSERT_EQ(d->size(), 3);
  EXPECT_EQ(d->column_names(), (std::vector<std::string>{"image", "label"}));
  const std::array<int, 3> labels = {7, 0, 9};
  for (int n = 0; n < 3; ++n) {
    const Row r = d->get(0, n);
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].dtype(), DType::kUInt8);
    EXPECT_EQ(r[0].shape(), (Shape{2, 3, 1}));
    for (int p = 0; p < 6; ++p) EXPECT_EQ(r[0].get(p), 10 * n + p);
    EXPECT_EQ(r[1].dtype(), DType::kInt32);
    EXPECT_EQ(r[1].shape(), Shape{});
    EXPECT_EQ(r[1].get(0), labels[n]);
  }
}

TEST(IdxReader, PlainAndGzipReadBackExactly) {
  for (bool gzip : {false, true}) {
    TempDir dir;
    write_set(dir, "train", gzip, images3(), labels3());
    expect_three_rows(MnistDataset(dir.path(), "train"));
    const Tensor t =
        read_idx(dir.file(std::string("train-images-idx3-ubyte") + (gzip ? ".gz" : "")));
    EXPECT_EQ(t.shape(), (Shape{3, 2, 3}));
    EXPECT_EQ(t.get(17), 25);
  }
}

TEST(IdxReader, GzipDetectedByContentNotName) {
  TempDir dir;
  testing::write_gzip(dir.file("x.idx"), labels3());
  const Tensor t = read_idx(dir.file("x.idx"));
  EXPECT_EQ(t.shape(), Shape{3});
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{7, 0, 9}));
}

TEST(IdxReader, AllIsTrainThenTest) {
  TempDir dir;
  write_set(dir, "train", true, images3(), labels3());
  write_set(dir, "t10k", false, idx_bytes(0x803, {1, 2, 3}, {1, 2, 3, 4, 5, 6}),
            idx_bytes(0x801, {1}, {4}));
  const DatasetPtr d = MnistDataset(dir.path(), "all");
  ASSERT_EQ(d->size(), 4);
  EXPECT_EQ(d->get(0, 2)[1].get(0), 9);
  EXPECT_EQ(d->get(0, 3)[1].get(0), 4);
  EXPECT_EQ(d->get(0, 3)[0].get(5), 6);
  EXPECT_EQ(MnistDataset(dir.path(), "test")->size(), 1);
  EXPECT_EQ(d->describe(), "MnistDataset(all)");
}

TEST(IdxReader, TruncatedImageData) {
  TempDir dir;
  std::vector<std::uint8_t> im = images3();
  im.resize(im.size() - 5);  // 13 of the 18 pixel bytes
  write_set(dir, "train", true, im, labels3());
  EXPECT_EQ(error_of<FormatError>([&] { MnistDataset(dir.path(), "train"); }),
            dir.file("train-images-idx3-ubyte.gz") + ": expected 18 bytes of image data, got 13");
}

TEST(IdxReader, TruncatedHeaderAndEmptyFile) {
  TempDir dir;
  testing::write_bytes(dir.file("a"), {0, 0, 8, 3, 0, 0});
  EXPECT_EQ(error_of<FormatError>([&] { read_idx(dir.file("a")); }),
            dir.file("a") + ": expected a header of 16 bytes, got 6");
  testing::write_bytes(dir.file("b"), {});
  EXPECT_EQ(error_of<FormatError>([&] { read_idx(dir.file("b")); }),
            dir.file("b") + ": expected a 4-byte IDX magic, got a file of 0 bytes");
}

TEST(IdxReader, CorruptGzip) {
  TempDir dir;
  testing::write_gzip(dir.file("full.gz"), images3());
  std::vector<std::uint8_t> raw;
  {
    FILE* f = std::fopen(dir.file("full.gz").c_str(), "rb");
    int c;
    while ((c = std::fgetc(f)) != EOF) raw.push_back(static_cast<std::uint8_t>(c));
    std::fclose(f);
  }
  raw.resize(raw.size() / 2);
  testing::write_bytes(dir.file("half.gz"), raw);
  const std::string msg = error_of<FormatError>([&] { read_idx(dir.file("half.gz")); });
  EXPECT_EQ(msg.rfind(dir.file("half.gz") + ": corrupt or truncated gzip data", 0), 0u) << msg;
}

TEST(IdxReader, WrongMagic) {
  TempDir dir;
  // Labels where images belong.
  write_set(dir, "train", true, labels3(), labels3());
  EXPECT_EQ(error_of<FormatError>([&] { MnistDataset(dir.path(), "train"); }),
            dir.file("train-images-idx3-ubyte.gz") + ": expected magic 0x00000803, got 0x00000801");
}

TEST(IdxReader, CountMismatch) {
  TempDir dir;
  write_set(dir, "train", false, images3(), idx_bytes(0x801, {2}, {1, 2}));
  EXPECT_EQ(error_of<FormatError>([&] { MnistDataset(dir.path(), "train"); }),
            dir.file("train-images-idx3-ubyte") + ": expected as many images as " +
                dir.file("train-labels-idx1-ubyte") + " has labels (2), got 3");
}

TEST(IdxReader, LabelOutOfRange) {
  TempDir dir;
  write_set(dir, "train", false, images3(), idx_bytes(0x801, {3}, {1, 10, 2}));
  EXPECT_EQ(error_of<FormatError>([&] { MnistDataset(dir.path(), "train"); }),
            dir.file("train-labels-idx1-ubyte") + ": expected labels below 10, got 10 at label 1");
}

TEST(IdxReader, MissingFilesAndBadUsage) {
  TempDir dir;
  EXPECT_EQ(error_of<FormatError>([&] { MnistDataset(dir.path(), "test"); }),
            dir.file("t10k-images-idx3-ubyte") + "[.gz]: no such file");
  EXPECT_EQ(error_of<ValueError>([&] { MnistDataset(dir.path(), "valid"); }),
            "MnistDataset: expected usage \"train\", \"test\" or \"all\", got \"valid\"");
  EXPECT_EQ(error_of<FormatError>([&] { read_idx(dir.file("none")); }),
            dir.file("none") + ": cannot open: No such file or directory");
}

TEST(FashionMnist, DebianTestSet) {
  const std::string dir = fashion_mnist_dir("");
  EXPECT_EQ(dir, "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(fashion_mnist_dir(dir), dir);
  const DatasetPtr d = MnistDataset(dir, "test");
  ASSERT_EQ(d->size(), 10000);
  const Row r0 = d->get(0, 0);
  EXPECT_EQ(r0[0].shape(), (Shape{28, 28, 1}));
  // Pinned from the file: the first test image is an ankle boot (9), its pixels sum to 33456,
  // the centre pixel (14, 14) is 110.
  EXPECT_EQ(r0[1].get(0), 9);
  double sum = 0;
  for (double v : r0[0].to_doubles()) sum += v;
  EXPECT_EQ(sum, 33456);
  EXPECT_EQ(r0[0].get(14 * 28 + 14), 110);
  std::array<int, 10> histogram{};
  for (std::int64_t i = 0; i < d->size(); ++i) {
    ++histogram[static_cast<std::size_t>(d->get(0, i)[1].get(0))];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], 1000) << "class " << c;
}

TEST(FashionMnist, DirWithoutFiles) {
  TempDir dir;
  EXPECT_EQ(error_of<ValueError>([&] { fashion_mnist_dir(dir.path()); }),
            "fashion_mnist_dir: " + dir.path() +
                " does not hold the four Fashion-MNIST files "
                "({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz])");
}

// A CIFAR-10 record: label, then R, G, B planes of 32 x 32 with value (plane base + p) % 256.
std::vector<std::uint8_t> cifar_record(std::uint8_t label, int base) {
  std::vector<std::uint8_t> r{label};
  for (int c = 0; c < 3; ++c) {
    for (int p = 0; p < 1024; ++p)
      r.push_back(static_cast<std::uint8_t>((base + 100 * c + p) % 256));
  }
  return r;
}

void write_cifar(const TempDir& dir) {
  for (int k = 1; k <= 5; ++k) {
    std::vector<std::uint8_t> b = cifar_record(static_cast<std::uint8_t>(k), k);
    if (k == 1) {
      const std::vector<std::uint8_t> second = cifar_record(3, 50);
      b.insert(b.end(), second.begin(), second.end());
    }
    testing::write_bytes(dir.file("data_batch_" + std::to_string(k) + ".bin"), b);
  }
  testing::write_bytes(dir.file("test_batch.bin"), cifar_record(8, 200));
}

TEST(Cifar10Reader, HwcLayoutExact) {
  TempDir dir;
  write_cifar(dir);
  const DatasetPtr train = Cifar10Dataset(dir.path(), "train");
  ASSERT_EQ(train->size(), 6);  // 2 records in batch 1, one in each of 2..5
  const std::array<int, 6> labels = {1, 3, 2, 3, 4, 5};
  const std::array<int, 6> bases = {1, 50, 2, 3, 4, 5};
  for (int i = 0; i < 6; ++i) {
    const Row r = train->get(0, i);
    EXPECT_EQ(r[0].shape(), (Shape{32, 32, 3}));
    EXPECT_EQ(r[0].dtype(), DType::kUInt8);
    EXPECT_EQ(r[1].get(0), labels[i]);
    const std::uint8_t* px = r[0].data<std::uint8_t>();
    for (int y = 0; y < 32; ++y) {
      for (int x = 0; x < 32; ++x) {
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(px[(y * 32 + x) * 3 + c], (bases[i] + 100 * c + y * 32 + x) % 256);
        }
      }
    }
  }
  const DatasetPtr test = Cifar10Dataset(dir.path(), "test");
  ASSERT_EQ(test->size(), 1);
  EXPECT_EQ(test->get(0, 0)[1].get(0), 8);
  EXPECT_EQ(test->get(0, 0)[0].get(3 * 5 + 2), (200 + 200 + 5) % 256);  // (0, 5) blue
  EXPECT_EQ(Cifar10Dataset(dir.path(), "all")->size(), 7);
}

TEST(Cifar10Reader, BadSizeLabelAndMissing) {
  TempDir dir;
  write_cifar(dir);
  std::vector<std::uint8_t> bad = cifar_record(1, 0);
  bad.pop_back();
  testing::write_bytes(dir.file("test_batch.bin"), bad);
  EXPECT_EQ(error_of<FormatError>([&] { Cifar10Dataset(dir.path(), "test"); }),
            dir.file("test_batch.bin") +
                ": expected a multiple of 3073 bytes (records of 1 label + 3072 pixel bytes), "
                "got 3072");
  std::vector<std::uint8_t> two = cifar_record(1, 0);
  const std::vector<std::uint8_t> r2 = cifar_record(12, 0);
  two.insert(two.end(), r2.begin(), r2.end());
  testing::write_bytes(dir.file("test_batch.bin"), two);
  EXPECT_EQ(error_of<FormatError>([&] { Cifar10Dataset(dir.path(), "test"); }),
            dir.file("test_batch.bin") + ": expected labels below 10, got 12 in record 1");
  std::filesystem::remove(dir.file("data_batch_4.bin"));
  EXPECT_EQ(error_of<FormatError>([&] { Cifar10Dataset(dir.path(), "train"); }),
            dir.file("data_batch_4.bin") + ": no such file");
}

}  // namespace
}  // namespace loom::data
