#include "text/sentencepiece_bpe_writer.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/error.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string quoted(const std::string& text) { return nlohmann::json(text).dump(); }

ordered_json added_token(int32_t id, const std::string& content) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false}, {"special", true}};
}

ordered_json string_pattern(const std::string& text) { return {{"String", text}}; }

ordered_json replace(const std::string& from, const std::string& to) {
  return {{"type", "Replace"}, {"pattern", string_pattern(from)}, {"content", to}};
}

// Llama 2's TemplateProcessing: "<s> $A" for one sequence, "<s> $A <s> $B" for a pair.
ordered_json bos_template(const std::string& bos, int32_t bos_id) {
  const auto special = ordered_json{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
  const auto sequence = [](const char* name, int type_id) {
    return ordered_json{{"Sequence", {{"id", name}, {"type_id", type_id}}}};
  };
  const auto special_b = ordered_json{{"SpecialToken", {{"id", bos}, {"type_id", 1}}}};
  return {{"type", "TemplateProcessing"},
          {"single", {special, sequence("A", 0)}},
          {"pair", {special, sequence("A", 0), special_b, sequence("B", 1)}},
          {"special_tokens", {{bos, {{"id", bos}, {"ids", {bos_id}}, {"tokens", {bos}}}}}}};
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot write {}", path.string()));
}

}  // namespace

void write_sentencepiece_bpe(const SentencePieceBpe& tokenizer, const std::filesystem::path& out_dir) {
  const auto& pieces = tokenizer.pieces;
  const auto piece_count = static_cast<int32_t>(pieces.size());
  for (const int32_t id : {tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id}) TESSERA_CHECK(id >= 0 && id < piece_count);
  std::unordered_set<std::string> seen;
  for (const std::string& piece : pieces) {
    TESSERA_CHECK(is_valid_utf8(piece) && !piece.empty());
    TESSERA_CHECK(seen.insert(piece).second);
  }
  const std::string& unk = pieces[tokenizer.unk_id];
  const std::string& bos = pieces[tokenizer.bos_id];
  const std::string& eos = pieces[tokenizer.eos_id];

  // The small components are dumped by nlohmann; vocab and merges are written
  // line by line in id / rank order (ordered_json would be quadratic at 32k pieces).
  const ordered_json added = {added_token(tokenizer.unk_id, unk), added_token(tokenizer.bos_id, bos),
                              added_token(tokenizer.eos_id, eos)};
  const ordered_json normalizer = {
      {"type", "Sequence"},
      {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace(" ", "\u2581")}}};
  const ordered_json decoder = {
      {"type", "Sequence"},
      {"decoders",
       {replace("\u2581", " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};

  std::string json = "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  json += "  \"added_tokens\": [\n";
  for (size_t i = 0; i < added.size(); ++i) json += fmt::format("    {}{}\n", added[i].dump(), i + 1 < added.size() ? "," : "");
  json += "  ],\n";
  json += fmt::format("  \"normalizer\": {},\n", normalizer.dump());
  json += "  \"pre_tokenizer\": null,\n";
  json += fmt::format("  \"post_processor\": {},\n", bos_template(bos, tokenizer.bos_id).dump());
  json += fmt::format("  \"decoder\": {},\n", decoder.dump());
  json += "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n";
  json += fmt::format("    \"unk_token\": {},\n", quoted(unk));
  json += "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n";
  json += "    \"fuse_unk\": true,\n    \"byte_fallback\": true,\n    \"ignore_merges\": false,\n";
  json += "    \"vocab\": {\n";
  for (int32_t id = 0; id < piece_count; ++id)
    json += fmt::format("      {}: {}{}\n", quoted(pieces[id]), id, id + 1 < piece_count ? "," : "");
  json += "    },\n    \"merges\": [\n";
  for (size_t i = 0; i < tokenizer.merges.size(); ++i) {
    const auto [left, right] = tokenizer.merges[i];
    TESSERA_CHECK(left >= 0 && left < piece_count && right >= 0 && right < piece_count);
    // The "a b" form every tokenizers version reads; pieces never hold a space here.
    TESSERA_CHECK(pieces[left].find(' ') == std::string::npos && pieces[right].find(' ') == std::string::npos);
    json += fmt::format("      {}{}\n", quoted(pieces[left] + " " + pieces[right]),
                        i + 1 < tokenizer.merges.size() ? "," : "");
  }
  json += "    ]\n  }\n}\n";

  ordered_json config = {{"add_bos_token", true},
                         {"add_eos_token", false},
                         {"bos_token", bos},
                         {"eos_token", eos},
                         {"unk_token", unk},
                         {"clean_up_tokenization_spaces", false},
                         {"legacy", true},
                         {"tokenizer_class", "LlamaTokenizerFast"}};
  if (tokenizer.model_max_length) config["model_max_length"] = *tokenizer.model_max_length;

  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot create {}: {}", out_dir.string(), error.message()));
  }
  write_file(out_dir / "tokenizer.json", json);
  write_file(out_dir / "tokenizer_config.json", config.dump(2) + "\n");
}

}  // namespace tessera::text
