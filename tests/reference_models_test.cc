// kiln's eager outputs on the reference models (tests/models, exported from
// PyTorch by tools/make_reference_models.py) against PyTorch's outputs:
// max abs error <= 1e-4 * max |reference| (fp32).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "npy/npy.h"
#include "reference_close.h"
#include "onnx/onnx_import.h"
#include "heap_counter/heap_counter.h"
#include "runtime/eager_executor.h"
#include "runtime/plan.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(KILN_SOURCE_DIR) / "tests" / "models";

class ReferenceModel : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return kModels / GetParam(); }
  Graph load() const {
    auto graph = onnx_import_file((dir() / "model.onnx").string());
    EXPECT_TRUE(graph.ok()) << graph.status().message();
    return graph.ok() ? std::move(graph).value() : Graph();
  }
  NamedTensors inputs(const Graph& graph) const {
    NamedTensors inputs;
    for (const Value* v : graph.inputs()) {
      auto t = npy_read((dir() / "inputs" / (v->name + ".npy")).string());
      EXPECT_TRUE(t.ok()) << t.status().message();
      if (t.ok()) inputs.emplace_back(v->name, std::move(t).value());
    }
    return inputs;
  }
  // max |err| <= 1e-4 * max |reference| against PyTorch's saved output.
  void expect_matches_pytorch(const std::string& mode, const std::string& name, const TensorView& got) {
    auto expected = npy_read((dir() / "outputs" / (name + ".npy")).string());
    ASSERT_TRUE(expected.ok()) << expected.status().message();
    ASSERT_EQ(got.shape, expected->shape()) << name;
    ASSERT_EQ(got.dtype, DType::kF32) << name;
    double max_ref = 0, max_err = 0;
    for (int64_t k = 0; k < got.numel(); ++k) {
      double e = expected->data<float>()[k], g = got.as<float>()[k];
      max_ref = std::max(max_ref, std::abs(e));
      max_err = std::max(max_err, std::isnan(g) ? INFINITY : std::abs(e - g));
    }
    EXPECT_LE(max_err, 1e-4 * max_ref) << GetParam() << " " << mode << " output " << name << ": max |err| "
                                       << max_err << ", max |ref| " << max_ref;
    std::string relative = fmt::format("{:.2e}", max_err / max_ref);
    RecordProperty(mode + "_" + name + "_relative_error", relative);
    fmt::print("{} {} {}: max |err| / max |ref| = {}\n", GetParam(), mode, name, relative);
  }
};

TEST_P(ReferenceModel, EagerMatchesPyTorch) {
  Graph graph = load();
  EagerExecutor exec(graph);
  auto outputs = exec.run(inputs(graph));
  ASSERT_TRUE(outputs.ok()) << outputs.status().message();
  for (size_t i = 0; i < outputs->size(); ++i)
    expect_matches_pytorch("eager", graph.outputs()[i]->name, (*outputs)[i].view());
}

// The FLOP count (node_flops, runtime/profile.h) is the same before and
// after fusion: every MatMul, Conv and attention the exporter wrote is
// counted once, whichever kernel runs it.
TEST_P(ReferenceModel, FusionKeepsTheFlopCount) {
  int64_t counts[2] = {0, 0};
  for (int fused = 0; fused < 2; ++fused) {
    Graph graph = load();
    std::vector<std::pair<std::string, Shape>> signature;
    for (const auto& [name, t] : inputs(graph)) signature.emplace_back(name, t.shape());
    auto dims = input_dims(graph, signature);
    ASSERT_TRUE(dims.ok()) << dims.status().message();
    PassOptions passes;
    if (!fused)
      passes.disabled = {"fuse_layer_norm", "fuse_adaln", "fuse_gelu", "fuse_geglu", "fuse_silu",
                         "fuse_group_norm", "fuse_attention", "fuse_linear", "fuse_conv"};
    auto plan = Plan::compile(std::move(graph), {.dims = *dims, .passes = passes});
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    counts[fused] = (*plan)->stats().flops;
  }
  EXPECT_GT(counts[0], 0);
  EXPECT_EQ(counts[0], counts[1]) << "unfused vs fused";
  fmt::print("{}: {:.3f} MFLOP per forward\n", GetParam(), counts[1] / 1e6);
}

// The compiled plan (passes, arena, prepared kernels) on the same inputs,
// run twice. The second run replays prepared kernels and allocates nothing
// on the heap: not one step.
TEST_P(ReferenceModel, GraphMatchesPyTorchAndReplayAllocatesNothing) {
  Graph graph = load();
  const NamedTensors given = inputs(graph);
  auto plan = testing::compile_bound(std::move(graph), given);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_TRUE((*plan)->run().ok());
  RunProfile profile;
  Status status = (*plan)->run(&profile);
  ASSERT_TRUE(status.ok()) << status.message();
  if (HeapCounter::available()) {
    for (const StepProfile& step : profile.steps) EXPECT_EQ(step.heap_allocations, 0) << node_label(*step.node);
  }
  for (size_t i = 0; i < (*plan)->outputs().size(); ++i)
    expect_matches_pytorch("graph", (*plan)->outputs()[i]->name, (*plan)->output(i));
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceModel,
                         ::testing::Values("unet", "vae_decoder", "text_encoder", "dit", "dit_tiny"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kiln
