// The weights of one network (a UNet, a VAE, a text encoder) under their
// canonical names: diffusers' for UNets and VAEs, Hugging Face transformers'
// for text encoders, whatever layout the file used (models/ldm_names.h maps
// the original LDM and OpenCLIP layouts). Each tensor is a view into its
// memory-mapped file, never a copy.
//
//   WeightSet w("unet");
//   w.add("conv_in.weight", tensor, "sd.safetensors: model.diffusion_model.input_blocks.0.0.weight");
//   if (const Tensor* t = w.find("conv_in.weight")) ...   // marks it used
//   for (const std::string& name : w.unused()) ...        // what no builder read
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace kiln {

class WeightSet {
 public:
  explicit WeightSet(std::string label = "") : label_(std::move(label)) {}

  // An error when `name` is already present (two file keys mapped to one name).
  Status add(std::string name, Tensor tensor, std::string origin);
  // Puts `tensor` in the place of `name`'s (a LoRA-merged copy, of the same
  // shape), `note` added to its origin; an error when it is absent.
  Status replace(std::string_view name, Tensor tensor, std::string_view note);
  // The names of every tensor, sorted; nothing is marked.
  std::vector<std::string> names() const { return names_with_prefix(""); }

  // The tensor named `name`, marked used; null when absent.
  const Tensor* find(std::string_view name) const;
  bool contains(std::string_view name) const { return entries_.count(std::string(name)) > 0; }
  // Where `name` came from ("file: key"), for error messages.
  std::string origin(std::string_view name) const;
  // Names under `prefix` ("down_blocks." ...), sorted; nothing is marked.
  std::vector<std::string> names_with_prefix(std::string_view prefix) const;
  // How many numbered children `prefix` has: 1 + the largest N of names
  // "<prefix>N.*" ("down_blocks." -> 4 for down_blocks.0 to down_blocks.3).
  int64_t indexed_count(std::string_view prefix) const;
  // The shape of `name`, or nullopt; nothing is marked.
  std::optional<Shape> shape_of(std::string_view name) const;
  // The shape of `name`, checked to have `rank` dims each in [1, kMaxWidth]
  // (sizes read from a file become loop bounds and buffer sizes: a hostile
  // one must not get that far); an error naming it otherwise, or when it is
  // missing. Nothing is marked.
  Result<Shape> checked_shape(std::string_view name, size_t rank) const;
  static constexpr int64_t kMaxWidth = int64_t(1) << 20;  // UMT5-XXL has 256,384 embeddings

  // Names no find() has asked for, sorted.
  std::vector<std::string> unused() const;
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  int64_t parameter_count() const;
  // Tensors of each dtype.
  std::map<DType, int64_t> dtype_counts() const;
  const std::string& label() const { return label_; }

 private:
  struct Entry {
    Tensor tensor;
    std::string origin;
  };
  std::string label_;
  std::map<std::string, Entry, std::less<>> entries_;
  mutable std::set<std::string, std::less<>> used_;
};

}  // namespace kiln
