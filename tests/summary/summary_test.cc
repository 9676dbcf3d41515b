#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <limits>
#include <random>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <google/protobuf/stubs/logging.h>

#include "core/ir/anf.h"
#include "core/ir/error.h"
#include "summary/crc32c.h"
#include "summary/event_writer.h"
#include "summary/graph.h"
#include "summary/histogram.h"
#include "summary/png.h"
#include "summary/proto/hparams.pb.h"
#include "summary/reader.h"
#include "summary/summary_record.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using namespace loom;
using namespace loom::summary;

namespace {

using loom::testing::TempDir;


std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<EventRecord> read_all(const std::string& dir) {
  std::vector<EventRecord> out;
  for (const std::string& f : list_event_files(dir)) {
    auto r = read_event_file(f);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

}  // namespace

// ---- CRC32C ---------------------------------------------------------------------------------

TEST(Crc32c, StandardVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  // RFC 3720 (iSCSI) B.4.
  std::string zeros(32, '\0'), ones(32, '\xff'), inc, dec;
  for (int i = 0; i < 32; ++i) inc.push_back(static_cast<char>(i));
  for (int i = 31; i >= 0; --i) dec.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc), 0x46DD794Eu);
  EXPECT_EQ(crc32c(dec), 0x113FDB5Cu);
  // Continuation.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345")), 0xE3069283u);
}

TEST(Crc32c, InstructionAndTableAgree) {
  std::mt19937 rng(7);
  std::string data(4099, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (std::size_t offset : {0, 1, 3, 8}) {
    for (std::size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 100, 4091}) {
      SCOPED_TRACE(std::to_string(offset) + " + " + std::to_string(n));
      EXPECT_EQ(crc32c(data.data() + offset, n), crc32c_portable(data.data() + offset, n));
      EXPECT_EQ(crc32c(data.data() + offset, n, 0x12345678u),
                crc32c_portable(data.data() + offset, n, 0x12345678u));
    }
  }
}

TEST(Crc32c, Mask) {
  EXPECT_EQ(mask_crc(0xE3069283u), 0xC78AB0E5u);
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xC78AB0E5u);
  for (std::uint32_t c : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu, 0x12345678u})
    EXPECT_EQ(unmask_crc(mask_crc(c)), c);
}

// ---- Framing --------------------------------------------------------------------------------

TEST(Framing, OneScalarRecordByteExact) {
  tb::Event e;
  e.set_wall_time(1.5);
  e.set_step(7);
  tb::Summary::Value* v = e.mutable_summary()->add_value();
  v->set_tag("loss");
  v->set_simple_value(0.25f);
  const std::string framed = frame_record(e.SerializeAsString());
  const unsigned char expected[] = {
      0x1a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // length 26, LE
      0x12, 0x9b, 0xd8, 0x2d,                          // masked crc32c of the length
      0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x3f,  // wall_time 1.5
      0x10, 0x07,                                            // step 7
      0x2a, 0x0d, 0x0a, 0x0b,                                // summary { value {
      0x0a, 0x04, 0x6c, 0x6f, 0x73, 0x73,                    //   tag "loss"
      0x15, 0x00, 0x00, 0x80, 0x3e,                          //   simple_value 0.25 } }
      0xc9, 0xd0, 0x7b, 0x8d,                          // masked crc32c of the payload
  };
  ASSERT_EQ(framed.size(), sizeof expected);
  EXPECT_EQ(framed, std::string(reinterpret_cast<const char*>(expected), sizeof expected));
}

TEST(Framing, FileNameAndFirstEvent) {
  TempDir dir;
  EventFileWriter w(dir.str());
  w.close();
  ASSERT_EQ(w.files().size(), 1u);
  const std::string name = fs::path(w.files()[0]).filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  const std::string secs = name.substr(20, 10);
  EXPECT_EQ(secs.size(), 10u);
  for (char c : secs) EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(c))) << name;
  auto recs = read_event_file(w.files()[0]);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].event.file_version(), "brain.Event:2");
  EXPECT_GT(recs[0].event.wall_time(), 1.6e9);
}

// ---- Histogram ------------------------------------------------------------------------------

// A well-framed record whose payload is not an Event (a string field holding invalid UTF-8, which
// proto3 refuses): one error naming the record, the records before it kept, and nothing from
// protobuf's own log on stderr.
TEST(Reader, PayloadThatIsNotAnEventIsOneMessage) {
  tb::Event first;
  first.set_wall_time(1.0);
  first.set_file_version("brain.Event:2");
  tb::Event bad;
  bad.set_step(3);
  std::string payload;
  {
    const google::protobuf::LogSilencer quiet;  // serializing it logs too
    bad.mutable_summary()->add_value()->set_tag(std::string("\xff\xfe loss", 7));
    payload = bad.SerializeAsString();
  }
  const std::string head = frame_record(first.SerializeAsString());
  const std::string data = head + frame_record(payload);
  ::testing::internal::CaptureStderr();
  const EventFileContents c = parse_event_file(data, "f.tfevents");
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(logged, "");
  ASSERT_EQ(c.records.size(), 1u);
  ASSERT_TRUE(c.error.has_value());
  EXPECT_EQ(*c.error, "f.tfevents: record at offset " + std::to_string(head.size()) +
                          ": payload at offset " + std::to_string(head.size() + 12) +
                          " is not an Event");
}

TEST(Histogram, DefaultBucketLimits) {
  const std::vector<double>& l = default_bucket_limits();
  // 1e-12 * 1.1^k < 1e20 for k = 0..773: 774 positive limits, then DBL_MAX; mirrored; and 0.
  ASSERT_EQ(l.size(), 2u * 775u + 1u);
  EXPECT_EQ(l.front(), -DBL_MAX);
  EXPECT_EQ(l.back(), DBL_MAX);
  EXPECT_EQ(l[775], 0.0);
  for (int k = 0; k < 774; ++k) {
    const double want = 1e-12 * std::pow(1.1, k);
    EXPECT_NEAR(l[776 + k] / want, 1.0, 1e-12) << k;
    EXPECT_EQ(l[774 - k], -l[776 + k]) << k;
  }
  EXPECT_LT(l[776 + 773], 1e20);
  EXPECT_GE(l[776 + 773] * 1.1, 1e20);
  EXPECT_EQ(l[776], 1e-12);
}

TEST(Histogram, CountsOnKnownInput) {
  const double nan = std::nan("");
  const std::vector<double> in{-1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 5e20, nan};
  Histogram h = make_histogram(std::span<const double>(in));
  const tb::HistogramProto& p = h.proto;
  const std::vector<double>& l = default_bucket_limits();
  EXPECT_EQ(h.skipped, 1);
  EXPECT_EQ(p.num(), 7);
  EXPECT_EQ(p.min(), -1.0);
  EXPECT_EQ(p.max(), 5e20);
  EXPECT_EQ(p.sum(), -1.0 + 3.0 + 5e20);
  EXPECT_EQ(p.sum_squares(), 1.0 + 3.0 + 5e20 * 5e20);
  // 1.0 falls in [1e-12*1.1^289, 1e-12*1.1^290) (~0.917 .. ~1.009): the bucket whose right edge
  // is the positive limit k = 290, index 776 + 290; -1.0 in [-1e-12*1.1^290, -1e-12*1.1^289):
  // right edge index 774 - 289; 0 in [0, 1e-12): right edge index 776; 5e20 in [1e-12*1.1^773,
  // DBL_MAX): right edge DBL_MAX (the run of empty buckets below it ends at index 776 + 773).
  EXPECT_NEAR(l[776 + 290], 1e-12 * std::pow(1.1, 290), 1e-9);
  EXPECT_LT(l[776 + 289], 1.0);
  EXPECT_GT(l[776 + 290], 1.0);
  const std::vector<double> limits{l[774 - 290], l[774 - 289], l[775],       l[776],
                                   l[776 + 289], l[776 + 290], l[776 + 773], DBL_MAX};
  const std::vector<double> counts{0, 1, 0, 2, 0, 3, 0, 1};
  ASSERT_EQ(p.bucket_limit_size(), 8);
  ASSERT_EQ(p.bucket_size(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(p.bucket_limit(i), limits[static_cast<std::size_t>(i)]) << i;
    EXPECT_EQ(p.bucket(i), counts[static_cast<std::size_t>(i)]) << i;
  }
}

TEST(Histogram, EmptyHasOneBucket) {
  Histogram h = make_histogram(std::span<const double>());
  ASSERT_EQ(h.proto.bucket_size(), 1);
  EXPECT_EQ(h.proto.bucket_limit(0), DBL_MAX);
  EXPECT_EQ(h.proto.bucket(0), 0.0);
  EXPECT_EQ(h.proto.num(), 0.0);
}

namespace {
// The bucketing make_histogram did before the table lookup: a binary search over the limits and a
// scan over every bucket, the moments summed in one sequential chain. The new one must give the
// same buckets, counts, min, max and num, bit for bit; sum and sum_squares are added in eight
// lanes (a different grouping), so they agree to rounding.
Histogram reference_histogram(std::span<const double> values) {
  const std::vector<double>& limits = default_bucket_limits();
  std::vector<double> counts(limits.size(), 0.0);
  Histogram h;
  double mn = DBL_MAX, mx = -DBL_MAX, num = 0, sum = 0, sum_sq = 0;
  for (double x : values) {
    if (!std::isfinite(x)) {
      ++h.skipped;
      continue;
    }
    auto idx = static_cast<std::size_t>(std::upper_bound(limits.begin(), limits.end(), x) -
                                        limits.begin());
    if (idx >= limits.size()) idx = limits.size() - 1;
    counts[idx] += 1.0;
    mn = std::min(mn, x), mx = std::max(mx, x);
    num += 1, sum += x, sum_sq += x * x;
  }
  tb::HistogramProto& p = h.proto;
  p.set_min(mn), p.set_max(mx), p.set_num(num), p.set_sum(sum), p.set_sum_squares(sum_sq);
  for (std::size_t i = 0; i < counts.size();) {
    double end = limits[i], count = counts[i];
    ++i;
    if (count <= 0.0)
      while (i < counts.size() && counts[i] <= 0.0) end = limits[i], count = counts[i], ++i;
    p.add_bucket_limit(end);
    p.add_bucket(count);
  }
  return h;
}

void expect_same_histogram(const Histogram& a, const Histogram& b) {
  EXPECT_EQ(a.skipped, b.skipped);
  const tb::HistogramProto &p = a.proto, &q = b.proto;
  EXPECT_EQ(p.min(), q.min());
  EXPECT_EQ(p.max(), q.max());
  EXPECT_EQ(p.num(), q.num());
  // Where the sums overflow (values near DBL_MAX), lanes may hold +inf and -inf: NaN against
  // the chain's ±inf. Both are then non-finite.
  if (std::isfinite(q.sum_squares())) {
    EXPECT_NEAR(p.sum(), q.sum(), 1e-12 * std::max(1.0, q.sum_squares()));
    EXPECT_NEAR(p.sum_squares(), q.sum_squares(), 1e-12 * q.sum_squares());
  } else {
    EXPECT_FALSE(std::isfinite(p.sum_squares()));
  }
  ASSERT_EQ(p.bucket_size(), q.bucket_size());
  ASSERT_EQ(p.bucket_limit_size(), q.bucket_limit_size());
  int differ = 0;
  for (int i = 0; i < p.bucket_size() && differ < 5; ++i) {
    if (p.bucket(i) != q.bucket(i) || p.bucket_limit(i) != q.bucket_limit(i)) {
      ++differ;
      ADD_FAILURE() << "entry " << i << ": (" << p.bucket_limit(i) << ", " << p.bucket(i)
                    << ") vs (" << q.bucket_limit(i) << ", " << q.bucket(i) << ")";
    }
  }
}
}  // namespace

TEST(Histogram, TableBucketingEqualsBinarySearch) {
  const std::vector<double>& l = default_bucket_limits();
  std::vector<double> in{0.0,      -0.0,     DBL_MIN,  -DBL_MIN, 4.9e-324, -4.9e-324,
                         DBL_MAX,  -DBL_MAX, 1e-12,    -1e-12,   1e20,     -1e20,
                         1e300,    -1e300,   NAN,      INFINITY, -INFINITY, 1.0,
                         -1.0,     1e-13,    -1e-13,   std::nextafter(1e-12, 0.0)};
  // Every limit, and its neighbours on both sides.
  for (double v : l) {
    in.push_back(v);
    in.push_back(std::nextafter(v, INFINITY));
    in.push_back(std::nextafter(v, -INFINITY));
  }
  // Random values over the whole exponent range (log-uniform magnitudes, both signs), random bit
  // patterns (denormals, NaN payloads, infinities), and a Gaussian like weights.
  std::mt19937_64 rng(1234);
  std::uniform_real_distribution<double> e(-330.0, 308.0);
  std::normal_distribution<double> g(0.0, 0.1);
  for (int i = 0; i < 200000; ++i) {
    in.push_back((rng() & 1 ? 1.0 : -1.0) * std::pow(10.0, e(rng)));
    std::uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    in.push_back(d);
    in.push_back(g(rng));
  }
  expect_same_histogram(make_histogram(std::span<const double>(in)),
                        reference_histogram(std::span<const double>(in)));
  // Each value alone (so that a wrong bucket cannot hide behind a right count elsewhere).
  for (std::size_t i = 0; i < 20000; ++i)
    expect_same_histogram(make_histogram(std::span<const double>(&in[i], 1)),
                          reference_histogram(std::span<const double>(&in[i], 1)));
  // Float32 input (spans and tensors; its own table) is bucketed as its exact double value.
  std::vector<float> f;
  for (std::size_t i = 0; i < 100000; ++i) f.push_back(static_cast<float>(in[i]));
  for (int i = 0; i < 200000; ++i) {  // random float bit patterns: every exponent, both signs
    const auto bits = static_cast<std::uint32_t>(rng());
    float v;
    std::memcpy(&v, &bits, sizeof v);
    f.push_back(v);
  }
  for (double v : l) {  // floats next to every limit
    const float fv = static_cast<float>(v);
    f.push_back(fv);
    f.push_back(std::nextafter(fv, INFINITY));
    f.push_back(std::nextafter(fv, -INFINITY));
  }
  f.push_back(std::numeric_limits<float>::max());
  f.push_back(-std::numeric_limits<float>::max());
  f.push_back(-0.0f);
  f.push_back(std::numeric_limits<float>::denorm_min());
  f.push_back(-std::numeric_limits<float>::denorm_min());
  const std::vector<double> fd(f.begin(), f.end());
  expect_same_histogram(make_histogram(std::span<const float>(f)),
                        reference_histogram(std::span<const double>(fd)));
  expect_same_histogram(
      make_histogram(Tensor::from_vector<float>({static_cast<std::int64_t>(f.size())}, f)),
      reference_histogram(std::span<const double>(fd)));
  // Other dtypes go through to_doubles.
  const std::vector<std::int32_t> ints{-5, 0, 0, 3, 1 << 30};
  const std::vector<double> intd(ints.begin(), ints.end());
  expect_same_histogram(make_histogram(Tensor::from_vector<std::int32_t>({5}, ints)),
                        reference_histogram(std::span<const double>(intd)));
  // Empty: the single (DBL_MAX, 0) entry both ways.
  expect_same_histogram(make_histogram(std::span<const double>()),
                        reference_histogram(std::span<const double>()));
}

// A histogram's tensor is copied at add_histogram: an in-place update afterwards (the next step's
// weight update) does not change what is written.
TEST(SummaryRecord, HistogramReadsTheTensorAtTheCall) {
  TempDir dir;
  Tensor w = Tensor::from_vector<float>({3}, {1.f, 2.f, 3.f});
  {
    SummaryRecord rec(dir.str());
    rec.add_histogram("w", w, 1);
    w.data<float>()[0] = 100.f;
    rec.add_histogram("w", w, 2);
  }
  std::vector<double> maxes;
  for (const std::string& f : list_event_files(dir.str()))
    for (const EventRecord& r : read_event_file(f))
      for (const auto& v : r.event.summary().value())
        if (v.has_histo()) maxes.push_back(v.histo().max());
  ASSERT_EQ(maxes.size(), 2u);
  EXPECT_EQ(maxes[0], 3.0);
  EXPECT_EQ(maxes[1], 100.0);
}

// add_deferred: the events come out in call order with their step, and the call's wall time; an
// exception from the work is reported by a later call like a write error.
TEST(SummaryRecord, DeferredEventsKeepTheCallOrder) {
  TempDir dir;
  {
    SummaryRecord rec(dir.str());
    rec.add_scalar("a", 1, 1);
    rec.add_deferred([] {
      std::vector<tb::Event> out(2);
      for (int i = 0; i < 2; ++i) {
        out[i].set_step(2);
        auto* v = out[i].mutable_summary()->add_value();
        v->set_tag(i == 0 ? "b" : "c");
        v->set_simple_value(static_cast<float>(i));
      }
      return out;
    });
    rec.add_scalar("d", 3, 3);
  }
  std::vector<std::string> tags;
  for (const std::string& f : list_event_files(dir.str()))
    for (const EventRecord& r : read_event_file(f))
      for (const auto& v : r.event.summary().value()) {
        tags.push_back(v.tag());
        EXPECT_GT(r.event.wall_time(), 0.0);
      }
  EXPECT_EQ(tags, (std::vector<std::string>{"a", "b", "c", "d"}));
  TempDir dir2;
  SummaryRecord rec(dir2.str() + "_err");
  rec.add_deferred([]() -> std::vector<tb::Event> { throw Error("boom"); });
  EXPECT_THROW(rec.flush(), Error);
  fs::remove_all(dir2.str() + "_err");
}

// ---- PNG ------------------------------------------------------------------------------------

namespace {
std::uint32_t be32(const std::string& s, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

struct DecodedPng {
  std::uint32_t width = 0, height = 0;
  int bit_depth = 0, color_type = 0, compression = -1, filter = -1, interlace = -1;
  std::string raw;  // inflated IDAT
};

DecodedPng decode_png(const std::string& png) {
  DecodedPng d;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::size_t pos = 8;
  std::string idat;
  std::vector<std::string> types;
  while (pos + 12 <= png.size()) {
    const std::uint32_t len = be32(png, pos);
    const std::string type = png.substr(pos + 4, 4);
    const std::string data = png.substr(pos + 8, len);
    const std::uint32_t crc = be32(png, pos + 8 + len);
    EXPECT_EQ(crc, ::crc32(0, reinterpret_cast<const Bytef*>(png.data() + pos + 4), len + 4))
        << type;
    types.push_back(type);
    if (type == "IHDR") {
      d.width = be32(data, 0);
      d.height = be32(data, 4);
      d.bit_depth = static_cast<unsigned char>(data[8]);
      d.color_type = static_cast<unsigned char>(data[9]);
      d.compression = static_cast<unsigned char>(data[10]);
      d.filter = static_cast<unsigned char>(data[11]);
      d.interlace = static_cast<unsigned char>(data[12]);
    } else if (type == "IDAT") {
      idat += data;
    }
    pos += 12 + len;
  }
  EXPECT_EQ(pos, png.size());
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  uLongf n = 1 << 20;
  d.raw.assign(n, '\0');
  EXPECT_EQ(::uncompress(reinterpret_cast<Bytef*>(d.raw.data()), &n,
                         reinterpret_cast<const Bytef*>(idat.data()), idat.size()),
            Z_OK);
  d.raw.resize(n);
  return d;
}
}  // namespace

TEST(Png, DecodesToThePixelsFromChw) {
  // CHW float in [0, 1]: scaled by 255. H = 2, W = 3, RGB.
  std::vector<float> v(18);
  for (int i = 0; i < 18; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i) / 17.0f;
  // {3, 2, 3} reads as HWC under kAuto (both ends could be channels): say CHW.
  Image8 img = image_from_tensor(Tensor::from_vector<float>({3, 2, 3}, v), ImageLayout::kCHW);
  ASSERT_EQ(img.height, 2);
  ASSERT_EQ(img.width, 3);
  ASSERT_EQ(img.channels, 3);
  DecodedPng d = decode_png(encode_png(img.pixels.data(), img.width, img.height, img.channels));
  EXPECT_EQ(d.width, 3u);
  EXPECT_EQ(d.height, 2u);
  EXPECT_EQ(d.bit_depth, 8);
  EXPECT_EQ(d.color_type, 2);
  EXPECT_EQ(d.compression, 0);
  EXPECT_EQ(d.filter, 0);
  EXPECT_EQ(d.interlace, 0);
  ASSERT_EQ(d.raw.size(), 2u * (1 + 3 * 3));
  for (int y = 0; y < 2; ++y) {
    EXPECT_EQ(d.raw[static_cast<std::size_t>(y * 10)], 0) << "filter byte of row " << y;
    for (int x = 0; x < 3; ++x)
      for (int c = 0; c < 3; ++c) {
        const int src = (c * 2 + y) * 3 + x;
        const int want = static_cast<int>(std::lround(src / 17.0 * 255.0));
        EXPECT_EQ(static_cast<unsigned char>(d.raw[static_cast<std::size_t>(y * 10 + 1 + x * 3 + c)]),
                  want)
            << y << "," << x << "," << c;
      }
  }
}

TEST(Png, HwcGrayAndBatchTiling) {
  Tensor hwc(DType::kUInt8, {2, 2, 1});
  for (int i = 0; i < 4; ++i) hwc.set(i, 10 * i);
  Image8 g = image_from_tensor(hwc);
  EXPECT_EQ(g.channels, 1);
  EXPECT_EQ(g.pixels, (std::vector<std::uint8_t>{0, 10, 20, 30}));
  DecodedPng d = decode_png(encode_png(g.pixels.data(), 2, 2, 1));
  EXPECT_EQ(d.color_type, 0);
  EXPECT_EQ(d.raw, std::string("\0\0\x0a\0\x14\x1e", 6));
  // 10 NCHW images of 1x1x1 tile into 8 columns x 2 rows; the canvas' unused cells stay 0.
  Tensor batch(DType::kUInt8, {10, 1, 1, 1});
  for (int i = 0; i < 10; ++i) batch.set(i, i + 1);
  Image8 t = image_from_tensor(batch);
  EXPECT_EQ(t.width, 8);
  EXPECT_EQ(t.height, 2);
  EXPECT_EQ(t.pixels,
            (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 0, 0, 0, 0, 0}));
  EXPECT_THROW(image_from_tensor(Tensor(DType::kFloat32, {2, 2, 2, 2, 2})), ShapeError);
  EXPECT_THROW(image_from_tensor(Tensor(DType::kFloat32, {5, 5, 5})), ShapeError);
}

// ---- Graph ----------------------------------------------------------------------------------

TEST(Graph, CellScopesBecomeNameScopes) {
  ir::Module m;
  ir::FuncGraph* g = m.add_graph("main");
  ir::Parameter* x = g->add_parameter("x", ir::Abstract::tensor(DType::kFloat32, {2, 3}));
  ir::Parameter* w = g->add_parameter("fc.weight");
  w->set_default(Tensor(DType::kFloat32, {3, 4}));
  ir::CNode* mm = g->add_call(ir::make_primitive("MatMul"), {x, w}, {.scope = "Net/fc/MatMul"});
  ir::CNode* a = g->add_call(ir::make_primitive("Add"), {mm, g->add_value(ir::Value::f32(1))},
                             {.scope = "Net/fc/Add"});
  ir::CNode* a2 = g->add_call(ir::make_primitive("Add"), {a, a}, {.scope = "Net/fc/Add"});
  ir::CNode* r = g->add_call(ir::make_primitive("ReLU"), {a2});
  g->set_output(r);
  tb::GraphDef gd = graph_def_from(*g);
  std::vector<std::string> got;
  for (const tb::NodeDef& n : gd.node()) {
    std::string line = n.name() + " = " + n.op() + "(";
    for (int i = 0; i < n.input_size(); ++i) line += (i ? ", " : "") + n.input(i);
    got.push_back(line + ")");
  }
  EXPECT_EQ(got, (std::vector<std::string>{
                     "x = Parameter()",
                     "fc.weight = Parameter()",
                     "Net/fc/MatMul_0 = MatMul(x, fc.weight)",
                     "Net/fc/Const_0 = Const()",
                     "Net/fc/Add_0 = Add(Net/fc/MatMul_0, Net/fc/Const_0)",
                     "Net/fc/Add_1 = Add(Net/fc/Add_0, Net/fc/Add_0)",
                     "ReLU_0 = ReLU(Net/fc/Add_1)",
                 }));
  EXPECT_TRUE(gd.node(1).attr().at("is_weight").b());
  EXPECT_EQ(gd.node(0).attr().at("_output_shapes").list().shape(0).dim_size(), 2);
  EXPECT_EQ(gd.node(3).attr().at("value").s(), "F32(1)");
}

// ---- SummaryRecord round trip ---------------------------------------------------------------

TEST(SummaryRecord, RoundTripOfEveryKind) {
  TempDir dir;
  {
    SummaryRecord rec(dir.str());
    rec.add_scalar("loss", 0.5, 1);
    rec.add_scalar("loss", 0.25, 2);
    rec.add_histogram("w", Tensor::from_vector<float>({4}, {-1.f, 0.f, 1.f, 1.f}), 2);
    rec.add_image("img", Tensor(DType::kUInt8, {4, 5, 3}), 3);  // HWC
    rec.add_text("note", "hello", 0);
    ir::Module m;
    ir::FuncGraph* g = m.add_graph("main");
    ir::Parameter* x = g->add_parameter("x");
    g->set_output(g->add_call(ir::make_primitive("ReLU"), {x}, {.scope = "Net/ReLU"}));
    rec.add_graph(*g);
    rec.add_hparams({{"lr", 0.1}, {"optimizer", "Adam"}, {"batch_size", 32}, {"amp", true}},
                    {"accuracy"});
    rec.end_hparams_session(false, 2);
  }
  const std::vector<EventRecord> r = read_all(dir.str());
  ASSERT_EQ(r.size(), 10u);
  EXPECT_EQ(r[0].event.file_version(), "brain.Event:2");
  EXPECT_EQ(r[0].offset, 0u);
  EXPECT_EQ(r[1].event.step(), 1);
  EXPECT_EQ(r[1].event.summary().value(0).tag(), "loss");
  EXPECT_EQ(r[1].event.summary().value(0).simple_value(), 0.5f);
  EXPECT_EQ(r[2].event.summary().value(0).simple_value(), 0.25f);
  EXPECT_EQ(r[2].event.step(), 2);
  const tb::HistogramProto& h = r[3].event.summary().value(0).histo();
  EXPECT_EQ(h.num(), 4);
  EXPECT_EQ(h.sum(), 1.0);
  const tb::Summary::Image& im = r[4].event.summary().value(0).image();
  EXPECT_EQ(im.height(), 4);
  EXPECT_EQ(im.width(), 5);
  EXPECT_EQ(im.colorspace(), 3);
  EXPECT_EQ(decode_png(im.encoded_image_string()).raw, std::string(4 * (1 + 15), '\0'));
  const tb::Summary::Value& text = r[5].event.summary().value(0);
  EXPECT_EQ(text.metadata().plugin_data().plugin_name(), "text");
  EXPECT_EQ(text.tensor().dtype(), tb::DT_STRING);
  EXPECT_EQ(text.tensor().string_val(0), "hello");
  tb::GraphDef gd;
  ASSERT_TRUE(gd.ParseFromString(r[6].event.graph_def()));
  ASSERT_EQ(gd.node_size(), 2);
  EXPECT_EQ(gd.node(1).name(), "Net/ReLU_0");
  EXPECT_EQ(gd.node(1).input(0), "x");
  // hparams: experiment, session start, session end.
  std::vector<hparams::HParamsPluginData> hp(3);
  const char* tags[] = {"_hparams_/experiment", "_hparams_/session_start_info",
                        "_hparams_/session_end_info"};
  for (int i = 0; i < 3; ++i) {
    const tb::Summary::Value& v = r[7 + static_cast<std::size_t>(i)].event.summary().value(0);
    EXPECT_EQ(v.tag(), tags[i]);
    EXPECT_EQ(v.metadata().plugin_data().plugin_name(), "hparams");
    EXPECT_EQ(v.tensor().dtype(), tb::DT_FLOAT);
    ASSERT_EQ(v.tensor().tensor_shape().dim_size(), 1);
    EXPECT_EQ(v.tensor().tensor_shape().dim(0).size(), 0);
    ASSERT_TRUE(hp[static_cast<std::size_t>(i)].ParseFromString(v.metadata().plugin_data().content()));
    EXPECT_EQ(hp[static_cast<std::size_t>(i)].version(), 0);
  }
  ASSERT_TRUE(hp[0].has_experiment());
  EXPECT_EQ(hp[0].experiment().hparam_infos_size(), 4);
  EXPECT_EQ(hp[0].experiment().metric_infos(0).name().tag(), "accuracy");
  const auto& vals = hp[1].session_start_info().hparams();
  EXPECT_EQ(vals.at("lr").number_value(), 0.1);
  EXPECT_EQ(vals.at("optimizer").string_value(), "Adam");
  EXPECT_EQ(vals.at("batch_size").number_value(), 32);
  EXPECT_EQ(vals.at("amp").bool_value(), true);
  EXPECT_EQ(hp[2].session_end_info().status(), hparams::STATUS_FAILURE);
  EXPECT_EQ(r[9].event.step(), 2);
}

TEST(SummaryRecord, CorruptedByteIsLocatedByOffset) {
  TempDir dir;
  std::string path;
  {
    SummaryRecord rec(dir.str());
    for (int i = 0; i < 5; ++i) rec.add_scalar("loss", i, i);
    rec.close();
    path = rec.files().at(0);
  }
  const std::vector<EventRecord> good = read_event_file(path);
  ASSERT_EQ(good.size(), 6u);
  const std::uint64_t third = good[3].offset;
  const std::string original = read_bytes(path);
  auto write = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  // A payload byte of record 3.
  std::string bad = original;
  bad[third + 12 + 3] ^= 0x40;
  write(bad);
  EventFileContents c = read_event_file_checked(path);
  EXPECT_EQ(c.records.size(), 3u);
  ASSERT_TRUE(c.error.has_value());
  const std::string at = "record at offset " + std::to_string(third) + ": data CRC mismatch";
  EXPECT_NE(c.error->find(at), std::string::npos) << *c.error;
  try {
    read_event_file(path);
    FAIL() << "expected a FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(at), std::string::npos) << e.what();
  }
  // A length byte of record 3.
  bad = original;
  bad[third] ^= 0x01;
  write(bad);
  c = read_event_file_checked(path);
  ASSERT_TRUE(c.error.has_value());
  EXPECT_NE(c.error->find("record at offset " + std::to_string(third) +
                          ": length CRC mismatch at offset " + std::to_string(third + 8)),
            std::string::npos)
      << *c.error;
  // A truncated file.
  write(original.substr(0, original.size() - 2));
  c = read_event_file_checked(path);
  EXPECT_EQ(c.records.size(), 5u);
  ASSERT_TRUE(c.error.has_value());
  EXPECT_NE(c.error->find("truncated record"), std::string::npos) << *c.error;
  // show() reports it and returns 1.
  std::ostringstream os;
  EXPECT_EQ(show(dir.str(), os), 1);
  EXPECT_NE(os.str().find("error: " + path + ": record at offset " +
                          std::to_string(good[5].offset) + ": truncated record"),
            std::string::npos)
      << os.str();
}

TEST(SummaryRecord, RotatesPastMaxFileSize) {
  TempDir dir;
  std::vector<std::string> files;
  {
    SummaryRecord rec(dir.str(), {.max_file_size = 200});
    for (int i = 0; i < 40; ++i) rec.add_scalar("loss", i, i);
    rec.close();
    files = rec.files();
  }
  ASSERT_GT(files.size(), 3u);
  EXPECT_EQ(list_event_files(dir.str()), files);
  std::int64_t next = 0;
  for (const std::string& f : files) {
    EXPECT_LE(fs::file_size(f), 200u) << f;
    auto recs = read_event_file(f);
    ASSERT_GE(recs.size(), 2u) << f;
    EXPECT_EQ(recs[0].event.file_version(), "brain.Event:2");
    for (std::size_t i = 1; i < recs.size(); ++i) {
      EXPECT_EQ(recs[i].event.step(), next);
      EXPECT_EQ(recs[i].event.summary().value(0).simple_value(), static_cast<float>(next));
      ++next;
    }
  }
  EXPECT_EQ(next, 40);
}

TEST(SummaryRecord, NothingLostWhenDestroyedDuringUnwinding) {
  TempDir dir;
  constexpr int kN = 3000;
  try {
    SummaryRecord rec(dir.str(), {.max_queue = 8});
    for (int i = 0; i < kN; ++i) rec.add_scalar("loss", i, i);
    rec.add_histogram("w", Tensor::from_vector<float>({3}, {1.f, 2.f, 3.f}), kN);
    throw std::runtime_error("training failed");
  } catch (const std::runtime_error&) {
  }
  const std::vector<EventRecord> r = read_all(dir.str());
  ASSERT_EQ(r.size(), static_cast<std::size_t>(kN) + 2);
  for (int i = 0; i < kN; ++i) EXPECT_EQ(r[static_cast<std::size_t>(i) + 1].event.step(), i);
  EXPECT_EQ(r.back().event.summary().value(0).histo().num(), 3);
}

TEST(SummaryRecord, FlushMakesEverythingReadable) {
  TempDir dir;
  SummaryRecord rec(dir.str());
  for (int i = 0; i < 100; ++i) rec.add_scalar("x", i, i);
  rec.flush();
  EXPECT_EQ(read_all(dir.str()).size(), 101u);
  rec.close();
  EXPECT_THROW(rec.add_scalar("x", 1, 1), ValueError);
}

TEST(Reader, ShowPrintsTagsWithLastValues) {
  TempDir dir;
  {
    SummaryRecord rec(dir.str());
    rec.add_scalar("loss", 0.75, 1);
    rec.add_scalar("acc", 0.5, 2);
    rec.add_scalar("loss", 0.5, 3);
    rec.add_text("note", "hi", 3);
  }
  std::ostringstream os;
  EXPECT_EQ(show(dir.str(), os), 0);
  const std::string name = fs::path(list_event_files(dir.str()).at(0)).filename().string();
  EXPECT_EQ(os.str(), name + ": 5 records, steps 1..3\n"
                             "  scalar     loss  step 3  0.5\n"
                             "  scalar     acc   step 2  0.5\n"
                             "  text       note  step 3  \"hi\"\n");
  EXPECT_THROW(show(dir.str() + "/missing", os), FormatError);
}
