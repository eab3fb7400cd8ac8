// Size-capped reading of the small JSON and text files in model folders
// (tokenizer tables, configs, shard indexes): a hostile file is refused
// before it can cost more memory than a real one would.
//
//   KILN_ASSIGN_OR_RETURN(nlohmann::json config, read_json_file(dir + "/unet/config.json", 1 << 20, true));
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

#include "core/mapped_file.h"

namespace kiln {

// The file mapped; ResourceExhausted naming it when it has more than max_bytes.
Result<std::shared_ptr<const MappedFile>> open_capped(const std::string& path, size_t max_bytes);

// A JSON object; errors name the file. With `optional`, a missing file reads
// as an empty object.
Result<nlohmann::json> read_json_file(const std::string& path, size_t max_bytes, bool optional);

// The value of an integer in [0, max]; nullopt for anything else.
std::optional<int64_t> json_int_in_range(const nlohmann::json& v, int64_t max);

}  // namespace kiln
