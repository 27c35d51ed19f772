// Task Bench executables: bad flags exit 2 with a message naming the problem, the summary lines keep their
// exact formats and values, --dump-graph prints only the graph, and serial and weft agree.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Result {
  int status = -1;  // exit status, or -1 if the process did not exit normally
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs `exe args` through the shell, capturing stdout and stderr separately.
Result run(const std::string& exe, const std::string& args) {
  char out_path[] = "/tmp/taskbench_cli_out_XXXXXX", err_path[] = "/tmp/taskbench_cli_err_XXXXXX";
  const int fo = mkstemp(out_path), fe = mkstemp(err_path);
  close(fo);
  close(fe);
  const std::string cmd = "'" + exe + "' " + args + " >" + out_path + " 2>" + err_path;
  const int raw = std::system(cmd.c_str());
  Result r;
  if (raw != -1 && WIFEXITED(raw)) r.status = WEXITSTATUS(raw);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  std::remove(out_path);
  std::remove(err_path);
  return r;
}

// True if `line` matches `pattern`, where each "%e" in the pattern stands for a number printed with printf's
// %e (d.dddddde+dd).
bool line_matches(const std::string& pattern, const std::string& line) {
  std::size_t p = 0, l = 0;
  while (p < pattern.size()) {
    if (pattern.compare(p, 2, "%e") == 0) {
      const std::string shape = "0.000000e+00";
      if (l + shape.size() > line.size()) return false;
      for (std::size_t k = 0; k < shape.size(); ++k) {
        const char c = line[l + k], want = shape[k];
        const bool ok = want == '0' ? (c >= '0' && c <= '9') : want == '+' ? (c == '+' || c == '-') : c == want;
        if (!ok) return false;
      }
      p += 2;
      l += shape.size();
    } else {
      if (l >= line.size() || line[l] != pattern[p]) return false;
      ++p;
      ++l;
    }
  }
  return l == line.size();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) v.push_back(line);
  return v;
}

// The lines of `text` from the first one equal to patterns[0] must match `patterns`, one to one, to the end.
void expect_tail(const std::string& text, const std::vector<std::string>& patterns) {
  const auto lines = lines_of(text);
  auto first = std::find(lines.begin(), lines.end(), patterns.front());
  ASSERT_NE(first, lines.end()) << "no line '" << patterns.front() << "' in\n" << text;
  ASSERT_EQ(static_cast<std::size_t>(lines.end() - first), patterns.size()) << text;
  for (std::size_t k = 0; k < patterns.size(); ++k)
    EXPECT_TRUE(line_matches(patterns[k], first[static_cast<std::ptrdiff_t>(k)]))
        << "line '" << first[static_cast<std::ptrdiff_t>(k)] << "' does not match '" << patterns[k] << "'";
}

const std::string kSerial = TASKBENCH_SERIAL;
const std::string kWeft = TASKBENCH_WEFT;
const std::string kWeftTaskiter = TASKBENCH_WEFT_TASKITER;

void expect_usage_error(const std::string& exe, const std::string& args, const std::string& message) {
  const Result r = run(exe, args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
  EXPECT_NE(r.err.find("error: " + message), std::string::npos) << args << "\nstderr: " << r.err;
  EXPECT_EQ(r.out, "") << args;
}

}  // namespace

TEST(Flags, BadFlagsExit2WithAMessage) {
  expect_usage_error(kSerial, "-bogus", "unknown flag '-bogus'");
  expect_usage_error(kSerial, "-steps", "-steps needs a value");
  expect_usage_error(kSerial, "-steps abc", "-steps expects an integer, got 'abc'");
  expect_usage_error(kSerial, "-steps 1.5", "-steps expects an integer, got '1.5'");
  expect_usage_error(kSerial, "-steps 99999999999999999999999", "-steps must be in 1..");
  expect_usage_error(kSerial, "-width 0", "-width must be in 1..");
  expect_usage_error(kSerial, "-iter -1", "-iter must be in 0..");
  expect_usage_error(kSerial, "-output 8", "-output must be in 16..");
  expect_usage_error(kSerial, "-fraction 1.5", "-fraction must be in 0..1");
  expect_usage_error(kSerial, "-fraction x", "-fraction expects a number, got 'x'");
  expect_usage_error(kSerial, "-imbalance 3", "-imbalance must be in 0..2");
  expect_usage_error(kSerial, "-field 0", "-field must be in 1..");
  expect_usage_error(kSerial, "-nodes 0", "-nodes must be in 1..");
  expect_usage_error(kSerial, "-type nope", "unknown -type 'nope'");
  expect_usage_error(kSerial, "-type random_spread", "-type random_spread is not implemented");
  expect_usage_error(kSerial, "-kernel nope", "unknown -kernel 'nope'");
  expect_usage_error(kSerial, "-kernel io_bound", "-kernel io_bound is not implemented");
#if TASKBENCH_HAVE_BLAS
  expect_usage_error(kSerial, "-kernel compute_dgemm", "-kernel compute_dgemm needs -scratch >= 24 (got 0)");
  expect_usage_error(kSerial, "-kernel memory_daxpy -scratch 100 -sample 8",
                     "-kernel memory_daxpy needs -scratch >= 16 * -sample");
#else
  expect_usage_error(kSerial, "-kernel compute_dgemm", "-kernel compute_dgemm needs BLAS");
  expect_usage_error(kSerial, "-kernel memory_daxpy", "-kernel memory_daxpy needs BLAS");
#endif
  expect_usage_error(kSerial, "-type fft -width 1", "-type fft needs -width >= 2");
  expect_usage_error(kSerial, "-type spread -width 4 -radix 5", "-type spread needs -radix <= -width");
  expect_usage_error(kSerial, "-type spread -width 10 -radix 3 -period 5", "-type spread needs -period <= ceil");
  // The default period (3) too large for the width: the message says the period was the default.
  expect_usage_error(kSerial, "-type spread -width 4 -radix 3",
                     "-type spread needs -period <= ceil(width / radix) = 2 (got 3) (the default period of -type "
                     "spread is 3: give -period)");
  expect_usage_error(kSerial, "-type spread -period 0", "-type spread needs -period > 0");
  expect_usage_error(kSerial, "-type stencil_1d -period 2", "-period applies only to -type spread");
  expect_usage_error(kSerial, "-type stencil_1d_periodic -width 2", "-type stencil_1d_periodic needs -width >= 3");
  expect_usage_error(kSerial, "-kernel memory_bound -scratch 0", "-kernel memory_bound needs -scratch >= 16");
  expect_usage_error(kSerial, "-scratch 7", "-scratch must be 0 or at least 8 (got 7)");
  // The graph that is wrong is named when there are several.
  expect_usage_error(kSerial, "-type stencil_1d -and -type fft -width 1", "graph 1: -type fft needs -width >= 2");
  expect_usage_error(kSerial, "-workers 2", "taskbench-serial runs on one worker");
  expect_usage_error(kWeft, "-workers 0", "-workers must be in 1..");
  expect_usage_error(kWeft, "-workers", "-workers needs a value");
}

TEST(Flags, HelpExits0) {
  const Result r = run(kSerial, "-h");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("-steps N"), std::string::npos);
  EXPECT_NE(r.out.find("-field N          output buffers per point: timestep t writes buffer t mod N"),
            std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not in this build") == std::string::npos, TASKBENCH_HAVE_BLAS != 0) << r.out;
}

TEST(Flags, BadFieldValuesExit2WithAMessage) {
  for (const auto& exe : {kSerial, kWeft, kWeftTaskiter}) {
    expect_usage_error(exe, "-field 0", "-field must be in 1..");
    expect_usage_error(exe, "-field -2", "-field must be in 1..");
    expect_usage_error(exe, "-field two", "-field expects an integer, got 'two'");
    expect_usage_error(exe, "-field", "-field needs a value");
    expect_usage_error(exe, "-type stencil_1d -field 1",
                       "-field 1 keeps one output buffer per point, which a task would overwrite");
    // Per graph: the second one is named.
    expect_usage_error(exe, "-type trivial -field 1 -and -type tree -field 1", "graph 1: -field 1 keeps one");
  }
}

// -field changes where outputs live, never what the run computes: every depth validates and gives the same
// summary, in the reference and in the weft implementations (the validation runs cover the other systems).
TEST(Output, FieldsValidateAndLeaveTheSummaryUnchanged) {
  const std::string graphs =
      "-steps 13 -width 5 -type stencil_1d -kernel compute_bound -iter 4 -output 48 -and -steps 11 -width 6 -type "
      "random_nearest -radix 3 -fraction 0.5 -kernel memory_bound -scratch 256 -sample 4 -iter 3";
  std::string reference;
  for (const std::string fields : {"", " -field 2", " -field 3", " -field 99", " -field 2 -and -steps 4 -width 2 "
                                                                               "-type trivial -field 1"}) {
    for (const auto& [exe, extra] : {std::pair{kSerial, ""}, std::pair{kWeft, " -workers 2"},
                                     std::pair{kWeftTaskiter, " -workers 2"}}) {
      // The field applies to the graph it follows: the first graph keeps the default, the second takes it.
      const Result r = run(exe, graphs + fields + extra);
      ASSERT_EQ(r.status, 0) << exe << " " << fields << "\n" << r.err;
      std::string summary = r.out.substr(r.out.find("Total Tasks"));
      summary = summary.substr(0, summary.find("Elapsed Time"));
      if (fields.find("trivial") != std::string::npos) {
        EXPECT_EQ(summary.find("Total Tasks 139\n"), 0u) << summary;  // 65 + 66 + 8
        continue;
      }
      if (reference.empty()) reference = summary;
      EXPECT_EQ(summary, reference) << exe << " " << fields;
    }
  }
}

#if TASKBENCH_HAVE_BLAS
TEST(Output, BlasKernelsCountTheirWork) {
  // compute_dgemm, order 10 (scratch 2400): 12 tasks of 2 x 10^3 x 3 FLOPs; memory_daxpy: dom of width 3 over 2
  // steps has 2 tasks, of 1000 x 5 / 4 bytes each.
  for (const auto& [exe, extra] : {std::pair{kSerial, ""}, std::pair{kWeft, " -workers 2"}}) {
    const Result r = run(exe, "-steps 3 -width 4 -type stencil_1d -kernel compute_dgemm -iter 3 -scratch 2400 -and "
                              "-steps 2 -width 3 -type dom -kernel memory_daxpy -iter 5 -scratch 1000 -sample 4");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("        Type: compute_dgemm\n"), std::string::npos);
    EXPECT_NE(r.out.find("        Type: memory_daxpy\n"), std::string::npos);
    expect_tail(r.out, {"Total Tasks 14", "Total Dependencies 21", "  Unable to estimate local/nonlocal dependencies",
                        "Total FLOPs 72000", "Total Bytes 2500", "Elapsed Time %e seconds", "FLOP/s %e", "B/s %e",
                        "Transfer (estimated):", "  Unable to estimate local/nonlocal transfer"});
  }
}
#endif

TEST(Output, ConfigurationAndSummaryFormats) {
  const std::string args =
      "-steps 5 -width 4 -type stencil_1d -kernel compute_bound -iter 3 -and -steps 3 -width 2 -type no_comm "
      "-kernel memory_bound -scratch 64 -sample 2 -iter 4 -output 32";
  for (const auto& [exe, extra] : {std::pair{kSerial, ""}, std::pair{kWeft, " -workers 2"}}) {
    const Result r = run(exe, args + extra);
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string expected_config =
        "Running Task Benchmark\n"
        "  Configuration:\n"
        "    Task Graph 1:\n"
        "      Time Steps: 5\n"
        "      Max Width: 4\n"
        "      Dependence Type: stencil_1d\n"
        "      Radix: 3\n"
        "      Period: 0\n"
        "      Fraction Connected: 0.250000\n"
        "      Kernel:\n"
        "        Type: compute_bound\n"
        "        Iterations: 3\n"
        "        Samples: 16\n"
        "        Imbalance: 0.000000\n"
        "      Output Bytes: 16\n"
        "      Scratch Bytes: 0\n"
        "    Task Graph 2:\n"
        "      Time Steps: 3\n"
        "      Max Width: 2\n"
        "      Dependence Type: no_comm\n"
        "      Radix: 3\n"
        "      Period: 0\n"
        "      Fraction Connected: 0.250000\n"
        "      Kernel:\n"
        "        Type: memory_bound\n"
        "        Iterations: 4\n"
        "        Samples: 2\n"
        "        Imbalance: 0.000000\n"
        "      Output Bytes: 32\n"
        "      Scratch Bytes: 64\n";
    ASSERT_EQ(r.out.substr(0, expected_config.size()), expected_config);
    // stencil: 20 tasks, 4 x (2+3+3+2) deps, 20 x (2*64*3 + 64) FLOPs; no_comm: 6 tasks, 4 deps,
    // 6 x 64*4/2 bytes.
    EXPECT_EQ(r.out.substr(expected_config.size(), 17), "Total Tasks 26\nTo");  // the summary follows at once
    expect_tail(r.out, {"Total Tasks 26", "Total Dependencies 44", "  Unable to estimate local/nonlocal dependencies",
                        "Total FLOPs 8960", "Total Bytes 768", "Elapsed Time %e seconds", "FLOP/s %e", "B/s %e",
                        "Transfer (estimated):", "  Unable to estimate local/nonlocal transfer"});
  }
}

TEST(Output, NodesEstimates) {
  const Result r = run(kSerial, "-steps 3 -width 4 -type stencil_1d -nodes 2 -output 32");
  ASSERT_EQ(r.status, 0) << r.err;
  expect_tail(r.out, {"Total Tasks 12", "Total Dependencies 20", "  Local Dependencies 16 (estimated)",
                      "  Nonlocal Dependencies 4 (estimated)", "  Number of Nodes (used for estimate) 2",
                      "Total FLOPs 0", "Total Bytes 0", "Elapsed Time %e seconds", "FLOP/s %e", "B/s %e",
                      "Transfer (estimated):", "  Local Bytes 512", "  Nonlocal Bytes 128", "  Local Bandwidth %e B/s",
                      "  Nonlocal Bandwidth %e B/s"});
}

TEST(Output, DumpGraphOnlyAndSameForEverySystem) {
  const std::string args = "-steps 3 -width 4 -type stencil_1d -and -steps 2 -width 3 -type tree --dump-graph";
  const Result s = run(kSerial, args);
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_EQ(s.out,
            "graph 0\n0 0 : | 0 1\n0 1 : | 0 1 2\n0 2 : | 1 2 3\n0 3 : | 2 3\n"
            "1 0 : 0 1 | 0 1\n1 1 : 0 1 2 | 0 1 2\n1 2 : 1 2 3 | 1 2 3\n1 3 : 2 3 | 2 3\n"
            "2 0 : 0 1 |\n2 1 : 0 1 2 |\n2 2 : 1 2 3 |\n2 3 : 2 3 |\n"
            "graph 1\n0 0 : | 0 1\n1 0 : 0 |\n1 1 : 0 |\n");
  const Result w = run(kWeft, args);
  EXPECT_EQ(w.status, 0);
  EXPECT_EQ(w.out, s.out);
}

TEST(Output, VerbosePrintsTheGraph) {
  const Result r = run(kSerial, "-steps 2 -width 3 -type stencil_1d -vv");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("      Timestep 1 (offset 0, width 3, dependence set 0):\n"
                       "        Point 0: dependencies 0 1; reverse dependencies\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("        Point 1: dependencies; reverse dependencies 0 1 2\n"), std::string::npos) << r.out;
}

TEST(Output, SkipGraphValidationStillRuns) {
  const Result r = run(kWeft, "-steps 4 -width 3 -type nearest -radix 2 -skip-graph-validation -workers 2");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Total Tasks 12\n"), std::string::npos);
}
