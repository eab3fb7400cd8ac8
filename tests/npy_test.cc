#include "npy/npy.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(Npy, RoundTripsEveryDtypeAndRank) {
  for (Shape shape : {Shape{}, Shape{3}, Shape{2, 3}, Shape{2, 1, 4}}) {
    auto t = Tensor::empty(DType::kF32, shape);
    ASSERT_TRUE(t.ok());
    for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = float(i) * 0.5f;
    std::string bytes = npy_serialize(*t);
    EXPECT_EQ(bytes.size() % 64, t->nbytes() % 64);  // header padded to 64
    auto back = npy_parse(bytes.data(), bytes.size(), "mem");
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->shape(), shape);
    for (int64_t i = 0; i < t->numel(); ++i) EXPECT_EQ(back->data<float>()[i], float(i) * 0.5f);
  }
}

TEST(Npy, RejectsTruncatedData) {
  auto t = Tensor::from_vector<int64_t>({4}, {1, 2, 3, 4});
  std::string bytes = npy_serialize(*t);
  bytes.pop_back();
  auto back = npy_parse(bytes.data(), bytes.size(), "x.npy");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("x.npy: .npy data is 31 bytes"), std::string::npos)
      << back.status().message();
}

}  // namespace
}  // namespace kiln
