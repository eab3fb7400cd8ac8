// .kplan files: a compiled plan on disk (the offline-compile path).
//
// The file holds the optimized, shape-specialized graph (its constants as
// 64-byte aligned raw data, memory-mapped on load rather than copied) and the
// key it was compiled for. Loading re-plans the arena and re-prepares the
// kernels, which is fast; the passes never run again.
//
//   layout:  "KILNPLAN" | u32 format version | u64 header bytes | header (JSON)
//            | constant data | u64 checksum (XXH3 64 of everything before it)
//
// A file that is truncated, corrupt, of another format version, or stale
// (another kiln version or CPU ISA) is rejected with one clear line; never a
// crash, whatever the bytes.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>

#include "runtime/plan.h"

namespace kiln {

// 2: the checksum and model hash by XXH3 (1: FNV-1a).
inline constexpr uint32_t kPlanFormatVersion = 2;

// What a plan was compiled for; a plan is reused only where all of it holds.
struct PlanKey {
  std::string kiln_version;
  std::string isa;        // oneDNN's effective ISA on the compiling machine
  std::string precision;  // "f32" or "bf16": the precision policy's default
  std::string model_path;
  std::string model_hash;  // XXH3 64 of the model file, hex
  std::string signature;   // "x:f32[2,4,32,32] ..."
  std::map<std::string, int64_t> dims;  // the symbolic dims' sizes (to recompile)
  // The rest of the pass options it was compiled with, to recompile it the
  // same way: the whole precision policy (precision_policy_json; empty in
  // files written before it was kept: the precision's default) and the
  // passes a fusion switch turned off.
  std::string precision_policy;
  std::set<std::string> disabled_passes;
  // A model folder's or checkpoint's network, and its weights variant (empty for an ONNX file).
  std::string model_component, model_variant;
};

// Records `passes` in `key` (precision, precision_policy, disabled_passes).
void set_key_passes(PlanKey& key, const PassOptions& passes);
// The pass options `key` records.
Result<PassOptions> key_passes(const PlanKey& key);

// The key for `model_path` (hashing it: a file's bytes, or a folder's
// files', each with its relative path, in name order) compiled here, now,
// for `signature`.
Result<PlanKey> plan_key_for(const std::string& model_path, const std::string& signature,
                             std::map<std::string, int64_t> dims);
std::string current_isa();

// True when the file starts like a .kplan (whatever follows).
bool looks_like_plan_file(const std::string& path);

Status write_plan_file(const std::string& path, const Plan& plan, const PlanKey& key);

struct LoadedPlan {
  std::unique_ptr<Plan> plan;
  PlanKey key;
};
// Stale files (another kiln version or ISA) are errors too: the caller may
// recompile from the model (read_plan_key says which, when the file is whole).
Result<LoadedPlan> read_plan_file(const std::string& path);
Result<PlanKey> read_plan_key(const std::string& path);

// Compiles the model a key names, for the key's dims.
using Recompile = std::function<Result<std::unique_ptr<Plan>>(const PlanKey& key)>;
// read_plan_file; when that fails but the file is whole and only stale, and
// the model it was compiled from is still there unchanged: tells `note` why,
// recompiles, rewrites the file and returns the new plan.
Result<std::unique_ptr<Plan>> load_plan_file(const std::string& path, const Recompile& recompile,
                                             const std::function<void(const std::string&)>& note);

}  // namespace kiln
