#include "text/tokenizer.h"

#include <fmt/format.h>

#include "core/error.h"
#include "text/bpe_tokenizer.h"
#include "text/json_field.h"
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
  if (fs::exists(tokenizer_json)) {
    const TokenizerConfig config = fs::exists(config_json) ? read_tokenizer_config(config_json) : TokenizerConfig{};
    return BpeTokenizer::from_json(read_json_file(tokenizer_json), config, tokenizer_json.string());
  }
  if (fs::exists(model_dir / "tokenizer.model")) {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("{} has only tokenizer.model: tokenizer.model (SentencePiece) support is not built yet",
                            model_dir.string()),
                "add the model's tokenizer.json (transformers writes one with "
                "AutoTokenizer.from_pretrained(dir).save_pretrained(dir))");
  }
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("no tokenizer in {}: neither tokenizer.json nor tokenizer.model is there", model_dir.string()),
              "copy the tokenizer files of the model's original repository into the directory");
}

}  // namespace tessera::text
