#include "onnx/onnx_import.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>

#include "runtime/eager_executor.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// A model y = x + w with w's 6 floats stored in a side file at `offset`.
onnx::ModelProto external_add_model(int64_t offset, const std::string& location) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->add_dims(3);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add_kv = [&](const std::string& k, const std::string& v) {
    auto* e = w->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add_kv("location", location);
  add_kv("offset", std::to_string(offset));
  add_kv("length", "24");
  onnx::ValueInfoProto* x = g->add_input();
  x->set_name("x");
  auto* tt = x->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  tt->mutable_shape()->add_dim()->set_dim_value(3);
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  g->add_output()->set_name("y");
  return m;
}

class OnnxImport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_import_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream data(dir_ / "weights.bin", std::ios::binary);
    std::vector<float> bytes = {0, 0, 1, 2, 3, 4, 5, 6};  // 8 bytes of padding, then w
    data.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size() * 4));
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_model(const onnx::ModelProto& m) {
    std::string path = (dir_ / "model.onnx").string();
    std::ofstream out(path, std::ios::binary);
    m.SerializeToOstream(&out);
    return path;
  }

  fs::path dir_;
};

TEST_F(OnnxImport, ExternalDataIsMappedNotCopied) {
  auto g = onnx_import_file(write_model(external_add_model(8, "weights.bin")));
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Value* w = g->find_value("w");
  ASSERT_TRUE(w && w->constant);
  EXPECT_EQ(w->constant->data<float>()[0], 1.0f);
  EXPECT_EQ(w->constant->data<float>()[5], 6.0f);
  // The bytes live in the mapping (page aligned + 8), not in a fresh heap buffer.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->constant->raw()) % 4096, 8u);

  // Symbolic batch dim, then a run with batch 2.
  ASSERT_TRUE(g->inputs()[0]->shape.has_value());
  EXPECT_EQ((*g->inputs()[0]->shape)[0].symbol, "batch");
  auto x = Tensor::from_vector<float>({2, 3}, {1, 1, 1, 1, 1, 1});
  EagerExecutor exec(*g);
  auto y = exec.run({{"x", *x}});
  ASSERT_TRUE(y.ok()) << y.status().message();
  EXPECT_EQ((*y)[0].data<float>()[5], 7.0f);
}

TEST_F(OnnxImport, ExternalDataPastTheEndIsAnError) {
  auto g = onnx_import_file(write_model(external_add_model(16, "weights.bin")));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("lies past the end of 'weights.bin'"), std::string::npos)
      << g.status().message();
}

TEST_F(OnnxImport, ExternalDataOutsideTheFolderIsAnError) {
  auto g = onnx_import_file(write_model(external_add_model(0, "../weights.bin")));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("leaves the model folder"), std::string::npos) << g.status().message();
}

TEST_F(OnnxImport, UnknownOpIsUnsupportedAndNamed) {
  onnx::ModelProto m = external_add_model(8, "weights.bin");
  m.mutable_graph()->mutable_node(0)->set_op_type("FancyOp");
  auto g = onnx_import_file(write_model(m));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(g.status().message().find("unknown op 'FancyOp'"), std::string::npos) << g.status().message();
}

TEST_F(OnnxImport, RunRejectsInputsOfTheWrongShape) {
  auto g = onnx_import_file(write_model(external_add_model(8, "weights.bin")));
  ASSERT_TRUE(g.ok());
  auto x = Tensor::from_vector<float>({2, 4}, std::vector<float>(8, 1.0f));
  EagerExecutor exec(*g);
  auto y = exec.run({{"x", *x}});
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().message(), "input 'x' must have shape [batch,3], got [2,4]");
}

}  // namespace
}  // namespace kiln
