// Runs the ONNX backend node tests (Debian's libonnx-testdata) through kiln's
// eager executor with the CPU kernels.
//
// Each test folder holds model.onnx and test_data_set_*/{input,output}_N.pb.
// A test is "unsupported" when kiln reports Unsupported (an op kiln does not
// list, a dtype or attribute variant it does not implement); any other error
// or a wrong answer is a failure. Exit status 1 on any failure, or when fewer
// than --min-passed tests pass.
//
//   kiln_conformance [--root DIR] [--filter SUBSTR] [--verbose] [--min-passed N]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "onnx/onnx_import.h"
#include "runtime/eager_executor.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

enum class Outcome { kPass, kFail, kUnsupported };

struct TestResult {
  Outcome outcome;
  std::string reason;
};

// numpy.testing.assert_allclose with ONNX's backend-test defaults.
constexpr double kRtol = 1e-3, kAtol = 1e-7;

std::string compare(const Tensor& expected, const Tensor& got, const std::string& name) {
  if (expected.dtype() != got.dtype())
    return fmt::format("output '{}': dtype {} expected {}", name, dtype_name(got.dtype()),
                       dtype_name(expected.dtype()));
  if (expected.shape() != got.shape())
    return fmt::format("output '{}': shape {} expected {}", name, shape_to_string(got.shape()),
                       shape_to_string(expected.shape()));
  for (int64_t i = 0; i < expected.numel(); ++i) {
    double e = expected.element_as_double(i), g = got.element_as_double(i);
    if (std::isnan(e) && std::isnan(g)) continue;
    if (std::isinf(e) && e == g) continue;
    bool ok = dtype_is_float(expected.dtype()) ? std::abs(e - g) <= kAtol + kRtol * std::abs(e) : e == g;
    if (!ok) return fmt::format("output '{}' element {}: {} expected {}", name, i, g, e);
  }
  return "";
}

TestResult run_test(const fs::path& dir) {
  auto graph = onnx_import_file((dir / "model.onnx").string());
  if (!graph.ok()) {
    bool unsup = graph.status().code() == StatusCode::kUnsupported;
    return {unsup ? Outcome::kUnsupported : Outcome::kFail, graph.status().message()};
  }
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0)
      sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return {Outcome::kFail, "no test_data_set_* folders"};
  EagerExecutor exec(*graph);
  for (const fs::path& set : sets) {
    NamedTensors inputs;
    for (size_t i = 0;; ++i) {
      fs::path p = set / fmt::format("input_{}.pb", i);
      if (!fs::exists(p)) break;
      if (i >= graph->inputs().size()) return {Outcome::kFail, "more input files than graph inputs"};
      auto t = onnx_read_tensor_file(p.string());
      if (!t.ok())
        return {t.status().code() == StatusCode::kUnsupported ? Outcome::kUnsupported : Outcome::kFail,
                t.status().message()};
      inputs.emplace_back(graph->inputs()[i]->name, std::move(t).value());
    }
    auto outputs = exec.run(inputs);
    if (!outputs.ok()) {
      bool unsup = outputs.status().code() == StatusCode::kUnsupported;
      return {unsup ? Outcome::kUnsupported : Outcome::kFail, outputs.status().message()};
    }
    for (size_t i = 0; i < outputs->size(); ++i) {
      fs::path p = set / fmt::format("output_{}.pb", i);
      if (!fs::exists(p)) continue;
      auto expected = onnx_read_tensor_file(p.string());
      if (!expected.ok())
        return {expected.status().code() == StatusCode::kUnsupported ? Outcome::kUnsupported : Outcome::kFail,
                expected.status().message()};
      std::string diff = compare(*expected, (*outputs)[i], graph->outputs()[i]->name);
      if (!diff.empty()) return {Outcome::kFail, fmt::format("{}: {}", set.filename().string(), diff)};
    }
  }
  return {Outcome::kPass, ""};
}

}  // namespace

int main(int argc, char** argv) {
  std::string root = "/usr/share/libonnx-testdata/data/node";
  std::string filter;
  bool verbose = false;
  long min_passed = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--root" && i + 1 < argc) root = argv[++i];
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--verbose") verbose = true;
    else if (a == "--min-passed" && i + 1 < argc) min_passed = std::strtol(argv[++i], nullptr, 10);
    else {
      fmt::print(stderr, "usage: kiln_conformance [--root DIR] [--filter SUBSTR] [--verbose] [--min-passed N]\n");
      return 2;
    }
  }
  if (!fs::is_directory(root)) {
    fmt::print(stderr, "kiln_conformance: {} is not a folder (install libonnx-testdata)\n", root);
    return 2;
  }
  std::vector<fs::path> tests;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && e.path().filename().string().find(filter) != std::string::npos)
      tests.push_back(e.path());
  std::sort(tests.begin(), tests.end());

  int passed = 0, failed = 0;
  std::vector<std::pair<std::string, std::string>> unsupported_tests;
  for (const fs::path& t : tests) {
    TestResult r = run_test(t);
    std::string name = t.filename().string();
    switch (r.outcome) {
      case Outcome::kPass:
        ++passed;
        if (verbose) fmt::print("PASS        {}\n", name);
        break;
      case Outcome::kFail:
        ++failed;
        fmt::print("FAIL        {}: {}\n", name, r.reason);
        break;
      case Outcome::kUnsupported:
        unsupported_tests.emplace_back(name, r.reason);
        if (verbose) fmt::print("UNSUPPORTED {}: {}\n", name, r.reason);
        break;
    }
  }
  if (!verbose) {
    fmt::print("unsupported tests:\n");
    for (const auto& [name, reason] : unsupported_tests) fmt::print("  {}: {}\n", name, reason);
  }
  fmt::print("ONNX node conformance: {} passed, {} failed, {} unsupported ({} tests)\n", passed, failed,
             unsupported_tests.size(), tests.size());
  if (passed < min_passed) {
    fmt::print("fewer than the required {} tests passed\n", min_passed);
    return 1;
  }
  return failed > 0 ? 1 : 0;
}
