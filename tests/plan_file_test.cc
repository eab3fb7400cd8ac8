// .kplan files: a round trip computes the same; every corrupted, truncated,
// malformed or stale file is rejected with a clear error (never a crash);
// a stale file whose model is at hand is recompiled.
#include "runtime/plan_file.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "core/mapped_file.h"
#include "npy/npy.h"
#include "onnx/onnx_import.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = fs::path(KILN_SOURCE_DIR) / "tests" / "models" / "dit_tiny";

class PlanFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("kiln_plan_file_test_{}", ::getpid());
    fs::create_directories(dir_);
    for (const char* name : {"x", "t"}) inputs_.emplace_back(name, *npy_read((kModel / "inputs" / (std::string(name) + ".npy")).string()));
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Plan> compile() {
    auto graph = onnx_import_file(model_path());
    EXPECT_TRUE(graph.ok());
    auto plan = Plan::compile(std::move(graph).value(), {.dims = {{"batch", 2}}, .keep_constants = true});
    EXPECT_TRUE(plan.ok()) << plan.status().message();
    return std::move(plan).value();
  }
  PlanKey key(const Plan& plan) {
    auto k = plan_key_for(model_path(), plan.signature(), {{"batch", 2}});
    EXPECT_TRUE(k.ok());
    return *k;
  }
  std::string model_path() const { return (kModel / "model.onnx").string(); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::vector<float> run(Plan& plan) {
    for (const auto& [name, t] : inputs_) EXPECT_TRUE(plan.bind_input(name, t.view()).ok());
    EXPECT_TRUE(plan.run().ok());
    const TensorView& y = plan.output(0);
    return {y.as<float>(), y.as<float>() + y.numel()};
  }

  fs::path dir_;
  std::vector<std::pair<std::string, Tensor>> inputs_;
};

TEST_F(PlanFile, RoundTripComputesTheSame) {
  std::unique_ptr<Plan> plan = compile();
  ASSERT_TRUE(write_plan_file(path("a.kplan"), *plan, key(*plan)).ok());
  EXPECT_TRUE(looks_like_plan_file(path("a.kplan")));
  EXPECT_FALSE(looks_like_plan_file(model_path()));
  auto loaded = read_plan_file(path("a.kplan"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ(loaded->key.signature, "x:f32[2,4,8,8] t:f32[2]");
  EXPECT_EQ(loaded->plan->stats().passes.counts.at("fuse_attention"), 6);
  EXPECT_EQ(loaded->plan->stats().nodes, plan->stats().nodes);
  EXPECT_EQ(run(*loaded->plan), run(*plan));
}

// Without keep_constants a plan frees the weights it packed (they are held
// once, packed): it computes the same, and refuses to be written to a file.
TEST_F(PlanFile, APlanThatFreedItsPackedWeightsComputesTheSameButIsNotWritten) {
  std::unique_ptr<Plan> whole = compile();
  auto graph = onnx_import_file(model_path());
  ASSERT_TRUE(graph.ok());
  auto freed = Plan::compile(std::move(graph).value(), {.dims = {{"batch", 2}}});
  ASSERT_TRUE(freed.ok()) << freed.status().message();
  EXPECT_TRUE(whole->graph_whole());
  EXPECT_FALSE((*freed)->graph_whole());
  size_t constants_whole = 0, constants_freed = 0;
  for (const auto& v : whole->graph().values()) constants_whole += v->constant ? v->constant->nbytes() : 0;
  for (const auto& v : (*freed)->graph().values()) constants_freed += v->constant ? v->constant->nbytes() : 0;
  EXPECT_LT(constants_freed, constants_whole / 2) << "the Linear weights are most of the model";
  EXPECT_EQ(run(**freed), run(*whole));
  EXPECT_EQ(run(**freed), run(*whole)) << "and again, replaying";
  Status s = write_plan_file(path("freed.kplan"), **freed, key(**freed));
  EXPECT_NE(s.message().find("freed constants"), std::string::npos) << s.message();
}

TEST_F(PlanFile, RejectsEveryCorruptionAndTruncation) {
  std::unique_ptr<Plan> plan = compile();
  ASSERT_TRUE(write_plan_file(path("good.kplan"), *plan, key(*plan)).ok());
  const std::string good = *read_file(path("good.kplan"));
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::string bad = good;
    const size_t at = trial < 40 ? size_t(trial) : size_t(rng() % bad.size());  // the prefix, then anywhere
    bad[at] = char(bad[at] ^ (1 + rng() % 255));
    ASSERT_TRUE(write_file(path("bad.kplan"), bad).ok());
    auto loaded = read_plan_file(path("bad.kplan"));
    ASSERT_FALSE(loaded.ok()) << "byte " << at;
    EXPECT_NE(loaded.status().message().find("bad.kplan: "), std::string::npos) << loaded.status().message();
  }
  for (size_t length : {size_t(0), size_t(7), size_t(8), size_t(27), size_t(100), good.size() / 2, good.size() - 1}) {
    ASSERT_TRUE(write_file(path("short.kplan"), good.substr(0, length)).ok());
    auto loaded = read_plan_file(path("short.kplan"));
    ASSERT_FALSE(loaded.ok()) << length;
  }
  ASSERT_TRUE(write_file(path("cut.kplan"), good.substr(0, good.size() / 2)).ok());
  EXPECT_EQ(read_plan_file(path("cut.kplan")).status().message(),
            path("cut.kplan") + ": corrupt or truncated plan file (checksum mismatch)");
}

// A file with a valid checksum around a header that lies: caught by the
// header checks, the graph verifier and shape inference.
TEST_F(PlanFile, RejectsMalformedHeadersWithValidChecksums) {
  auto file_with_header = [](const std::string& header) {
    std::string f = "KILNPLAN";
    const uint32_t version = kPlanFormatVersion;
    const uint64_t n = header.size();
    f.append(reinterpret_cast<const char*>(&version), 4).append(reinterpret_cast<const char*>(&n), 8) += header;
    f.resize((f.size() + 63) / 64 * 64);
    const uint64_t h = XXH3_64bits(f.data(), f.size());
    return f.append(reinterpret_cast<const char*>(&h), 8);
  };
  const std::string key = fmt::format(
      R"("key": {{"kiln_version": "{}", "isa": "{}", "precision": "f32", "model_path": "m", "model_hash": "0",
          "signature": "", "dims": {{}}}}, "opset": 17, "fusions": {{}})",
      KILN_VERSION_STRING, current_isa());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "plan header is not JSON"},
      {"{}", "malformed plan header"},
      {"{" + key + R"(, "values": [], "inputs": [], "outputs": [7], "nodes": []})", "value index 7 out of range"},
      {"{" + key + R"(, "values": [{"name": "x", "dtype": "f32", "shape": [-4]}], "inputs": [0], "outputs": [0], "nodes": []})",
       "negative"},
      {"{" + key + R"(, "values": [{"name": "w", "dtype": "f32", "shape": [1000000], "constant": {"offset": 0}}],
           "inputs": [], "outputs": [0], "nodes": []})",
       "outside the file"},
      {"{" + key + R"(, "values": [{"name": "x", "dtype": "f32", "shape": [2]}, {"name": "y", "dtype": "f32", "shape": [2]}],
           "inputs": [0], "outputs": [1], "nodes": [{"op": "Frob", "name": "n", "inputs": [0], "outputs": [1], "attrs": {}}]})",
       "unknown op 'Frob'"},
      {"{" + key + R"(, "values": [{"name": "x", "dtype": "f32", "shape": [2]}, {"name": "y", "dtype": "f32", "shape": [2]}],
           "inputs": [0], "outputs": [1], "nodes": [{"op": "MatMul", "name": "n", "inputs": [0], "outputs": [1], "attrs": {}}]})",
       "'n' (MatMul)"},
  };
  for (const auto& [header, want] : cases) {
    ASSERT_TRUE(write_file(path("lie.kplan"), file_with_header(header)).ok());
    auto loaded = read_plan_file(path("lie.kplan"));
    ASSERT_FALSE(loaded.ok()) << header;
    EXPECT_NE(loaded.status().message().find(want), std::string::npos) << "want " << want << ": " << loaded.status().message();
  }
}

TEST_F(PlanFile, StaleFileIsRejectedThenRecompiledFromItsModel) {
  std::unique_ptr<Plan> plan = compile();
  PlanKey old = key(*plan);
  old.kiln_version = "0.0.1";
  ASSERT_TRUE(write_plan_file(path("old.kplan"), *plan, old).ok());
  auto loaded = read_plan_file(path("old.kplan"));
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().message(),
            path("old.kplan") + ": compiled by kiln 0.0.1, this is kiln " KILN_VERSION_STRING ": compile it again");

  std::string note;
  int compiles = 0;
  auto recompile = [&](const PlanKey& k) -> Result<std::unique_ptr<Plan>> {
    ++compiles;
    EXPECT_EQ(k.dims.at("batch"), 2);
    return compile();
  };
  auto again = load_plan_file(path("old.kplan"), recompile, [&](const std::string& line) { note = line; });
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(compiles, 1);
  EXPECT_NE(note.find("recompiling from"), std::string::npos);
  EXPECT_TRUE(read_plan_file(path("old.kplan")).ok());  // rewritten for this kiln

  // A corrupt file cannot say which model it came from: an error, no recompile.
  std::string bytes = *read_file(path("old.kplan"));
  bytes[bytes.size() / 2] ^= 1;
  ASSERT_TRUE(write_file(path("old.kplan"), bytes).ok());
  EXPECT_FALSE(load_plan_file(path("old.kplan"), recompile, [](const std::string&) {}).ok());
  EXPECT_EQ(compiles, 1);
}

// A stale file recompiles with the pass options it was compiled with: the
// whole precision policy (a node override from a policy file, not only the
// default) and the passes a fusion switch turned off; the rewritten file
// keeps them. Files from before the key kept them read as the defaults.
TEST_F(PlanFile, StaleFileRecompilesWithItsPassOptions) {
  PassOptions passes;
  passes.disabled = {"fuse_attention"};
  auto policy = parse_precision_policy({}, R"({"default": "bf16", "ops": {"Gemm": "f32"}, "nodes": {"/blocks.0": "f32"}})",
                                       "test policy");
  ASSERT_TRUE(policy.ok()) << policy.status().message();
  passes.precision = *policy;
  EXPECT_EQ(precision_policy_json(passes.precision),
            R"({"default":"bf16","ops":{"Gemm":"f32"},"nodes":{"/blocks.0":"f32"}})");

  std::unique_ptr<Plan> plan = compile();
  PlanKey old = key(*plan);
  set_key_passes(old, passes);
  EXPECT_EQ(old.precision, "bf16");
  old.kiln_version = "0.0.1";
  ASSERT_TRUE(write_plan_file(path("old.kplan"), *plan, old).ok());
  auto recompiled_with = [&](const PlanKey& k) {
    auto got = key_passes(k);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->disabled, passes.disabled);
    EXPECT_EQ(precision_policy_json(got->precision), precision_policy_json(passes.precision));
  };
  int compiles = 0;
  auto recompile = [&](const PlanKey& k) -> Result<std::unique_ptr<Plan>> {
    ++compiles;
    recompiled_with(k);
    return compile();
  };
  ASSERT_TRUE(load_plan_file(path("old.kplan"), recompile, [](const std::string&) {}).ok());
  EXPECT_EQ(compiles, 1);
  auto rewritten = read_plan_key(path("old.kplan"));
  ASSERT_TRUE(rewritten.ok());
  EXPECT_EQ(rewritten->kiln_version, KILN_VERSION_STRING);
  recompiled_with(*rewritten);

  PlanKey older = key(*plan);  // as written before: the precision's name only
  older.precision = "bf16";
  auto defaults = key_passes(older);
  ASSERT_TRUE(defaults.ok());
  EXPECT_TRUE(defaults->disabled.empty());
  EXPECT_EQ(precision_policy_json(defaults->precision), R"({"default":"bf16","ops":{},"nodes":{}})");
}

}  // namespace
}  // namespace kiln
