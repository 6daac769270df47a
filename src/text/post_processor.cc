#include "text/post_processor.h"

#include <string>

namespace tessera::text {
namespace {

// A template is a list like [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}];
// the special tokens' ids come from the processor's "special_tokens" map.
SpecialTokenTemplate parse_template(const JsonField& spec) {
  const JsonField single = spec.at("single");
  const auto special_tokens = spec.find("special_tokens");
  SpecialTokenTemplate result;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.array_size(); ++i) {
    const JsonField item = single.at(i);
    if (const auto sequence = item.find("Sequence")) {
      if (sequence->at("id").as_string() != "A") sequence->fail("a single-sequence template can only use sequence A");
      if (seen_sequence) item.fail("sequence A appears twice");
      seen_sequence = true;
      continue;
    }
    const auto special = item.find("SpecialToken");
    if (!special) item.fail("expected a \"Sequence\" or a \"SpecialToken\" item");
    const std::string name = special->at("id").as_string();
    if (!special_tokens || !special_tokens->value().contains(name))
      special->fail("special token \"" + name + "\" is not in the processor's special_tokens");
    const JsonField ids = special_tokens->at(name).at("ids");
    for (size_t k = 0; k < ids.array_size(); ++k) {
      const int64_t id = ids.at(k).as_int();
      if (id < 0 || id > INT32_MAX) ids.at(k).fail("token id out of range");
      (seen_sequence ? result.suffix : result.prefix).push_back(static_cast<int32_t>(id));
    }
  }
  if (!seen_sequence) single.fail("the template has no sequence A");
  return result;
}

}  // namespace

SpecialTokenTemplate parse_post_processor(const JsonField& spec) {
  const std::string type = spec.at("type").as_string();
  if (type == "TemplateProcessing") return parse_template(spec);
  if (type == "ByteLevel") return {};
  if (type == "Sequence") {
    // Each processor wraps the output of the one before it.
    const JsonField list = spec.at("processors");
    SpecialTokenTemplate result;
    for (size_t i = 0; i < list.array_size(); ++i) {
      SpecialTokenTemplate step = parse_post_processor(list.at(i));
      step.prefix.insert(step.prefix.end(), result.prefix.begin(), result.prefix.end());
      result.suffix.insert(result.suffix.end(), step.suffix.begin(), step.suffix.end());
      result.prefix = std::move(step.prefix);
    }
    return result;
  }
  spec.unsupported("post_processor", type);
}

}  // namespace tessera::text
