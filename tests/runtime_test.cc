#include <gtest/gtest.h>

#include <algorithm>

#include "core/huge_pages.h"
#include "runtime/caching_allocator.h"
#include "runtime/eager_executor.h"

namespace kiln {
namespace {

// Small tensors come from malloc, large ones (1 MiB up) from a mapping of
// their own: both zero-filled, 64-byte aligned and writable to the end.
TEST(Tensor, EmptyIsZeroedAndAlignedAtEverySize) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000), int64_t(1) << 18, (int64_t(3) << 18) + 1}) {
    auto t = Tensor::empty(DType::kF32, {n});
    ASSERT_TRUE(t.ok()) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw()) % 64, 0u) << n;
    const float* x = t->data<float>();
    EXPECT_EQ(std::count(x, x + n, 0.0f), n) << n;
    std::fill_n(t->data<float>(), n, 1.5f);
    Tensor copy = *t;  // shares the storage, which outlives t
    t = Status(invalid_argument("dropped"));
    EXPECT_EQ(std::count(copy.data<float>(), copy.data<float>() + n, 1.5f), n) << n;
  }
}

// 64-byte aligned below 4 MB, 2 MB aligned from there (huge pages), every
// byte writable, and each freed by std::free (the sanitizer build checks).
TEST(HugePages, AllocateHugeIsAlignedAndWritable) {
  for (size_t bytes : {size_t(0), size_t(1), size_t(100), (size_t(4) << 20) - 1, size_t(4) << 20,
                       (size_t(9) << 20) + 3}) {
    auto* p = static_cast<unsigned char*>(allocate_huge(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (bytes >= (size_t(4) << 20) ? size_t(2) << 20 : 64), 0u) << bytes;
    std::fill_n(p, bytes, 7);
    EXPECT_EQ(size_t(std::count(p, p + bytes, 7)), bytes) << bytes;
    std::free(p);
  }
}

TEST(CachingAllocator, ReusesFreedBlocks) {
  auto alloc = CachingAllocator::create();
  void* first = nullptr;
  {
    auto t = alloc->allocate(DType::kF32, {256});
    ASSERT_TRUE(t.ok());
    first = t->raw();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
  }
  auto again = alloc->allocate(DType::kF32, {250});  // same 1024-byte block size class
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->raw(), first);
  EXPECT_EQ(alloc->stats().system_allocations, 1u);
  EXPECT_EQ(alloc->stats().allocations, 2u);
}

TEST(CachingAllocator, RefusesSizesPastPhysicalMemory) {
  auto alloc = CachingAllocator::create();
  auto t = alloc->allocate(DType::kF32, {int64_t(1) << 38});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted);
}

// A chain x -> Neg -> Neg -> ... : eager frees each intermediate after its
// last use, so the peak stays at two live tensors however long the chain.
TEST(EagerExecutor, FreesIntermediatesAfterLastUse) {
  Graph g;
  Value* v = g.add_input("x", DType::kF32, SymShape{Dim(1024)});
  for (int i = 0; i < 10; ++i) {
    Value* out = g.add_value("v" + std::to_string(i));
    g.add_node(OpKind::kNeg, "neg" + std::to_string(i), {v}, {out});
    v = out;
  }
  g.mark_output(v);
  auto x = Tensor::from_vector<float>({1024}, std::vector<float>(1024, 2.0f));
  EagerExecutor exec(g);
  auto y = exec.run({{"x", *x}});
  ASSERT_TRUE(y.ok()) << y.status().message();
  EXPECT_EQ((*y)[0].data<float>()[0], 2.0f);  // ten negations
  EXPECT_LE(exec.allocator_stats().peak_live_bytes, 2 * 4096u);
  auto again = exec.run({{"x", *x}});
  ASSERT_TRUE(again.ok());
  EXPECT_LE(exec.allocator_stats().system_allocations, 3u);  // second run reuses the cache
}

TEST(EagerExecutor, ReferenceAndCpuKernelsAgreeOnAGraph) {
  Graph g;
  Value* x = g.add_input("x", DType::kF32, SymShape{Dim(4), Dim(8)});
  Value* w = g.add_constant("w", *Tensor::from_vector<float>({8, 3}, std::vector<float>(24, 0.25f)));
  Value* mm = g.add_value("mm");
  Value* y = g.add_value("y");
  g.add_node(OpKind::kMatMul, "mm", {x, w}, {mm});
  g.add_node(OpKind::kTanh, "act", {mm}, {y});
  g.mark_output(y);
  std::vector<float> xs(32);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float(i) / 32.0f - 0.5f;
  auto xt = Tensor::from_vector<float>({4, 8}, xs);
  EagerExecutor cpu(g), ref(g, KernelSet::kReference);
  auto a = cpu.run({{"x", *xt}});
  auto b = ref.run({{"x", *xt}});
  ASSERT_TRUE(a.ok() && b.ok());
  for (int64_t i = 0; i < 12; ++i) EXPECT_NEAR((*a)[0].data<float>()[i], (*b)[0].data<float>()[i], 1e-6);
}

}  // namespace
}  // namespace kiln
