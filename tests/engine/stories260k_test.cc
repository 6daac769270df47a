// The real trained stories260K (llama2.c format), converted by tessera into a
// Hugging Face directory, must tell llama2.c's greedy story: the same 200
// tokens as an independent PyTorch forward of the original checkpoint
// (tests/fixtures/stories260k_greedy.json, made by tools/make_golden.py), and
// the first sentence the testdata README quotes from llama2.c's run.c.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../test_paths.h"
#include "engine/generate.h"
#include "model/convert/llama2c.h"
#include "model/transformer.h"
#include "text/llama2c_tokenizer.h"
#include "text/tokenizer.h"

namespace tessera {
namespace {

TEST(Stories260K, ConvertedModelTellsTheReferenceStory) {
  TESSERA_REQUIRE_TESTDATA("models/stories260K/stories260K.bin");
  const auto source = testing::testdata_dir() / "models/stories260K";
  const auto dir = std::filesystem::temp_directory_path() / "tessera-stories260k-test";
  std::filesystem::remove_all(dir);
  model::Llama2cHeader header = model::convert_llama2c_checkpoint(source / "stories260K.bin", dir);
  text::write_llama2c_tokenizer(source / "tok512.bin", dir, header.vocab_size, header.seq_len);

  auto backend = backend::make_cpu_backend();
  auto model = model::load_transformer(dir, *backend);
  auto tokenizer = text::load_tokenizer(dir);
  engine::GenerateOptions options;
  options.max_new_tokens = 200;  // no stop ids: compare the full 200 tokens
  std::vector<int32_t> tokens = engine::generate(*model, {1}, options).tokens;

  const auto fixture = testing::fixtures_dir() / "stories260k_greedy.json";
  if (std::filesystem::exists(fixture)) {
    auto expected = nlohmann::json::parse(std::ifstream(fixture))["greedy_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokens, expected);
  } else {
    ADD_FAILURE() << "missing " << fixture << " (tools/make_golden.py --stories writes it)";
  }
  // llama2.c stops at the next BOS; the story is the text before it.
  auto bos = std::find(tokens.begin(), tokens.end(), 1);
  std::string story = tokenizer->decode(std::vector<int32_t>(tokens.begin(), bos), /*skip_special=*/true);
  EXPECT_EQ(story.rfind("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.", 0), 0u)
      << story;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
