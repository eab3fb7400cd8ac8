#include "safetensors/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kiln {
namespace {

std::string make_file(const std::string& header, const std::string& body) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + body;
}

Result<NamedTensorList> parse(const std::string& bytes) {
  return safetensors_parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), nullptr, "t.safetensors");
}

TEST(Safetensors, ReadsTensorsInPlace) {
  float values[3] = {1.5f, -2.0f, 3.25f};
  std::string body(reinterpret_cast<const char*>(values), sizeof(values));
  std::string bytes = make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"__metadata__":{"a":"b"}})", body);
  auto t = parse(bytes);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->size(), 1u);
  EXPECT_EQ((*t)[0].first, "w");
  EXPECT_EQ((*t)[0].second.shape(), Shape{3});
  EXPECT_EQ((*t)[0].second.data<float>()[2], 3.25f);
}

TEST(Safetensors, RejectsBadHeaders) {
  struct Case {
    std::string header, body, message;
  };
  std::vector<Case> cases = {
      {"not json", "", "header is not a JSON object"},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", std::string(12, '\0'), "12 bytes of data, shape [4] needs 16"},
      {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,120]}})", std::string(12, '\0'), "lie outside the data section"},
      {R"({"w":{"dtype":"C64","shape":[3],"data_offsets":[0,12]}})", std::string(12, '\0'), "dtype 'C64' is not supported"},
      {R"({"w":{"dtype":"F32","shape":[-3],"data_offsets":[0,12]}})", std::string(12, '\0'), "non-negative integers"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", std::string(12, '\0'), "overlap"},
  };
  for (const Case& c : cases) {
    auto t = parse(make_file(c.header, c.body));
    ASSERT_FALSE(t.ok()) << c.header;
    EXPECT_NE(t.status().message().find(c.message), std::string::npos) << t.status().message();
  }
  std::string huge(8, '\xff');
  EXPECT_FALSE(parse(huge).ok());
}

}  // namespace
}  // namespace kiln
