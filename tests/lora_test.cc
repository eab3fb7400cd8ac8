// LoRA files merged into checkpoints' weights (models/lora.h), against
// PyTorch's networks with the same merge (tools/make_tiny_checkpoints.py):
// kohya's layout with diffusers' and with LDM's module names on the single
// file, diffusers/PEFT's on the diffusers folder; weight 0 leaves every byte
// as it was; what does not fit is refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "models/lora.h"
#include "models/sd_model.h"
#include "npy/npy.h"
#include "pipeline/pipeline.h"
#include "reference_close.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kCheckpoints = fs::path(KILN_SOURCE_DIR) / "tests" / "models" / "sd-checkpoints";

std::shared_ptr<SdModel> open_with(const char* model, const char* lora, float weight, LoraReport* report) {
  auto m = sd_model_open((kCheckpoints / model).string(), {});
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok()) return nullptr;
  auto r = apply_lora({.path = (kCheckpoints / lora).string(), .weight = weight}, sd_lora_targets(**m));
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return nullptr;
  *report = *r;
  return *m;
}

// `graph` on reference/lora/<network>'s inputs, eagerly and as a plan.
void expect_merged_network(const std::string& what, const std::string& network, Result<Graph> graph) {
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  const fs::path dir = kCheckpoints / "reference" / "lora" / network;
  NamedTensors inputs;
  for (const Value* v : graph->inputs()) inputs.emplace_back(v->name, *npy_read((dir / "inputs" / (v->name + ".npy")).string()));
  auto expected = npy_read((dir / "outputs" / (graph->outputs()[0]->name + ".npy")).string());
  ASSERT_TRUE(expected.ok()) << expected.status().message();
  testing::expect_both_ways_close(what + " " + network, std::move(*graph), inputs, *expected);
}

struct LoraCase {
  const char* name;
  const char* model;
  const char* lora;
  size_t unmatched;
};
const LoraCase kCases[] = {
    {"kohya_on_single_file", "sd1.safetensors", "lora-sd1-kohya.safetensors", 0},
    {"kohya_ldm_names_on_single_file", "sd1.safetensors", "lora-sd1-kohya-ldm.safetensors", 0},
    {"kohya_ldm_names_on_diffusers_folder", "sd1-diffusers-sharded", "lora-sd1-kohya-ldm.safetensors", 0},
    {"peft_on_diffusers_folder", "sd1-diffusers-sharded", "lora-sd1-peft.safetensors", 1},  // its F32 files
};

class Lora : public ::testing::TestWithParam<LoraCase> {};

TEST_P(Lora, MergedNetworksMatchPyTorch) {
  const LoraCase& c = GetParam();
  LoraReport report;
  auto m = open_with(c.model, c.lora, 0.7f, &report);
  ASSERT_TRUE(m);
  EXPECT_EQ(report.merged, 7);
  EXPECT_EQ(report.unmatched.size(), c.unmatched);
  expect_merged_network(c.name, "unet", sd_unet_graph(m->unet_config, m->unet));
  expect_merged_network(c.name, "text_encoder", clip_text_graph(m->text_config, m->text_encoder));
}

INSTANTIATE_TEST_SUITE_P(Layouts, Lora, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// kohya's SDXL layout on SDXL's single file (F16: each merged weight
// rounded to f16, as PyTorch's reference merges): the UNet's modules by
// LDM's names, lora_te1_ and lora_te2_ (one a row block of OpenCLIP's packed
// Q, K, V).
TEST(LoraSdxl, KohyaLdmNamesAndBothTextEncodersMatchPyTorch) {
  auto m = sd_model_open((kCheckpoints / "sdxl.safetensors").string(), {});
  ASSERT_TRUE(m.ok()) << m.status().message();
  SdModel& s = **m;
  auto r = apply_lora({.path = (kCheckpoints / "lora-sdxl-kohya.safetensors").string(), .weight = 0.7f},
                      sd_lora_targets(s));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->merged, 7);
  EXPECT_TRUE(r->unmatched.empty());
  const fs::path dir = kCheckpoints / "reference" / "lora-sdxl";
  for (const std::string network : {"unet", "text_encoder", "text_encoder_2"}) {
    Result<Graph> graph = network == "unet"           ? sd_unet_graph(s.unet_config, s.unet)
                          : network == "text_encoder" ? clip_text_graph(s.text_config, s.text_encoder)
                                                      : clip_text_graph(s.text_config_2, s.text_encoder_2);
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    NamedTensors inputs;
    for (const Value* v : graph->inputs())
      inputs.emplace_back(v->name, *npy_read((dir / network / "inputs" / (v->name + ".npy")).string()));
    auto expected = npy_read((dir / network / "outputs" / (graph->outputs()[0]->name + ".npy")).string());
    ASSERT_TRUE(expected.ok()) << expected.status().message();
    testing::expect_both_ways_close("sdxl lora " + network, std::move(*graph), inputs, *expected);
  }
}

// ldm_name_from_unet inverts the LDM names: every UNet weight of the SD 1.x
// and SDXL single files (written by tools/ with its own table) gets back the
// key the file gave it.
TEST(LoraNames, LdmNamesOfEveryUnetWeight) {
  for (const char* file : {"sd1.safetensors", "sdxl.safetensors"}) {
    auto m = sd_model_open((kCheckpoints / file).string(), {});
    ASSERT_TRUE(m.ok()) << m.status().message();
    std::vector<LoraTarget> targets = sd_lora_targets(**m);
    int checked = 0;
    for (const std::string& name : (*m)->unet.names()) {
      const std::string origin = (*m)->unet.origin(name);
      const std::string key = origin.substr(origin.rfind("model.diffusion_model.") + 22);
      EXPECT_EQ(targets[0].also_named(name).value_or("(none)"), key) << file << ": " << name;
      ++checked;
    }
    EXPECT_GT(checked, 100) << file;
  }
}

// Weight 0: every weight the file's own tensor (no copy, no rounding), and
// the image the base model's, byte for byte.
TEST(LoraWeights, WeightZeroIsTheBaseModel) {
  LoraReport report;
  auto merged = open_with("sd1.safetensors", "lora-sd1-kohya.safetensors", 0.0f, &report);
  auto base = sd_model_open((kCheckpoints / "sd1.safetensors").string(), {});
  ASSERT_TRUE(merged && base.ok());
  EXPECT_EQ(report.merged, 7);
  for (const std::string& name : (*base)->unet.names()) {
    const Tensor *a = merged->unet.find(name), *b = (*base)->unet.find(name);
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->nbytes(), b->nbytes());
    EXPECT_EQ(std::memcmp(a->raw(), b->raw(), a->nbytes()), 0) << name;
    EXPECT_EQ(merged->unet.origin(name).find("LoRA"), std::string::npos) << name;  // still the file's own tensor
  }
  auto generate = [](std::vector<LoraSpec> loras) {
    auto pipe = Pipeline::load((kCheckpoints / "sd1.safetensors").string(), {.loras = std::move(loras)});
    EXPECT_TRUE(pipe.ok()) << pipe.status().message();
    auto g = (*pipe)->generate({.prompt = "a red circle", .steps = 3, .seed = 2, .width = 32, .height = 32});
    EXPECT_TRUE(g.ok()) << g.status().message();
    return g->pixels;
  };
  const std::string lora = (kCheckpoints / "lora-sd1-kohya.safetensors").string();
  const std::vector<uint8_t> plain = generate({});
  EXPECT_EQ(generate({{lora, 0.0f}}), plain);
  EXPECT_NE(generate({{lora, 1.0f}}), plain);
}

TEST(LoraWeights, SpecsParse) {
  auto a = parse_lora_spec("style.safetensors:0.6");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->path, "style.safetensors");
  EXPECT_FLOAT_EQ(a->weight, 0.6f);
  auto b = parse_lora_spec("dir:with:colons/style.safetensors");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->path, "dir:with:colons/style.safetensors");
  EXPECT_FLOAT_EQ(b->weight, 1.0f);
  EXPECT_EQ(parse_lora_spec("x.safetensors:-1.5")->weight, -1.5f);
  EXPECT_FALSE(parse_lora_spec(":0.5").ok());
}

// A LoRA for another model: sd1's modules are not SDXL's weights (its text
// encoder's names are, in other shapes).
TEST(LoraWeights, AnotherModelsLoraIsRefused) {
  auto m = sd_model_open((kCheckpoints / "sdxl.safetensors").string(), {});
  ASSERT_TRUE(m.ok()) << m.status().message();
  auto r = apply_lora({.path = (kCheckpoints / "lora-sd1-kohya.safetensors").string()}, sd_lora_targets(**m));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("a LoRA for another model?"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace kiln
