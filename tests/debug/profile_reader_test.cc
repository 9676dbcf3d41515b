// The profile reader (debug/profile_reader.h) on profile folders written here in the layout of
// debug/profiler.cc (the op tables in MindSpore's CPU profiler columns — times in ms, proportions
// a fraction of all ops' time — then loom's; step_trace's interval to the next step's begin):
// every column parsed by header name (quoted fields, "" escapes, CRLF, a byte-order mark, columns
// in another order, an extra column) with the op tables' ms read as µs, the optional files, two
// ranks; the steady-state step average and the slowest rank per step; and every malformed or
// half-written folder (one in the earlier op-table layout included) refused with a ValueError
// naming the file and what is wrong.
#include "debug/profile_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>

#include "core/ir/error.h"
#include "tests/debug/dump_reader_test_util.h"

namespace loom::debug {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::write_text;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

// One rank's files as text; tests change one and write them all.
struct RankFiles {
  int rank = 0;
  int ranks = 1;
  std::string info;
  // Three profiled steps: execution_frequency = occurrences / 3; times in ms; percent and
  // total_proportion fractions of all ops' time (9.6005 ms of types, 9.5 ms of nodes).
  std::string op_type =
      "op_type,type_occurrences,execution_frequency(per-step),total_compute_time,avg_time(ms),"
      "percent,step_percent,flops,gflops_per_s,peak_percent,bytes,gb_per_s\n"
      "Conv2D,6,2,9.000000,1.500000,0.937451,30.5,2.7e9,300,117.2,1200000,\n"
      "ReLU,12,4,0.6005,0.05004,0.062549,2,0,,,4800000,8\n";
  std::string op_detail =
      "op_side,op_type,op_name,full_op_name,op_occurrences,op_total_time(ms),op_avg_time(ms),"
      "total_proportion,subgraph,pid,step_percent,role,forward,cell,file,line,flops,gflops_per_s,"
      "peak_percent,bytes,gb_per_s\n"
      "Host,Conv2D,Conv2D-op3,\"Default/net, with a comma/Conv2D-op3\",3,5.000000,1.6665,"
      "0.526316,Default,4242,17,forward,,LeNet5/conv1,\"models/le\"\"net\"\".py\",41,1.5e9,300,"
      "117.2,600000,\n"
      "Host,Conv2DBackpropFilter,Conv2DBackpropFilter-op20,Gradients/Conv2DBackpropFilter-op20,3,"
      "4.5,1.5,0.473684,Default,4242,15.25,backward,Conv2D-op3,LeNet5/conv1,models/lenet.py,,"
      "1.5e9,,,600000,\n";
  std::string step_trace = step_trace_text(252000, 20500, 900, 3000, 3100);
  std::string memory_plan =
      "buffer,owner,op_type,bytes,offset,first_launch,last_launch\n"
      "b0,Conv2D-op3,Conv2D,4096,0,0,3\n"
      "b1,\"ReLU-op4\",ReLU,1024,4096,1,2\n"
      "x,,,512,5120,-1,0\n";  // an input: live before the first launch
  std::string communication;  // written when not empty

  explicit RankFiles(int r = 0, int n = 1) : rank(r), ranks(n) { info = info_text(r, n); }

  static std::string info_text(int r, int n, const std::string& memory = "true",
                               const std::string& communication = "false") {
    return "{\"version\": 1, \"rank\": " + std::to_string(r) + ", \"ranks\": " +
           std::to_string(n) +
           ", \"model\": \"lenet\", \"threads\": 4, \"start_step\": 1, \"stop_step\": 3, "
           "\"steps\": [1, 2, 3], \"peak_gflops\": 256.5, \"cpu\": \"Test CPU, 8 cores\", "
           "\"memory\": " + memory + ", \"communication\": " + communication + "}\n";
  }

  // Three steps, step 1 compiling; the intervals of steps 1 and 2 (each to the next step's
  // begin; the last step has none) and each step's communication wait are given (µs).
  static std::string step_trace_text(double interval1, double interval2, double wait1,
                                     double wait2, double wait3) {
    auto n = [](double v) { return std::to_string(v); };
    return "step,start,interval,total,data_wait,compile,forward,backward,optimizer,communication,"
           "communication_wait,host_overhead,rss_mib,plan_peak_mib\n"
           "1,0," + n(interval1) + ",250000,1200,230000,5000,9000,800,0," + n(wait1) +
           ",4300,512.5,3.25\n"
           "2,252000," + n(interval2) + ",20000,300,0,5000,9000,800,0," + n(wait2) +
           ",2200,513,3.25\n"
           "3,272500,,20200,310,0,5000,9100,800,0," + n(wait3) + ",-0.5,,\n";
  }

  void write(const fs::path& dir) const {
    const std::string r = "_" + std::to_string(rank);
    write_text(dir / ("profile_info" + r + ".json"), info);
    write_text(dir / ("cpu_op_type_info" + r + ".csv"), op_type);
    write_text(dir / ("cpu_op_detail_info" + r + ".csv"), op_detail);
    write_text(dir / ("step_trace" + r + ".csv"), step_trace);
    if (!memory_plan.empty()) write_text(dir / ("memory_plan" + r + ".csv"), memory_plan);
    if (!communication.empty()) write_text(dir / ("communication" + r + ".csv"), communication);
  }
};

TEST(ProfileReader, OneRankEveryColumn) {
  TempDir d;
  RankFiles().write(d.path());
  write_text(d.path() / "cpu_timeline_display_0.json", "{\"traceEvents\": []}");  // not read
  write_text(d.path() / "notes.txt", "other files are not read\n");
  const ProfileDir p = open_profile(d.str());
  ASSERT_EQ(p.ranks.size(), 1u);
  const RankProfile& r = p.ranks[0];
  EXPECT_EQ(r.info.version, 1);
  EXPECT_EQ(r.info.rank, 0);
  EXPECT_EQ(r.info.ranks, 1);
  EXPECT_EQ(r.info.model, "lenet");
  EXPECT_EQ(r.info.threads, 4);
  EXPECT_EQ(r.info.start_step, 1);
  EXPECT_EQ(r.info.stop_step, 3);
  EXPECT_EQ(r.info.steps, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(r.info.peak_gflops, 256.5);
  EXPECT_EQ(r.info.cpu, "Test CPU, 8 cores");
  EXPECT_TRUE(r.info.memory);
  EXPECT_FALSE(r.info.communication);

  ASSERT_EQ(r.op_types.size(), 2u);
  EXPECT_EQ(r.op_types[0].op_type, "Conv2D");
  EXPECT_EQ(r.op_types[0].occurrences, 6);
  EXPECT_EQ(r.op_types[0].execution_frequency, 2);
  EXPECT_EQ(r.op_types[0].total_time, 9000);  // µs, from 9 ms
  EXPECT_EQ(r.op_types[0].avg_time, 1500);
  EXPECT_EQ(r.op_types[0].op_fraction, 0.937451);
  EXPECT_EQ(r.op_types[0].proportion, 30.5);  // step_percent
  EXPECT_EQ(r.op_types[0].flops, 2.7e9);
  EXPECT_EQ(r.op_types[0].gflops_per_s, 300);
  EXPECT_EQ(r.op_types[0].peak_percent, 117.2);
  EXPECT_EQ(r.op_types[0].bytes, 1200000);
  EXPECT_TRUE(std::isnan(r.op_types[0].gb_per_s));
  EXPECT_EQ(r.op_types[1].op_type, "ReLU");
  EXPECT_EQ(r.op_types[1].execution_frequency, 4);
  EXPECT_DOUBLE_EQ(r.op_types[1].total_time, 600.5);
  EXPECT_DOUBLE_EQ(r.op_types[1].avg_time, 50.04);
  EXPECT_EQ(r.op_types[1].op_fraction, 0.062549);
  EXPECT_EQ(r.op_types[1].proportion, 2);
  EXPECT_EQ(r.op_types[1].flops, 0);
  EXPECT_TRUE(std::isnan(r.op_types[1].gflops_per_s));
  EXPECT_TRUE(std::isnan(r.op_types[1].peak_percent));
  EXPECT_EQ(r.op_types[1].gb_per_s, 8);

  ASSERT_EQ(r.op_details.size(), 2u);
  const OpDetailRow& conv = r.op_details[0];
  EXPECT_EQ(conv.op_side, "Host");
  EXPECT_EQ(conv.op_type, "Conv2D");
  EXPECT_EQ(conv.op_name, "Conv2D-op3");
  EXPECT_EQ(conv.full_op_name, "Default/net, with a comma/Conv2D-op3");
  EXPECT_EQ(conv.occurrences, 3);
  EXPECT_EQ(conv.total_time, 5000);  // µs, from 5 ms
  EXPECT_DOUBLE_EQ(conv.avg_time, 1666.5);
  EXPECT_EQ(conv.op_fraction, 0.526316);
  EXPECT_EQ(conv.subgraph, "Default");
  EXPECT_EQ(conv.pid, 4242);
  EXPECT_EQ(conv.proportion, 17);  // step_percent
  EXPECT_EQ(conv.role, "forward");
  EXPECT_EQ(conv.forward, "");
  EXPECT_EQ(conv.cell, "LeNet5/conv1");
  EXPECT_EQ(conv.file, "models/le\"net\".py");
  EXPECT_EQ(conv.line, 41);
  EXPECT_EQ(conv.flops, 1.5e9);
  EXPECT_EQ(conv.gflops_per_s, 300);
  EXPECT_EQ(conv.peak_percent, 117.2);
  EXPECT_EQ(conv.bytes, 600000);
  EXPECT_TRUE(std::isnan(conv.gb_per_s));
  const OpDetailRow& grad = r.op_details[1];
  EXPECT_EQ(grad.role, "backward");
  EXPECT_EQ(grad.forward, "Conv2D-op3");
  EXPECT_EQ(grad.line, 0);  // empty: unknown
  EXPECT_EQ(grad.total_time, 4500);
  EXPECT_EQ(grad.avg_time, 1500);
  EXPECT_EQ(grad.op_fraction, 0.473684);
  EXPECT_EQ(grad.proportion, 15.25);
  EXPECT_TRUE(std::isnan(grad.gflops_per_s));

  ASSERT_EQ(r.steps.size(), 3u);
  const StepRow& s1 = r.steps[0];
  EXPECT_EQ(s1.step, 1);
  EXPECT_EQ(s1.start, 0);
  EXPECT_EQ(s1.interval, 252000);  // to step 2's begin
  EXPECT_EQ(s1.total, 250000);
  EXPECT_EQ(s1.data_wait, 1200);
  EXPECT_EQ(s1.compile, 230000);
  EXPECT_EQ(s1.forward, 5000);
  EXPECT_EQ(s1.backward, 9000);
  EXPECT_EQ(s1.optimizer, 800);
  EXPECT_EQ(s1.communication, 0);
  EXPECT_EQ(s1.communication_wait, 900);
  EXPECT_EQ(s1.host_overhead, 4300);
  EXPECT_EQ(s1.rss_mib, 512.5);
  EXPECT_EQ(s1.plan_peak_mib, 3.25);
  EXPECT_EQ(r.steps[1].interval, 20500);
  EXPECT_EQ(r.steps[2].step, 3);
  EXPECT_EQ(r.steps[2].start, 272500);
  EXPECT_FALSE(r.steps[2].interval.has_value());  // the last step: no next step
  EXPECT_EQ(r.steps[2].host_overhead, -0.5);  // rounding may make it slightly negative
  EXPECT_FALSE(r.steps[2].rss_mib.has_value());
  EXPECT_FALSE(r.steps[2].plan_peak_mib.has_value());

  ASSERT_TRUE(r.memory_plan.has_value());
  ASSERT_EQ(r.memory_plan->size(), 3u);
  EXPECT_EQ((*r.memory_plan)[1].buffer, "b1");
  EXPECT_EQ((*r.memory_plan)[1].owner, "ReLU-op4");
  EXPECT_EQ((*r.memory_plan)[1].op_type, "ReLU");
  EXPECT_EQ((*r.memory_plan)[1].bytes, 1024);
  EXPECT_EQ((*r.memory_plan)[1].offset, 4096);
  EXPECT_EQ((*r.memory_plan)[1].first_launch, 1);
  EXPECT_EQ((*r.memory_plan)[1].last_launch, 2);
  EXPECT_EQ((*r.memory_plan)[2].owner, "");
  EXPECT_EQ((*r.memory_plan)[2].first_launch, -1);
  EXPECT_EQ((*r.memory_plan)[2].last_launch, 0);
  EXPECT_FALSE(r.communication.has_value());
  EXPECT_EQ(&p.rank(0), &p.ranks[0]);
}

TEST(ProfileReader, ColumnsByNameCrlfAndByteOrderMark) {
  TempDir d;
  RankFiles f;
  // Another column order, an extra column, CRLF line ends, a byte-order mark, a blank line.
  f.op_type =
      "\xEF\xBB\xBFgb_per_s,bytes,peak_percent,gflops_per_s,flops,step_percent,percent,"
      "avg_time(ms),total_compute_time,execution_frequency(per-step),type_occurrences,op_type,"
      "extra\r\n"
      "8,4800000,,,0,2,0.0625,0.05,0.6,4,12,ReLU,x\r\n\r\n"
      ",1200000,117.2,300,2.7e9,30.5,0.9375,1.5,9,2,6,\"Conv2D\",\"y\"\r\n";
  f.write(d.path());
  const ProfileDir p = open_profile(d.str());
  const std::vector<OpTypeRow>& t = p.ranks[0].op_types;
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].op_type, "ReLU");
  EXPECT_EQ(t[0].occurrences, 12);
  EXPECT_EQ(t[0].execution_frequency, 4);
  EXPECT_DOUBLE_EQ(t[0].avg_time, 50);
  EXPECT_EQ(t[0].op_fraction, 0.0625);
  EXPECT_EQ(t[0].proportion, 2);
  EXPECT_EQ(t[0].gb_per_s, 8);
  EXPECT_EQ(t[1].op_type, "Conv2D");
  EXPECT_EQ(t[1].total_time, 9000);
  EXPECT_EQ(t[1].peak_percent, 117.2);
}

TEST(ProfileReader, OptionalFilesFollowTheFlags) {
  TempDir d;
  RankFiles f;
  f.info = RankFiles::info_text(0, 1, "false", "true");
  f.memory_plan.clear();
  f.communication =
      "step,id,bytes,start,duration,overlap\n1,0,245760,240000,800,500\n2,1,1024,262000,700.5,0\n";
  f.write(d.path());
  const ProfileDir p = open_profile(d.str());
  EXPECT_FALSE(p.ranks[0].memory_plan.has_value());
  ASSERT_TRUE(p.ranks[0].communication.has_value());
  const std::vector<CommunicationRow>& c = *p.ranks[0].communication;
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].step, 2);
  EXPECT_EQ(c[1].id, 1);
  EXPECT_EQ(c[1].bytes, 1024);
  EXPECT_EQ(c[1].start, 262000);
  EXPECT_EQ(c[1].duration, 700.5);
  EXPECT_EQ(c[0].overlap, 500);
}

TEST(ProfileReader, AverageLeavesOutTheCompilingStep) {
  TempDir d;
  RankFiles().write(d.path());
  const StepAverage avg = average_steps(open_profile(d.str()).ranks[0]);
  EXPECT_EQ(avg.steps, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(avg.compiled_step, 1);
  EXPECT_TRUE(avg.steady);
  EXPECT_DOUBLE_EQ(avg.mean.total, 20100);
  EXPECT_DOUBLE_EQ(avg.mean.data_wait, 305);
  EXPECT_DOUBLE_EQ(avg.mean.compile, 0);
  EXPECT_DOUBLE_EQ(avg.mean.backward, 9050);
  EXPECT_DOUBLE_EQ(avg.mean.communication_wait, 3050);
  EXPECT_DOUBLE_EQ(avg.mean.host_overhead, 1099.75);
}

TEST(ProfileReader, AverageWithoutOrAfterTheLastCompile) {
  RankProfile r;
  for (std::int64_t s = 5; s <= 7; ++s) {
    StepRow row;
    row.step = s;
    row.total = static_cast<double>(s * 100);
    r.steps.push_back(row);
  }
  StepAverage none = average_steps(r);  // a window after the compiling step: every step
  EXPECT_EQ(none.steps, (std::vector<std::int64_t>{5, 6, 7}));
  EXPECT_FALSE(none.compiled_step.has_value());
  EXPECT_TRUE(none.steady);
  EXPECT_DOUBLE_EQ(none.mean.total, 600);

  r.steps[2].compile = 50;  // the last step compiled (a recompile): that step alone
  StepAverage last = average_steps(r);
  EXPECT_EQ(last.steps, (std::vector<std::int64_t>{7}));
  EXPECT_EQ(last.compiled_step, 7);
  EXPECT_FALSE(last.steady);
  EXPECT_DOUBLE_EQ(last.mean.compile, 50);

  r.steps[2].compile = 0;
  r.steps[1].compile = 10;  // a recompile in the middle: the steps after it
  EXPECT_EQ(average_steps(r).steps, (std::vector<std::int64_t>{7}));
  EXPECT_TRUE(average_steps(r).steady);
}

TEST(ProfileReader, TwoRanksSlowestRankHasTheMostWork) {
  TempDir d;
  // Both ranks see the same step intervals (the all-reduce synchronizes them); rank 1 waits
  // little in the all-reduce, rank 0 much: rank 1 has more work and the others wait for it.
  RankFiles r0(0, 2), r1(1, 2);
  r0.step_trace = RankFiles::step_trace_text(252000, 20500, 900, 9000, 9500);
  r1.step_trace = RankFiles::step_trace_text(252000, 20500, 100, 200, 300);
  r0.write(d.path());
  r1.write(d.path());
  const ProfileDir p = open_profile(d.str());
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[1].info.rank, 1);
  EXPECT_EQ(&p.rank(1), &p.ranks[1]);

  // A step's interval runs to the next step's begin; the last step has none: its data wait plus
  // its total stand in.
  EXPECT_DOUBLE_EQ(step_work(p.ranks[0].steps[0]), 252000 - 900);
  EXPECT_DOUBLE_EQ(step_work(p.ranks[0].steps[1]), 20500 - 9000);
  EXPECT_DOUBLE_EQ(step_work(p.ranks[0].steps[2]), 310 + 20200 - 9500);

  const std::vector<SlowestRank> s = slowest_ranks(p);
  ASSERT_EQ(s.size(), 3u);
  for (const SlowestRank& x : s) {
    EXPECT_EQ(x.slowest_rank, 1) << "step " << x.step;
    EXPECT_EQ(x.fastest_rank, 0) << "step " << x.step;
  }
  EXPECT_EQ(s[2].step, 3);
  EXPECT_DOUBLE_EQ(s[2].slowest_work, 310 + 20200 - 300);
  EXPECT_DOUBLE_EQ(s[2].fastest_work, 310 + 20200 - 9500);
  EXPECT_DOUBLE_EQ(s[2].spread(), 9200);
  EXPECT_DOUBLE_EQ(s[1].slowest_work, 20500 - 200);
  EXPECT_DOUBLE_EQ(s[1].fastest_work, 20500 - 9000);
  EXPECT_DOUBLE_EQ(s[0].slowest_work, 252000 - 100);
  EXPECT_DOUBLE_EQ(s[0].spread(), 800);
}

TEST(ProfileReader, SlowestRanksSkipAStepNotEveryRankProfiled) {
  RankProfile a, b;
  a.info.rank = 0;
  b.info.rank = 1;
  for (std::int64_t step : {1, 2, 3}) {
    StepRow s;
    s.step = step;
    s.interval = 100;
    a.steps.push_back(s);
    if (step != 2) b.steps.push_back(s);
  }
  ProfileDir p;
  p.ranks = {a, b};
  const std::vector<SlowestRank> s = slowest_ranks(p);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].step, 1);
  EXPECT_EQ(s[1].step, 3);
  EXPECT_EQ(s[1].slowest_rank, 0);  // a tie goes to the lower rank
  EXPECT_EQ(s[1].spread(), 0);
}

// --- bad input: every message names the file and what is wrong -------------------------------

class ProfileReaderErrors : public ::testing::Test {
 protected:
  TempDir d;
  std::string file(const std::string& name) const { return "'" + (d.path() / name).string() + "'"; }
  std::string open_error() const {
    return error_of([&] { open_profile(d.str()); });
  }
};

TEST_F(ProfileReaderErrors, Folder) {
  const std::string missing = (d.path() / "nope").string();
  EXPECT_EQ(error_of([&] { open_profile(missing); }),
            "profile '" + missing + "': expected a profile folder (loom train --profile DIR "
            "writes one), got nothing at that path");
  write_text(d.path() / "a_file", "x");
  EXPECT_EQ(error_of([&] { open_profile((d.path() / "a_file").string()); }),
            "profile " + file("a_file") + ": expected a profile folder, got a file");
  EXPECT_EQ(open_error(), "profile '" + d.str() + "': expected profile_info_{rank}.json and the "
                          "CSV files beside it (loom train --profile DIR writes them), got no "
                          "profile file");
  write_text(d.path() / "step_trace_0.csv", "step\n");
  EXPECT_EQ(open_error(), "profile '" + d.str() + "': expected profile_info_{rank}.json and the "
                          "CSV files beside it (loom train --profile DIR writes them), got "
                          "profile files without a profile_info");
}

TEST_F(ProfileReaderErrors, ARankWithSomeFilesMissing) {
  RankFiles().write(d.path());
  fs::remove(d.path() / "cpu_op_detail_info_0.csv");
  EXPECT_EQ(open_error(), "profile " + file("cpu_op_detail_info_0.csv") +
                              ": expected this file of rank 0 beside profile_info_0.json, got "
                              "no such file");
  RankFiles().write(d.path());
  write_text(d.path() / "cpu_op_type_info_1.csv", RankFiles().op_type);  // a stray rank 1 file
  EXPECT_EQ(open_error(), "profile " + file("profile_info_1.json") +
                              ": expected this file of rank 1 beside cpu_op_type_info_1.csv, got "
                              "no such file");
}

TEST_F(ProfileReaderErrors, RanksDisagree) {
  RankFiles(0, 2).write(d.path());  // "ranks": 2, rank 1 missing entirely
  EXPECT_EQ(open_error(), "profile " + file("profile_info_1.json") +
                              ": expected this file (\"ranks\": 2 in profile_info_0.json), got "
                              "no such file");
  RankFiles r1(1, 3);
  r1.write(d.path());
  EXPECT_EQ(open_error(), "profile " + file("profile_info_1.json") +
                              ": expected \"ranks\": 2 as in profile_info_0.json, got 3");
  r1.info = RankFiles::info_text(0, 2);  // rank 1's file says rank 0
  r1.write(d.path());
  EXPECT_EQ(open_error(), "profile " + file("profile_info_1.json") +
                              ": expected \"rank\": 1 as in the file name, got 0");
  RankFiles(1, 2).write(d.path());
  const ProfileDir p = open_profile(d.str());
  EXPECT_EQ(error_of([&] { p.rank(2); }),
            "profile '" + d.str() + "': expected a rank from 0 to 1, got 2");
}

TEST_F(ProfileReaderErrors, ProfileInfo) {
  RankFiles f;
  auto info_error = [&](const std::string& text) {
    f.info = text;
    f.write(d.path());
    return open_error();
  };
  const std::string where = "profile " + file("profile_info_0.json") + ": ";
  EXPECT_EQ(info_error("[1, 2]"), where + "expected a JSON object, got [1,2]");
  EXPECT_EQ(info_error("{\"version\": 1,"),
            where + "expected JSON, got a parse error: [json.exception.parse_error.101] parse "
                    "error at line 1, column 15: syntax error while parsing object key - "
                    "unexpected end of input; expected string literal");
  std::string v2 = RankFiles::info_text(0, 1);
  v2.replace(v2.find("\"version\": 1"), 12, "\"version\": 2");
  EXPECT_EQ(info_error(v2), where + "expected \"version\": 1 (the only version loom writes), "
                                    "got 2");
  std::string no_model = RankFiles::info_text(0, 1);
  no_model.replace(no_model.find("\"model\""), 7, "\"name\"");
  EXPECT_EQ(info_error(no_model), where + "expected the key \"model\"");
  std::string bad_threads = RankFiles::info_text(0, 1);
  bad_threads.replace(bad_threads.find("\"threads\": 4"), 12, "\"threads\": \"4\"");
  EXPECT_EQ(info_error(bad_threads),
            where + "expected a positive integer for \"threads\", got \"4\"");
  std::string bad_steps = RankFiles::info_text(0, 1);
  bad_steps.replace(bad_steps.find("[1, 2, 3]"), 9, "[1, 3, 2]");
  EXPECT_EQ(info_error(bad_steps),
            where + "expected increasing positive step numbers for \"steps\", got [1,3,2]");
  std::string bad_flag = RankFiles::info_text(0, 1, "1");
  EXPECT_EQ(info_error(bad_flag), where + "expected true or false for \"memory\", got 1");
  std::string big_rank = RankFiles::info_text(0, 1);
  big_rank.replace(big_rank.find("\"rank\": 0"), 9, "\"rank\": 1");
  EXPECT_EQ(info_error(big_rank), where + "expected \"rank\" below \"ranks\" (1), got 1");
}

TEST_F(ProfileReaderErrors, Csv) {
  RankFiles f;
  auto error = [&](std::string RankFiles::*member, const std::string& text) {
    RankFiles g = f;
    g.*member = text;
    g.write(d.path());
    return open_error();
  };
  const std::string types = "profile " + file("cpu_op_type_info_0.csv") + ": ";
  const std::string type_columns =
      "op_type,type_occurrences,execution_frequency(per-step),total_compute_time,avg_time(ms),"
      "percent,step_percent,flops,gflops_per_s,peak_percent,bytes,gb_per_s";
  EXPECT_EQ(error(&RankFiles::op_type, ""),
            types + "expected a header (" + type_columns + ") and rows, got an empty file");
  // The earlier layout (µs, proportion in % of the steps): refused by its header.
  EXPECT_EQ(error(&RankFiles::op_type,
                  "op_type,type_occurrences,total_time,proportion,avg_time,flops,gflops_per_s,"
                  "peak_percent,bytes,gb_per_s\nConv2D,6,9000,30.5,1500,2.7e9,300,117.2,1200000,"
                  "\n"),
            types + "line 1: expected the column 'execution_frequency(per-step)' in the header (" +
                type_columns + "), got 'op_type,type_occurrences,total_time,proportion,avg_time,"
                "flops,gflops_per_s,peak_percent,bytes,gb_per_s'");
  const std::string header = f.op_type.substr(0, f.op_type.find('\n') + 1);
  EXPECT_EQ(error(&RankFiles::op_type, header + "Conv2D,6,2,9\n"),
            types + "line 2: expected 12 fields as in the header, got 4");
  EXPECT_EQ(error(&RankFiles::op_type, header + "Conv2D,6,2,9 ms,1.5,0.9,30.5,0,,,0,\n"),
            types + "line 2: expected a non-negative number in column 'total_compute_time', got "
                    "'9 ms'");
  EXPECT_EQ(error(&RankFiles::op_type, header + "Conv2D,6,2,-9,1.5,0.9,30.5,0,,,0,\n"),
            types + "line 2: expected a non-negative number in column 'total_compute_time', got "
                    "'-9'");
  EXPECT_EQ(error(&RankFiles::op_type, header + "Conv2D,6,2,nan,1.5,0.9,30.5,0,,,0,\n"),
            types + "line 2: expected a non-negative number in column 'total_compute_time', got "
                    "'nan'");
  EXPECT_EQ(error(&RankFiles::op_type, header + "Conv2D,6.5,2,9,1.5,0.9,30.5,0,,,0,\n"),
            types + "line 2: expected a non-negative integer in column 'type_occurrences', got "
                    "'6.5'");
  EXPECT_EQ(error(&RankFiles::op_type, header + "Conv2D,6,2.5,9,1.5,0.9,30.5,0,,,0,\n"),
            types + "line 2: expected a non-negative integer in column "
                    "'execution_frequency(per-step)', got '2.5'");
  // percent is a fraction of all ops' time, not a percentage.
  EXPECT_EQ(error(&RankFiles::op_type, header + "Conv2D,6,2,9,1.5,93.7,30.5,0,,,0,\n"),
            types + "line 2: expected a fraction from 0 to 1 in column 'percent', got '93.7'");
  EXPECT_EQ(error(&RankFiles::op_type, header + ",6,2,9,1.5,0.9,30.5,0,,,0,\n"),
            types + "line 2: expected an op type in column 'op_type', got ''");
  EXPECT_EQ(error(&RankFiles::op_type, header + "\"Conv2D,6,2,9,1.5,0.9,30.5,0,,,0,\n"),
            types + "line 2: expected a closing quote, got the end of the file");
  EXPECT_EQ(error(&RankFiles::op_type, header + "Conv\"2D,6,2,9,1.5,0.9,30.5,0,,,0,\n"),
            types + "line 2: expected a quote only around a whole field, got one inside "
                    "'Conv\"...'");
  EXPECT_EQ(error(&RankFiles::op_type, header + "\"Conv2D\"x,6,2,9,1.5,0.9,30.5,0,,,0,\n"),
            types + "line 2: expected a comma or the end of the line after a closing quote, got "
                    "'x'");
  EXPECT_EQ(error(&RankFiles::op_type, "op_type,op_type\n"),
            types + "line 1: expected each column once in the header, got 'op_type' twice");

  const std::string detail = "profile " + file("cpu_op_detail_info_0.csv") + ": ";
  std::string old_detail = f.op_detail;
  old_detail.replace(old_detail.find("full_op_name"), 12, "op_full_name");
  EXPECT_EQ(error(&RankFiles::op_detail, old_detail),
            detail + "line 1: expected the column 'full_op_name' in the header (op_side,op_type,"
                     "op_name,full_op_name,op_occurrences,op_total_time(ms),op_avg_time(ms),"
                     "total_proportion,subgraph,pid,step_percent,role,forward,cell,file,line,"
                     "flops,gflops_per_s,peak_percent,bytes,gb_per_s), got 'op_side,op_type,"
                     "op_name,op_full_name,op_occurrences,op_total_time(ms),op_avg_time(ms),"
                     "total_proportion,subgraph,pid,step_percent,role,forward,cell,file,line,"
                     "flops,gflops_per_s,peak_percent,bytes,gb_per_s'");
  std::string no_name = f.op_detail;
  no_name.replace(no_name.find("Conv2D-op3,"), 11, ",");
  EXPECT_EQ(error(&RankFiles::op_detail, no_name),
            detail + "line 2: expected a node name in column 'op_name', got ''");
  std::string bad_line = f.op_detail;
  bad_line.replace(bad_line.find(",41,"), 4, ",4x,");
  EXPECT_EQ(error(&RankFiles::op_detail, bad_line),
            detail + "line 2: expected a non-negative integer in column 'line', got '4x'");
  std::string percent = f.op_detail;
  percent.replace(percent.find(",0.526316,"), 10, ",52.6316,");
  EXPECT_EQ(error(&RankFiles::op_detail, percent),
            detail + "line 2: expected a fraction from 0 to 1 in column 'total_proportion', got "
                     "'52.6316'");
  std::string no_pid = f.op_detail;
  no_pid.replace(no_pid.find(",4242,"), 6, ",,");
  EXPECT_EQ(error(&RankFiles::op_detail, no_pid),
            detail + "line 2: expected a non-negative integer in column 'pid', got ''");
  std::string bad_time = f.op_detail;
  bad_time.replace(bad_time.find(",5.000000,"), 10, ",5 ms,");
  EXPECT_EQ(error(&RankFiles::op_detail, bad_time),
            detail + "line 2: expected a non-negative number in column 'op_total_time(ms)', got "
                     "'5 ms'");

  const std::string plan = "profile " + file("memory_plan_0.csv") + ": ";
  EXPECT_EQ(error(&RankFiles::memory_plan,
                  "buffer,owner,op_type,bytes,offset,first_launch,last_launch\nb,o,T,1,0,3,2\n"),
            plan + "line 2: expected a launch at or after first_launch (3) in column "
                   "'last_launch', got '2'");
  EXPECT_EQ(error(&RankFiles::memory_plan,
                  "buffer,owner,op_type,bytes,offset,first_launch,last_launch\nb,o,T,1,0,x,2\n"),
            plan + "line 2: expected an integer in column 'first_launch', got 'x'");
}

TEST_F(ProfileReaderErrors, StepTrace) {
  RankFiles f;
  const std::string where = "profile " + file("step_trace_0.csv") + ": ";
  const std::string header = f.step_trace.substr(0, f.step_trace.find('\n') + 1);
  auto error = [&](const std::string& text) {
    RankFiles g = f;
    g.step_trace = text;
    g.write(d.path());
    return open_error();
  };
  EXPECT_EQ(error(header), where + "expected a row per profiled step, got none");
  // Rows for steps 1 and 3 only.
  std::string two = f.step_trace;
  two.erase(two.find("\n2,") + 1, two.find("\n3,") - two.find("\n2,"));
  EXPECT_EQ(error(two), where + "expected a row for each step in profile_info_0.json's "
                                "\"steps\" (1, 2, 3), got steps 1, 3");
  std::string backwards = f.step_trace;
  backwards.replace(backwards.find("\n3,"), 3, "\n2,");
  EXPECT_EQ(error(backwards), where + "line 4: expected steps in increasing order (after 2) in "
                                      "column 'step', got '2'");
  std::string no_total = f.step_trace;
  no_total.replace(no_total.find(",250000,"), 8, ",,");
  EXPECT_EQ(error(no_total), where + "line 2: expected a number in column 'total', got ''");
}

TEST_F(ProfileReaderErrors, OptionalFileTheInfoPromises) {
  RankFiles f;
  f.memory_plan.clear();  // "memory": true but no memory_plan_0.csv
  f.write(d.path());
  EXPECT_EQ(open_error(), "profile " + file("memory_plan_0.csv") +
                              ": expected this file, since profile_info_0.json says \"memory\": "
                              "true, got no such file");
  RankFiles g;
  g.info = RankFiles::info_text(0, 1, "true", "true");
  g.communication = "step,id,bytes,start,duration\n1,0,8,0,1\n";
  g.write(d.path());
  EXPECT_EQ(open_error(), "profile " + file("communication_0.csv") +
                              ": line 1: expected the column 'overlap' in the header (step,id,"
                              "bytes,start,duration,overlap), got 'step,id,bytes,start,"
                              "duration'");
}

}  // namespace
}  // namespace loom::debug
