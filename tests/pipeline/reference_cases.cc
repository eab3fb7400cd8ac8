#include "reference_cases.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "npy/npy.h"

namespace kiln::testing {

namespace fs = std::filesystem;

std::unique_ptr<Pipeline> load_pipeline(const ModeCase& m, const fs::path& model, PipelineOptions options) {
  options.mode = m.mode;
  options.whole_loop = m.whole_loop;
  auto pipe = Pipeline::load(model.string(), options);
  EXPECT_TRUE(pipe.ok()) << pipe.status().message();
  return pipe.ok() ? std::move(pipe).value() : nullptr;
}

GenerateOptions case_options(const fs::path& folder, std::optional<RgbImage>& init) {
  std::ifstream in(folder / "case.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  GenerateOptions o{.prompt = c["prompt"], .negative_prompt = c["negative_prompt"], .steps = c["steps"],
                    .guidance_scale = c["guidance_scale"], .seed = c["seed"], .width = c["width"],
                    .height = c["height"], .scheduler = c["scheduler"], .keep_trajectory = true};
  if (c.contains("init_image")) {
    auto image = read_png((folder / c["init_image"].get<std::string>()).string(), 4096);
    EXPECT_TRUE(image.ok()) << image.status().message();
    if (image.ok()) init = std::move(*image);
    o.init_image = init ? &*init : nullptr;
    o.strength = c["strength"];
  }
  if (c.contains("vae_tiling")) o.vae_tiling = c["vae_tiling"].get<bool>();
  if (c.contains("timestep_spacing")) {
    auto spacing = parse_timestep_spacing(c["timestep_spacing"].get<std::string>());
    EXPECT_TRUE(spacing.ok()) << spacing.status().message();
    if (spacing.ok()) o.timestep_spacing = *spacing;
  }
  return o;
}

void expect_matches_reference(const fs::path& model, const fs::path& reference, size_t min_cases, const ModeCase& m,
                              const PipelineOptions& options) {
  auto pipe = load_pipeline(m, model, options);
  ASSERT_TRUE(pipe);
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(reference)) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  ASSERT_GE(cases.size(), min_cases);
  for (const fs::path& folder : cases) {
    SCOPED_TRACE(folder.filename().string());
    std::optional<RgbImage> init;
    const GenerateOptions o = case_options(folder, init);
    auto g = pipe->generate(o);
    ASSERT_TRUE(g.ok()) << g.status().message();
    auto trajectory = npy_read((folder / "trajectory.npy").string());
    auto pixels = npy_read((folder / "pixels.npy").string());
    ASSERT_TRUE(trajectory.ok() && pixels.ok());
    const int steps = int(g->trajectory.size());  // fewer for image to image
    EXPECT_EQ(g->steps_run, steps);
    const int64_t n = g->latents.numel();
    ASSERT_EQ(trajectory->numel(), n * steps);
    double worst = 0;
    for (int s = 0; s < steps; ++s)
      for (int64_t j = 0; j < n; ++j)
        worst = std::max(worst, double(std::abs(g->trajectory[size_t(s)].data<float>()[j] -
                                                trajectory->data<float>()[s * n + j])));
    EXPECT_LE(worst, 1e-3) << "max abs latent error over the trajectory";
    ASSERT_EQ(pixels->numel(), int64_t(g->pixels.size()));
    int worst_pixel = 0;
    for (size_t j = 0; j < g->pixels.size(); ++j)
      worst_pixel = std::max(worst_pixel, std::abs(int(g->pixels[j]) - int(pixels->data<uint8_t>()[j])));
    EXPECT_LE(worst_pixel, 1) << "max abs pixel difference";
    std::printf("  %s: max abs latent error %.2e, max pixel difference %d\n", folder.filename().c_str(), worst,
                worst_pixel);
  }
}

}  // namespace kiln::testing
