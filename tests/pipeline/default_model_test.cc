// kiln's default model (models/shapes) draws what its prompts say. For 36
// prompts that use every word of its vocabulary, plain measurements of the
// image -- the background's and the shapes' colour (nearest colour of the
// palette the training pictures use), the number of blobs (connected
// components), each blob's shape (which corners of its bounding box it fills),
// where a lone shape is (its centroid, in thirds) and its size -- must agree
// with everything the prompt says in at least 80 % of the cases.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "pipeline/pipeline.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

struct Colour {
  const char* name;
  std::array<int, 3> rgb;
};
// tools/train_default_model.py's COLOURS.
constexpr Colour kPalette[] = {{"red", {220, 40, 40}},    {"green", {40, 170, 60}},    {"blue", {40, 80, 220}},
                               {"yellow", {240, 210, 40}}, {"white", {245, 245, 245}}, {"black", {20, 20, 20}}};
constexpr const char* kShapes[] = {"circle", "square", "triangle"};
constexpr const char* kPositions[] = {"at the top left", "at the top right", "at the bottom left",
                                      "at the bottom right", "in the center", "at the top",
                                      "at the bottom", "on the left", "on the right"};
// Where each position puts a lone shape's centre: column and row, 0 1 2.
constexpr std::array<int, 2> kPositionCells[] = {{0, 0}, {2, 0}, {0, 2}, {2, 2}, {1, 1}, {1, 0}, {1, 2}, {0, 1}, {2, 1}};

// What a prompt asks for; empty strings and -1 for what it leaves out.
struct Caption {
  int count = 1;
  std::string count_word, size, colour, shape, background;
  int position = -1;

  std::string prompt() const {
    std::string p = count_word + " ";
    if (!size.empty()) p += size + " ";
    p += colour + " " + shape + (count > 1 ? "s" : "");
    if (position >= 0) p += std::string(" ") + kPositions[position];
    if (!background.empty()) p += " on a " + background + " background";
    return p;
  }
};

// 36 captions through the grammar, each word several times: colours cycle
// every case, shapes every two, counts every three; a lone shape gets a
// position or a size now and then, three cases in four name the background.
std::vector<Caption> captions() {
  const char* count_words[] = {"a", "two", "three", "one"};
  const int counts[] = {1, 2, 3, 1};
  const char* sizes[] = {"", "small", "large"};
  std::vector<Caption> out;
  for (int i = 0; i < 36; ++i) {
    Caption c;
    c.count_word = count_words[(i / 3) % 4];
    c.count = counts[(i / 3) % 4];
    c.colour = kPalette[i % 6].name;
    c.shape = kShapes[(i / 2) % 3];
    if (i % 4 != 3) c.background = kPalette[(i % 6 + 1 + (i / 6) % 5) % 6].name;
    if (c.count == 1) {
      if (i % 2 == 0) c.position = (i / 2) % 9;
      c.size = sizes[(i / 5) % 3];
    }
    out.push_back(c);
  }
  return out;
}

struct Blob {
  int area = 0, x0 = 1 << 30, y0 = 1 << 30, x1 = -1, y1 = -1;
  double cx = 0, cy = 0;
  // How much of the bounding box's corner cells (a quarter of its width and
  // height each) the blob fills: the two top ones, the two bottom ones.
  double top_corners = 0, bottom_corners = 0;
};

struct Measured {
  std::string background, colour;
  std::vector<Blob> blobs;  // of the shapes' colour, fragments left out
};

// Each pixel's nearest palette colour; -1 when none is near (edges where
// two colours blend).
std::vector<int> classify(const uint8_t* rgb, int n) {
  std::vector<int> cls(size_t(n), -1);
  for (int i = 0; i < n; ++i) {
    int best = 90 * 90;
    for (int c = 0; c < 6; ++c) {
      int d = 0;
      for (int k = 0; k < 3; ++k) d += (rgb[3 * i + k] - kPalette[c].rgb[k]) * (rgb[3 * i + k] - kPalette[c].rgb[k]);
      if (d < best) best = d, cls[size_t(i)] = c;
    }
  }
  return cls;
}

int most_common(const std::vector<int>& classes, int exclude) {
  std::array<int, 6> votes{};
  for (int c : classes)
    if (c >= 0 && c != exclude) ++votes[size_t(c)];
  const auto best = std::max_element(votes.begin(), votes.end());
  return *best >= 20 ? int(best - votes.begin()) : -1;
}

Measured measure(const uint8_t* rgb, int w, int h) {
  const std::vector<int> cls = classify(rgb, w * h);
  std::vector<int> border;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      if (x < 2 || y < 2 || x >= w - 2 || y >= h - 2) border.push_back(cls[size_t(y * w + x)]);
  Measured m;
  const int background = most_common(border, -1);
  const int colour = most_common(cls, background);
  m.background = background >= 0 ? kPalette[background].name : "none";
  m.colour = colour >= 0 ? kPalette[colour].name : "none";
  if (colour < 0) return m;
  // 4-connected components of the shapes' colour.
  std::vector<int> label(cls.size(), -1);
  std::vector<Blob> blobs;
  for (int start = 0; start < w * h; ++start) {
    if (cls[size_t(start)] != colour || label[size_t(start)] >= 0) continue;
    Blob b;
    std::vector<int> stack = {start};
    label[size_t(start)] = int(blobs.size());
    while (!stack.empty()) {
      const int p = stack.back(), x = p % w, y = p / w;
      stack.pop_back();
      ++b.area, b.cx += x + 0.5, b.cy += y + 0.5;
      b.x0 = std::min(b.x0, x), b.x1 = std::max(b.x1, x), b.y0 = std::min(b.y0, y), b.y1 = std::max(b.y1, y);
      const int next[4][2] = {{x - 1, y}, {x + 1, y}, {x, y - 1}, {x, y + 1}};
      for (const auto& [nx, ny] : next) {
        const int q = ny * w + nx;
        if (nx < 0 || ny < 0 || nx >= w || ny >= h || cls[size_t(q)] != colour || label[size_t(q)] >= 0) continue;
        label[size_t(q)] = int(blobs.size());
        stack.push_back(q);
      }
    }
    b.cx /= b.area, b.cy /= b.area;
    const int id = int(blobs.size()), cw = std::max(1, (b.x1 - b.x0 + 1) / 4), ch = std::max(1, (b.y1 - b.y0 + 1) / 4);
    auto filled = [&](int x0, int y0) {
      int n = 0;
      for (int y = y0; y < y0 + ch; ++y)
        for (int x = x0; x < x0 + cw; ++x) n += label[size_t(y * w + x)] == id;
      return double(n) / (cw * ch);
    };
    b.top_corners = (filled(b.x0, b.y0) + filled(b.x1 + 1 - cw, b.y0)) / 2;
    b.bottom_corners = (filled(b.x0, b.y1 + 1 - ch) + filled(b.x1 + 1 - cw, b.y1 + 1 - ch)) / 2;
    blobs.push_back(b);
  }
  int largest = 0;
  for (const Blob& b : blobs) largest = std::max(largest, b.area);
  for (const Blob& b : blobs)
    if (b.area >= std::max(12, largest / 4)) m.blobs.push_back(b);
  return m;
}

// The shape whose corner cells the blob's are nearest: a square fills all
// four; a disc 0.315 of each; an upright triangle none at the top and
// three quarters at the bottom (ideal shapes; the training pictures' shapes
// have the same area, so size does not enter). Plain, and robust to what the model draws imperfectly: a
// square with wavy sides still fills its corners.
std::string shape_of(const Blob& b) {
  struct Prototype {
    const char* shape;
    double top, bottom;
  };
  constexpr Prototype kPrototypes[] = {{"square", 1.0, 1.0}, {"circle", 0.315, 0.315}, {"triangle", 0.0, 0.75}};
  const Prototype* best = nullptr;
  double best_d = 1e9;
  for (const Prototype& p : kPrototypes) {
    const double d = std::hypot(b.top_corners - p.top, b.bottom_corners - p.bottom);
    if (d < best_d) best_d = d, best = &p;
  }
  return best->shape;
}

// Radii as fractions of the side: small 0.11, unnamed 0.17, large 0.26.
std::string size_of(const Blob& b, int side) {
  const double r = std::sqrt(b.area / M_PI) / side;
  return r < 0.14 ? "small" : r > 0.215 ? "large" : "";
}

int third(double v, int side) { return v < 0.4 * side ? 0 : v > 0.6 * side ? 2 : 1; }

TEST(DefaultModelPrompts, ImagesFollowTheirPrompts) {
  const fs::path model = fs::path(KILN_SOURCE_DIR) / "models" / "shapes";
  auto pipe = Pipeline::load(model.string(), {.mode = ExecutionMode::kGraph, .whole_loop = true});
  ASSERT_TRUE(pipe.ok()) << pipe.status().message();
  const std::vector<Caption> cases = captions();
  std::map<std::string, std::array<int, 2>> attribute;  // name -> {agreed, asked}
  int agreed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Caption& c = cases[i];
    auto g = (*pipe)->generate({.prompt = c.prompt(), .seed = 1000 + i});
    ASSERT_TRUE(g.ok()) << g.status().message();
    const Measured m = measure(g->pixels.data(), g->width, g->height);
    std::vector<std::string> wrong;
    auto check = [&](const std::string& name, bool ok) {
      ++attribute[name][1];
      if (ok) ++attribute[name][0];
      else wrong.push_back(name);
    };
    check("colour", m.colour == c.colour);
    if (!c.background.empty()) check("background", m.background == c.background);
    check("count", int(m.blobs.size()) == c.count);
    int shapes_right = 0;
    for (const Blob& b : m.blobs) shapes_right += shape_of(b) == c.shape;
    check("shape", !m.blobs.empty() && shapes_right * 2 > int(m.blobs.size()));
    if (c.position >= 0)
      check("position", m.blobs.size() == 1 &&
                            std::array<int, 2>{third(m.blobs[0].cx, g->width), third(m.blobs[0].cy, g->height)} ==
                                kPositionCells[c.position]);
    if (c.count == 1 && !c.size.empty()) check("size", m.blobs.size() == 1 && size_of(m.blobs[0], g->width) == c.size);
    agreed += wrong.empty();
    std::string blobs;
    for (const Blob& b : m.blobs)
      blobs += fmt::format(" {}@({:.0f},{:.0f})r{:.2f}c{:.2f}/{:.2f}", shape_of(b), b.cx, b.cy,
                           std::sqrt(b.area / M_PI) / g->width, b.top_corners, b.bottom_corners);
    std::printf("  %-55s %s: %s on %s,%s\n", c.prompt().c_str(), wrong.empty() ? "ok" : "WRONG", m.colour.c_str(),
                m.background.c_str(), blobs.c_str());
    if (!wrong.empty()) std::printf("  %-55s   wrong: %s\n", "", fmt::format("{}", fmt::join(wrong, ", ")).c_str());
  }
  for (const auto& [name, n] : attribute) std::printf("  %-10s %d/%d agree\n", name.c_str(), n[0], n[1]);
  std::printf("  prompts followed in full: %d/%zu\n", agreed, cases.size());
  EXPECT_GE(agreed * 5, int(cases.size()) * 4) << "fewer than 80 % of the prompts were followed";
}

}  // namespace
}  // namespace kiln::testing
