// tessera_tokenize: a test program that exposes tessera's tokenizers to
// scripts (tests/python/test_tokenizer_reference.py compares it with HF's
// tokenizers library).
//
//   tessera_tokenize encode DIR TEXT [--no-special]     ids as a JSON array
//   tessera_tokenize decode DIR [--keep-special] ID...  the text, no newline added
//   tessera_tokenize batch DIR      stdin: a JSON array of strings; stdout: per
//                                   string {"ids", "ids_plain", "decoded", "decoded_special"}
//   tessera_tokenize decode-batch DIR   stdin: a JSON array of id arrays; stdout:
//                                   per array {"skip": text, "keep": text}
//   tessera_tokenize convert-llama2c TOKENIZER_BIN OUT_DIR VOCAB_SIZE [MAX_LENGTH]
//   tessera_tokenize demo OUT_DIR
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/demo_tokenizer.h"
#include "text/llama2c_tokenizer.h"
#include "text/tokenizer.h"

namespace {

using tessera::text::Tokenizer;

int usage() {
  std::cerr << "usage: tessera_tokenize encode DIR TEXT [--no-special]\n"
               "       tessera_tokenize decode DIR [--keep-special] ID...\n"
               "       tessera_tokenize batch DIR < strings.json\n"
               "       tessera_tokenize decode-batch DIR < id_lists.json\n"
               "       tessera_tokenize convert-llama2c TOKENIZER_BIN OUT_DIR VOCAB_SIZE [MAX_LENGTH]\n"
               "       tessera_tokenize demo OUT_DIR\n";
  return 2;
}

int run(const std::vector<std::string>& args) {
  if (args.size() < 2) return usage();
  const std::string& command = args[0];
  if (command == "demo") {
    tessera::text::write_demo_tokenizer(args[1]);
    return 0;
  }
  if (command == "convert-llama2c") {
    if (args.size() < 4) return usage();
    const int64_t max_length = args.size() > 4 ? std::stoll(args[4]) : 2048;
    tessera::text::write_llama2c_tokenizer(args[1], args[2], std::stoi(args[3]), max_length);
    return 0;
  }
  const auto tokenizer = tessera::text::load_tokenizer(args[1]);
  if (command == "encode") {
    if (args.size() < 3) return usage();
    const bool add_special = !(args.size() > 3 && args[3] == "--no-special");
    std::cout << nlohmann::json(tokenizer->encode(args[2], add_special)).dump() << "\n";
    return 0;
  }
  if (command == "decode") {
    bool skip_special = true;
    std::vector<int32_t> ids;
    for (size_t i = 2; i < args.size(); ++i) {
      if (args[i] == "--keep-special") {
        skip_special = false;
      } else {
        ids.push_back(static_cast<int32_t>(std::stol(args[i])));
      }
    }
    std::cout << tokenizer->decode(ids, skip_special);
    return 0;
  }
  if (command == "batch") {
    const nlohmann::json texts = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(std::cin), {}));
    nlohmann::json results = nlohmann::json::array();
    for (const auto& text : texts) {
      const std::vector<int32_t> ids = tokenizer->encode(text.get<std::string>(), true);
      results.push_back({{"ids", ids},
                         {"ids_plain", tokenizer->encode(text.get<std::string>(), false)},
                         {"decoded", tokenizer->decode(ids, true)},
                         {"decoded_special", tokenizer->decode(ids, false)}});
    }
    std::cout << results.dump() << "\n";
    return 0;
  }
  if (command == "decode-batch") {
    const nlohmann::json lists = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(std::cin), {}));
    nlohmann::json results = nlohmann::json::array();
    for (const auto& list : lists) {
      const auto ids = list.get<std::vector<int32_t>>();
      results.push_back({{"skip", tokenizer->decode(ids, true)}, {"keep", tokenizer->decode(ids, false)}});
    }
    std::cout << results.dump() << "\n";
    return 0;
  }
  return usage();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::cerr << "tessera_tokenize: " << e.what() << "\n";
    return 1;
  }
}
