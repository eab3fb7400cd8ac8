// kiln's eager outputs on the reference models (tests/models, exported from
// PyTorch by tools/make_reference_models.py) against PyTorch's outputs:
// max abs error <= 1e-4 * max |reference| (fp32).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "npy/npy.h"
#include "onnx/onnx_import.h"
#include "runtime/eager_executor.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(KILN_SOURCE_DIR) / "tests" / "models";

class ReferenceModel : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceModel, EagerMatchesPyTorch) {
  fs::path dir = kModels / GetParam();
  auto graph = onnx_import_file((dir / "model.onnx").string());
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  NamedTensors inputs;
  for (const Value* v : graph->inputs()) {
    auto t = npy_read((dir / "inputs" / (v->name + ".npy")).string());
    ASSERT_TRUE(t.ok()) << t.status().message();
    inputs.emplace_back(v->name, std::move(t).value());
  }
  EagerExecutor exec(*graph);
  auto outputs = exec.run(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status().message();
  for (size_t i = 0; i < outputs->size(); ++i) {
    const std::string& name = graph->outputs()[i]->name;
    auto expected = npy_read((dir / "outputs" / (name + ".npy")).string());
    ASSERT_TRUE(expected.ok()) << expected.status().message();
    const Tensor& got = (*outputs)[i];
    ASSERT_EQ(got.shape(), expected->shape()) << name;
    ASSERT_EQ(got.dtype(), DType::kF32) << name;
    double max_ref = 0, max_err = 0;
    for (int64_t k = 0; k < got.numel(); ++k) {
      double e = expected->data<float>()[k], g = got.data<float>()[k];
      max_ref = std::max(max_ref, std::abs(e));
      max_err = std::max(max_err, std::isnan(g) ? INFINITY : std::abs(e - g));
    }
    EXPECT_LE(max_err, 1e-4 * max_ref) << GetParam() << " output " << name << ": max |err| " << max_err
                                       << ", max |ref| " << max_ref;
    std::string relative = fmt::format("{:.2e}", max_err / max_ref);
    RecordProperty(name + "_relative_error", relative);
    fmt::print("{} {}: max |err| / max |ref| = {}\n", GetParam(), name, relative);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceModel,
                         ::testing::Values("unet", "vae_decoder", "text_encoder", "dit", "dit_tiny"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
