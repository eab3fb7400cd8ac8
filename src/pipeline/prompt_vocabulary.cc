#include "pipeline/prompt_vocabulary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/json_file.h"

namespace kiln {

namespace {

constexpr size_t kMaxVocabularyBytes = 1 << 20;

// The runs of ASCII letters in `text`, lower-cased unless told not to.
std::vector<std::string> split_words(std::string_view text, bool lower = true) {
  std::vector<std::string> words(1);
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalpha(u))
      words.back() += lower ? char(std::tolower(u)) : c;
    else if (!words.back().empty())
      words.emplace_back();
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

Result<std::vector<std::string>> string_list(const nlohmann::json& v, const std::string& path, const char* key) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (!v.is_array()) return invalid_argument("{}: \"{}\" must be a list of strings", path, key);
  for (const auto& s : v) {
    if (!s.is_string()) return invalid_argument("{}: \"{}\" must be a list of strings", path, key);
    out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace

std::vector<std::string> PromptVocabulary::unknown_words(std::string_view prompt) const {
  std::vector<std::string> unknown;
  for (std::string& w : split_words(prompt))
    if (!words.contains(w) && std::find(unknown.begin(), unknown.end(), w) == unknown.end())
      unknown.push_back(std::move(w));
  return unknown;
}

std::string PromptVocabulary::describe() const {
  std::string s = fmt::format("  {}\n", grammar);
  for (const auto& [name, phrases] : parts) s += fmt::format("    {:<9} {}\n", name, fmt::join(phrases, " | "));
  for (const std::string& note : notes) s += fmt::format("  ({})\n", note);
  if (!examples.empty()) s += fmt::format("  e.g. \"{}\"\n", fmt::join(examples, "\", \""));
  return s;
}

Result<std::optional<PromptVocabulary>> load_prompt_vocabulary(const std::string& pipeline_dir) {
  const std::string path = (std::filesystem::path(pipeline_dir) / "vocabulary.json").string();
  if (!std::filesystem::exists(path)) return std::optional<PromptVocabulary>();
  KILN_ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(path, kMaxVocabularyBytes, false));
  PromptVocabulary v;
  if (!json.value("grammar", nlohmann::json()).is_string())
    return invalid_argument("{}: \"grammar\" must be a string", path);
  v.grammar = json["grammar"].get<std::string>();
  KILN_ASSIGN_OR_RETURN(auto words, string_list(json.value("words", nlohmann::json()), path, "words"));
  if (words.empty()) return invalid_argument("{}: \"words\" must list the words captions use", path);
  for (const std::string& entry : words)
    for (std::string& w : split_words(entry)) v.words.insert(std::move(w));
  KILN_ASSIGN_OR_RETURN(v.notes, string_list(json.value("notes", nlohmann::json()), path, "notes"));
  KILN_ASSIGN_OR_RETURN(v.examples, string_list(json.value("examples", nlohmann::json()), path, "examples"));
  const nlohmann::json parts = json.value("parts", nlohmann::json::object());
  if (!parts.is_object()) return invalid_argument("{}: \"parts\" must map names to lists of phrases", path);
  // In the grammar's order: the words of the grammar that name a part.
  for (const std::string& name : split_words(v.grammar, /*lower=*/false)) {
    if (!parts.contains(name)) continue;
    if (std::any_of(v.parts.begin(), v.parts.end(), [&](const auto& p) { return p.first == name; })) continue;
    KILN_ASSIGN_OR_RETURN(auto phrases, string_list(parts[name], path, name.c_str()));
    v.parts.emplace_back(name, std::move(phrases));
  }
  return std::optional<PromptVocabulary>(std::move(v));
}

}  // namespace kiln
