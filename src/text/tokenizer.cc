#include "text/tokenizer.h"

#include <fmt/format.h>

#include "core/error.h"
#include "text/bpe_tokenizer.h"
#include "text/json_field.h"
#include "text/sentencepiece_tokenizer.h"
#include "text/tokenizer_config.h"

namespace tessera::text {

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(model_dir)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("model directory {} does not exist or is not a directory", model_dir.string()));
  }
  const fs::path tokenizer_json = model_dir / "tokenizer.json";
  const fs::path config_json = model_dir / "tokenizer_config.json";
  const fs::path sentencepiece_model = model_dir / "tokenizer.model";
  if (fs::exists(tokenizer_json) || fs::exists(sentencepiece_model)) {
    const TokenizerConfig config = fs::exists(config_json) ? read_tokenizer_config(config_json) : TokenizerConfig{};
    // tokenizer.json is what transformers' fast tokenizers load, so it wins when both are there.
    if (fs::exists(tokenizer_json)) {
      return BpeTokenizer::from_json(read_json_file(tokenizer_json), config, tokenizer_json.string());
    }
    return SentencePieceTokenizer::load(sentencepiece_model, config);
  }
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("no tokenizer in {}: neither tokenizer.json nor tokenizer.model is there", model_dir.string()),
              "copy the tokenizer files of the model's original repository into the directory");
}

}  // namespace tessera::text
