// The dump reader (debug/dump_reader.h): file names parsed from the right, a dump opened at its
// root or its rank folder, the execution-order, statistic and graph files, and every malformed
// or half-written dump refused with a ValueError naming the file.
#include "debug/dump_reader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "core/ir/error.h"
#include "tests/debug/dump_reader_test_util.h"

namespace loom::debug {
namespace {

namespace fs = std::filesystem;
using testing::DumpWriter;
using testing::TempDir;
using testing::f32;
using testing::write_text;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

constexpr char kOrderHeader[] =
    "index,op_type,op_name,full_name,scope,file,line,role,forward,depth,graph\n";

TEST(DumpFileName, ParsesFromTheRight) {
  const auto t = parse_dump_file_name(
      "Conv2D.Conv2D-op12.3.4.1623124369613540.output.2.DefaultFormat.npy");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->op_type, "Conv2D");
  EXPECT_EQ(t->op_name, "Conv2D-op12");
  EXPECT_EQ(t->task, 3);
  EXPECT_EQ(t->stream, 4);
  EXPECT_EQ(t->timestamp, 1623124369613540);
  EXPECT_EQ(t->io, "output");
  EXPECT_EQ(t->slot, 2);
  EXPECT_EQ(t->format, "DefaultFormat");
  EXPECT_EQ(t->key(), "Conv2D-op12.output.2");
}

TEST(DumpFileName, OpNamesMayHoldDots) {
  const auto p =
      parse_dump_file_name("Parameter.moments.fc1.weight.0.0.17.output.0.DefaultFormat.npy");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->op_type, "Parameter");
  EXPECT_EQ(p->op_name, "moments.fc1.weight");
  EXPECT_EQ(p->timestamp, 17);
  EXPECT_EQ(p->key(), "Parameter.moments.fc1.weight.output.0");
  const auto g = parse_dump_file_name("Gradient.fc1.bias.0.0.18.output.0.DefaultFormat.npy");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->op_name, "fc1.bias");
  EXPECT_EQ(g->key(), "Gradient.fc1.bias.output.0");
  const auto in = parse_dump_file_name("Add.Add-op4-while_body_1.0.0.5.input.1.NCHW.npy");
  ASSERT_TRUE(in);
  EXPECT_EQ(in->op_name, "Add-op4-while_body_1");
  EXPECT_EQ(in->io, "input");
  EXPECT_EQ(in->format, "NCHW");
  EXPECT_EQ(in->key(), "Add-op4-while_body_1.input.1");
}

TEST(DumpFileName, RefusesNamesOutsideTheLayout) {
  for (const char* bad : {
           "statistic.csv",
           "Conv2D.Conv2D-op1.0.0.1.output.0.DefaultFormat",          // no .npy
           "Conv2D.Conv2D-op1.0.0.1.inout.0.DefaultFormat.npy",      // io
           "Conv2D.Conv2D-op1.0.0.1.output.x.DefaultFormat.npy",     // slot
           "Conv2D.Conv2D-op1.0.0.-1.output.0.DefaultFormat.npy",    // timestamp
           "Conv2D.Conv2D-op1.0.0.1e3.output.0.DefaultFormat.npy",   // timestamp
           "Conv2D.Conv2D-op1.0.a.1.output.0.DefaultFormat.npy",     // stream
           "Conv2D.0.0.1.output.0.DefaultFormat.npy",                // no op name
           ".Conv2D-op1.0.0.1.output.0.DefaultFormat.npy",           // no op type
           "Conv2D..0.0.1.output.0.DefaultFormat.npy",               // empty op name
           "Conv2D.Conv2D-op1.0.0.1.output.0..npy",                  // empty format
           "0.0.1.output.0.DefaultFormat.npy",                       // too few fields
           ".npy",
       }) {
    EXPECT_FALSE(parse_dump_file_name(bad)) << bad;
  }
}

// A dump with two graphs and two iterations, its files as loom writes them.
void write_small_dump(const DumpWriter& w) {
  w.tensor(0, 0, "Parameter", "fc.weight", 100, "output", 0, f32({2}, {1, 2}));
  w.tensor(0, 0, "MatMul", "MatMul-op0", 102, "output", 0, f32({2}, {3, 4}));
  w.tensor(0, 0, "MatMul", "MatMul-op0", 101, "input", 0, f32({2}, {5, 6}));
  w.tensor(0, 1, "MatMul", "MatMul-op0", 90, "output", 0, f32({2}, {7, 8}));
  w.tensor(1, 0, "ReLU", "ReLU-op0", 50, "output", 0, f32({1}, {9}));
  w.execution_order(0, std::string(kOrderHeader) +
                           "0,MatMul,MatMul-op0,Net/fc/MatMul-op0,Net/fc/MatMul,\"a,b.py\",12,"
                           "forward,,0,train_step\n"
                           "1,MatMulGrad,MatMul-op1,\"Gradients/Net/fc/MatMul-op1\",Gradients/Net/"
                           "fc/MatMul,\"say \"\"hi\"\"\",,backward,Net/fc/MatMul,1,\"while_body\n"
                           "_1\"\r\n");
  w.graph_ir(0, "%1 = MatMul(%0)\n");
  write_text(w.iteration_dir(0, 0) / "statistic.csv",
             "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
             "Max Value\nMatMul,MatMul-op0,0,0,102,output,0,8,float32,\"(2)\",4\n");
}

TEST(OpenDump, ReadsTheLayoutFromTheRootOrTheRankFolder) {
  TempDir tmp;
  DumpWriter w(tmp.path(), 0, "lenet");
  write_small_dump(w);
  for (const std::string& path :
       {tmp.str(), (tmp.path() / "rank_0").string(), (tmp.path() / "rank_0").string() + "/",
        (tmp.path() / "rank_0" / ".").string()}) {
    const DumpDir d = open_dump(path);
    EXPECT_EQ(d.path, path);
    EXPECT_EQ(d.rank, 0);
    ASSERT_EQ(d.tensors.size(), 5u) << path;
    // Ordered by (graph, iteration, timestamp).
    EXPECT_EQ(d.tensors[0].key(), "Parameter.fc.weight.output.0");
    EXPECT_EQ(d.tensors[1].key(), "MatMul-op0.input.0");
    EXPECT_EQ(d.tensors[2].key(), "MatMul-op0.output.0");
    EXPECT_EQ(d.tensors[3].iteration, 1);
    EXPECT_EQ(d.tensors[3].timestamp, 90);
    EXPECT_EQ(d.tensors[4].graph, 1);
    EXPECT_EQ(d.tensors[4].net, "lenet");
    EXPECT_EQ(d.tensors[4].path,
              (w.iteration_dir(1, 0) / "ReLU.ReLU-op0.0.0.50.output.0.DefaultFormat.npy").string());
    EXPECT_TRUE(load(d.tensors[2]).bitwise_equal(f32({2}, {3, 4})));

    ASSERT_EQ(d.execution_order.size(), 1u);
    const auto& rows = d.execution_order.at(0);
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].index, 0);
    EXPECT_EQ(rows[0].file, "a,b.py");
    EXPECT_EQ(rows[0].line, 12);
    EXPECT_EQ(rows[0].role, "forward");
    EXPECT_EQ(rows[1].op_type, "MatMulGrad");
    EXPECT_EQ(rows[1].full_name, "Gradients/Net/fc/MatMul-op1");
    EXPECT_EQ(rows[1].file, "say \"hi\"");
    EXPECT_EQ(rows[1].line, 0);
    EXPECT_EQ(rows[1].forward, "Net/fc/MatMul");
    EXPECT_EQ(rows[1].depth, 1);
    EXPECT_EQ(rows[1].graph, "while_body\n_1");
    const ExecutionOrderRow* n = d.find_node(0, "MatMul-op1");
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->index, 1);
    EXPECT_EQ(d.find_node(0, "MatMul-op9"), nullptr);
    EXPECT_EQ(d.find_node(1, "ReLU-op0"), nullptr);  // graph 1 has no execution order

    EXPECT_EQ(d.graph_ir.at(0), "%1 = MatMul(%0)\n");
    const auto& stats = d.statistics.at({0, 0});
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_EQ(stats[0].columns.at("Shape"), "(2)");
    EXPECT_EQ(stats[0].columns.at("Max Value"), "4");
    EXPECT_EQ(stats[0].columns.size(), 11u);
  }
}

TEST(OpenDump, PicksARank) {
  TempDir tmp;
  DumpWriter r0(tmp.path(), 0), r1(tmp.path(), 1);
  r0.tensor(0, 0, "ReLU", "ReLU-op0", 1, "output", 0, f32({1}, {0}));
  r1.tensor(0, 0, "ReLU", "ReLU-op0", 1, "output", 0, f32({1}, {1}));
  EXPECT_EQ(error_of([&] { open_dump(tmp.str()); }),
            "open_dump: expected one rank_{r} folder in '" + tmp.str() +
                "', got rank_0, rank_1; choose one (loom compare --rank R)");
  const DumpDir d = open_dump(tmp.str(), 1);
  EXPECT_EQ(d.rank, 1);
  ASSERT_EQ(d.tensors.size(), 1u);
  EXPECT_EQ(d.tensors[0].rank, 1);
  EXPECT_TRUE(load(d.tensors[0]).bitwise_equal(f32({1}, {1})));
  EXPECT_EQ(error_of([&] { open_dump(tmp.str(), 2); }),
            "open_dump: expected a folder rank_2 in '" + tmp.str() + "', got rank_0, rank_1");
  EXPECT_EQ(error_of([&] { open_dump((tmp.path() / "rank_0").string(), 1); }),
            "open_dump: expected rank_1, got the folder '" + (tmp.path() / "rank_0").string() +
                "' of rank 0");
}

TEST(OpenDump, ReadsMindSporesOwnFiles) {
  TempDir tmp;
  DumpWriter w(tmp.path());
  w.tensor(0, 0, "Conv2D", "Conv2D-op12", 5, "output", 0, f32({1}, {1}));
  // {graph}/constants/ is read as iteration -1; .pb graphs and the global execution order are
  // MindSpore's and not read; its execution order is a bare list of full names.
  const fs::path constants = w.rank_dir() / "Net" / "0" / "constants";
  fs::create_directories(constants);
  data::save_npy((constants / "Parameter.data-1.0.0.3.output.0.DefaultFormat.npy").string(),
                 f32({1}, {2}));
  write_text(w.rank_dir() / "graphs" / "ms_output_trace_code_graph_0.pb", "binary");
  write_text(w.rank_dir() / "execution_order" / "ms_global_execution_order_graph_0.csv", "x\n");
  w.execution_order(0, "Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/Conv2D-op12\n"
                       "Default/ReLU-op13\n");
  const DumpDir d = open_dump(tmp.str());
  ASSERT_EQ(d.tensors.size(), 2u);
  EXPECT_EQ(d.tensors[0].iteration, -1);
  EXPECT_EQ(d.tensors[0].key(), "Parameter.data-1.output.0");
  EXPECT_TRUE(d.graph_ir.empty());
  const auto& rows = d.execution_order.at(0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].op_type, "Conv2D");
  EXPECT_EQ(rows[0].op_name, "Conv2D-op12");
  EXPECT_EQ(rows[0].scope, "Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d");
  EXPECT_EQ(rows[1].index, 1);
  EXPECT_EQ(rows[1].op_name, "ReLU-op13");
}

TEST(OpenDump, MissingOrEmptyFolders) {
  TempDir tmp;
  const std::string missing = (tmp.path() / "nope").string();
  EXPECT_EQ(error_of([&] { open_dump(missing); }),
            "open_dump: expected a dump folder, got '" + missing + "' (no such file or folder)");
  EXPECT_EQ(error_of([&] { open_dump(""); }), "open_dump: expected a dump folder, got ''");
  write_text(tmp.path() / "file.txt", "x");
  EXPECT_EQ(error_of([&] { open_dump((tmp.path() / "file.txt").string()); }),
            "open_dump: expected a dump folder, got the file '" +
                (tmp.path() / "file.txt").string() + "'");
  const fs::path empty = tmp.path() / "empty";
  fs::create_directories(empty);
  EXPECT_EQ(error_of([&] { open_dump(empty.string()); }),
            "open_dump: expected a rank_{r} folder in '" + empty.string() +
                "' (MindSpore's dump layout {path}/rank_{r}/{net}/{graph}/{iteration}/), got an "
                "empty folder");
  EXPECT_EQ(error_of([&] { open_dump(tmp.str()); }),
            "open_dump: expected a rank_{r} folder in '" + tmp.str() +
                "' (MindSpore's dump layout {path}/rank_{r}/{net}/{graph}/{iteration}/), got none "
                "(it holds empty/, file.txt)");
}

// A well-formed dump with one defect added by `spoil`: the error names the defective file.
struct Spoiled {
  const char* what;
  std::function<void(const DumpWriter&)> spoil;
  std::string file;     // relative to the rank folder
  std::string message;  // what the error says after the file
};

TEST(OpenDump, HalfWrittenAndMalformedDumpsNameTheFile) {
  const std::vector<Spoiled> cases = {
      {"a stray file beside the tensors",
       [](const DumpWriter& w) { write_text(w.iteration_dir(0, 0) / "notes.txt", "x"); },
       "Net/0/0/notes.txt",
       "expected a tensor file named {op_type}.{op_name}.{task}.{stream}.{timestamp}."
       "{input|output}.{slot}.{format}.npy or statistic.csv, got 'notes.txt'"},
      {"a kernel-args .json (save_kernel_args)",
       [](const DumpWriter& w) {
         write_text(w.iteration_dir(0, 0) / "Conv2D.Conv2D-op0.json", "{}");
       },
       "Net/0/0/Conv2D.Conv2D-op0.json",
       "expected a tensor file named {op_type}.{op_name}.{task}.{stream}.{timestamp}."
       "{input|output}.{slot}.{format}.npy or statistic.csv, got 'Conv2D.Conv2D-op0.json'"},
      {"an empty iteration folder",
       [](const DumpWriter& w) { fs::create_directories(w.iteration_dir(0, 7)); },
       "Net/0/7",
       "expected tensor files or a statistic.csv in an iteration folder, got an empty folder "
       "(a dump cut short, or a run that wrote nothing?)"},
      {"an iteration folder that is not a number",
       [](const DumpWriter& w) { fs::create_directories(w.rank_dir() / "Net" / "0" / "tmp"); },
       "Net/0/tmp",
       "expected an iteration folder {iteration}/ (a number) or constants/ in a graph folder, "
       "got the folder 'tmp'"},
      {"a file in a net folder",
       [](const DumpWriter& w) { write_text(w.rank_dir() / "Net" / "x.npy", ""); },
       "Net/x.npy",
       "expected a graph folder {graph_id}/ (a number) in the net folder 'Net', got the file "
       "'x.npy'"},
      {"a file in the rank folder",
       [](const DumpWriter& w) { write_text(w.rank_dir() / "README", "x"); },
       "README",
       "expected only folders in a rank folder (.dump_metadata, graphs, execution_order, "
       "{net_name}), got the file 'README'"},
      {"a folder inside an iteration",
       [](const DumpWriter& w) { fs::create_directories(w.iteration_dir(0, 0) / "sub"); },
       "Net/0/0/sub",
       "expected only tensor files and statistic.csv in an iteration folder, got a folder"},
      {"an unknown file in graphs/",
       [](const DumpWriter& w) { write_text(w.rank_dir() / "graphs" / "g.ir", ""); },
       "graphs/g.ir",
       "expected graph files named ms_output_trace_code_graph_{graph_id}.ir in graphs/, got "
       "'g.ir'"},
      {"an empty execution-order file",
       [](const DumpWriter& w) { w.execution_order(0, ""); },
       "execution_order/ms_execution_order_graph_0.csv",
       "expected the header index,op_type,op_name,full_name,scope,file,line,role,forward,depth,"
       "graph and a row per launch, got an empty file"},
      {"an unterminated quote",
       [](const DumpWriter& w) {
         w.execution_order(0, std::string(kOrderHeader) + "0,A,\"A-op0,x\n1,B,B-op1\n");
       },
       "execution_order/ms_execution_order_graph_0.csv",
       "line 2: expected a closing quote, got the end of the file"},
      {"text after a closing quote",
       [](const DumpWriter& w) {
         w.execution_order(0, std::string(kOrderHeader) + "0,A,\"A-op0\"x,,,,,,,,\n");
       },
       "execution_order/ms_execution_order_graph_0.csv",
       "line 2: expected a comma or the end of the line after a closing quote, got 'x'"},
      {"a quote inside an unquoted field",
       [](const DumpWriter& w) {
         w.execution_order(0, std::string(kOrderHeader) + "0,A,A-o\"p0,,,,,,,,\n");
       },
       "execution_order/ms_execution_order_graph_0.csv",
       "line 2: expected a quote only around a whole field, got one inside the unquoted field "
       "'A-o\"...'"},
      {"a short row",
       [](const DumpWriter& w) {
         w.execution_order(0, std::string(kOrderHeader) + "0,A,A-op0,f,s,file,1,forward,,0,g\n"
                                                          "1,B,B-op1\n");
       },
       "execution_order/ms_execution_order_graph_0.csv",
       "line 3: expected 11 fields as in the header, got 3"},
      {"a missing column",
       [](const DumpWriter& w) { w.execution_order(0, "index,op_type\n0,A\n"); },
       "execution_order/ms_execution_order_graph_0.csv",
       "line 1: expected a header with the column 'op_name' (loom's execution order: index,"
       "op_type,op_name,full_name,scope,file,line,role,forward,depth,graph), got 'index,op_type'"},
      {"a bad index",
       [](const DumpWriter& w) {
         w.execution_order(0, std::string(kOrderHeader) + "x,A,A-op0,f,s,file,1,forward,,0,g\n");
       },
       "execution_order/ms_execution_order_graph_0.csv",
       "line 2: expected a non-negative integer in column 'index', got 'x'"},
      {"a statistic.csv without Op Name",
       [](const DumpWriter& w) {
         write_text(w.iteration_dir(0, 0) / "statistic.csv", "Op Type,IO,Slot\nReLU,output,0\n");
       },
       "Net/0/0/statistic.csv",
       "line 1: expected a header with the column 'Op Name' (MindSpore's statistic.csv "
       "columns), got 'Op Type,IO,Slot'"},
  };
  for (const Spoiled& c : cases) {
    TempDir tmp;
    DumpWriter w(tmp.path());
    w.tensor(0, 0, "ReLU", "ReLU-op0", 1, "output", 0, f32({1}, {0}));
    w.execution_order(0, std::string(kOrderHeader) + "0,ReLU,ReLU-op0,f,s,file,1,forward,,0,g\n");
    c.spoil(w);
    EXPECT_EQ(error_of([&] { open_dump(tmp.str()); }),
              "dump '" + (w.rank_dir() / c.file).string() + "': " + c.message)
        << c.what;
  }
}

TEST(OpenDump, ATruncatedTensorFailsWhenLoaded) {
  TempDir tmp;
  DumpWriter w(tmp.path());
  const std::string file = w.tensor(0, 0, "ReLU", "ReLU-op0", 1, "output", 0,
                                    f32({4}, {1, 2, 3, 4}));
  fs::resize_file(file, fs::file_size(file) - 3);  // cut off while writing
  const DumpDir d = open_dump(tmp.str());
  ASSERT_EQ(d.tensors.size(), 1u);
  EXPECT_EQ(error_of([&] { load(d.tensors[0]); }),
            file + ": expected 16 bytes of data for Float32 (4), got 13");
  fs::remove(file);
  EXPECT_EQ(error_of([&] { load(d.tensors[0]); }),
            file + ": expected a readable .npy file, got none");
}

}  // namespace
}  // namespace loom::debug
