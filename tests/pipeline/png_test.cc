// PNG output and input: a round trip keeps every byte; text chunks are in
// the file; a truncated or foreign file and an image over the size limit
// are refused with the file named.
#include "pipeline/png.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Png, RoundTripsPixelsAndKeepsTextChunks) {
  const fs::path path = fs::temp_directory_path() / "kiln_png_test.png";
  std::vector<uint8_t> rgb(13 * 7 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t(i * 37 + 11);
  ASSERT_TRUE(write_png(path.string(), rgb.data(), 13, 7, {{"prompt", "a cat \xe2\x9c\x93"}, {"seed", "1"}}).ok());
  auto image = read_png(path.string(), 64);
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_EQ(image->width, 13);
  EXPECT_EQ(image->height, 7);
  EXPECT_EQ(image->rgb, rgb);
  const std::string bytes = read_bytes(path);
  EXPECT_NE(bytes.find("a cat \xe2\x9c\x93"), std::string::npos);

  auto small = read_png(path.string(), 8);  // 13 pixels wide
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("13x7"), std::string::npos) << small.status().message();

  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  auto cut = read_png(path.string(), 64);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find(path.string()), std::string::npos) << cut.status().message();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "not a png at all";
  EXPECT_FALSE(read_png(path.string(), 64).ok());
  fs::remove(path);
  EXPECT_EQ(read_png(path.string(), 64).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln
