// The closed vocabulary of a small model trained on generated captions (a
// pipeline folder's vocabulary.json; kiln's default model has one): listed
// by `kiln generate --help`, and used to warn about prompt words the model
// never saw, which it would otherwise quietly ignore.
//
//   KILN_ASSIGN_OR_RETURN(auto vocabulary, load_prompt_vocabulary(dir));
//   if (vocabulary) for (auto& w : vocabulary->unknown_words(prompt)) ...
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln {

struct PromptVocabulary {
  std::string grammar;  // e.g. "COUNT [SIZE] COLOUR SHAPE[s] [POSITION] [on a COLOUR background]"
  // The grammar's parts and their phrases, in the order the grammar names them.
  std::vector<std::pair<std::string, std::vector<std::string>>> parts;
  std::vector<std::string> notes, examples;
  std::set<std::string> words;  // every word a caption can use, lower case

  // The words of `prompt` (split at anything but ASCII letters, lower-cased)
  // that are not in `words`, each once, in the order they first appear.
  std::vector<std::string> unknown_words(std::string_view prompt) const;
  // The grammar, its parts, notes and examples as indented lines for --help.
  std::string describe() const;
};

// The folder's vocabulary.json; nullopt when it has none, an error naming the
// file when it is malformed.
Result<std::optional<PromptVocabulary>> load_prompt_vocabulary(const std::string& pipeline_dir);

}  // namespace kiln
