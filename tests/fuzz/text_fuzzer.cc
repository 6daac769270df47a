// libFuzzer target for the text layer. The first input byte picks what the
// rest feeds (tests/fuzz/text_targets.h): encode or decode of one tokenizer
// (the demo tokenizer, and InternLM2, Llama 2 and Qwen2 when the shared test
// data is present), the stop-string matcher, tool-call and reasoning markup, or the Jinja parser and
// interpreter. Built with clang only (-DTESSERA_FUZZ=ON); see
// tests/fuzz/CMakeLists.txt for how to run it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "../text/real_tokenizers.h"
#include "text/demo_tokenizer.h"
#include "text_targets.h"

namespace {

using tessera::text::Tokenizer;

const std::vector<std::unique_ptr<Tokenizer>>& tokenizers() {
  static const std::vector<std::unique_ptr<Tokenizer>> all = [] {
    std::vector<std::unique_ptr<Tokenizer>> result;
    const auto root = tessera::testing::real_tokenizer_root();
    tessera::text::write_demo_tokenizer(root / "demo");
    result.push_back(tessera::text::load_tokenizer(root / "demo"));
    for (const auto& dir : {tessera::testing::internlm2_dir(), tessera::testing::llama2_dir(),
                            tessera::testing::qwen2_dir()}) {
      if (dir) result.push_back(tessera::text::load_tokenizer(*dir));
    }
    return result;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  namespace fuzz = tessera::text::fuzz;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto& all = tokenizers();
  const size_t choice = data[0] % (2 * all.size() + 3);
  if (choice < all.size()) {
    fuzz::encode_bytes(*all[choice], input);
  } else if (choice < 2 * all.size()) {
    const Tokenizer& tokenizer = *all[choice - all.size()];
    fuzz::decode_ids(tokenizer, fuzz::ids_from_bytes(tokenizer, input));
  } else if (choice == 2 * all.size()) {
    fuzz::stop_strings(input);
  } else if (choice == 2 * all.size() + 1) {
    fuzz::answer_markup(input);
  } else {
    fuzz::render_template(input);
  }
  return 0;
}
