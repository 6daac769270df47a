// `tessera convert llama2c CHECKPOINT TOKENIZER OUT_DIR` and
// `tessera demo_model OUT_DIR`: write model directories tessera (and
// transformers) can load.
#include "cli/commands.h"
#include "core/log.h"
#include "model/convert/demo_model.h"
#include "model/convert/llama2c.h"
#include "text/demo_tokenizer.h"
#include "text/llama2c_tokenizer.h"

namespace tessera::cli {

void add_convert_command(CLI::App& app, Runner& runner) {
  CLI::App* convert = app.add_subcommand("convert", "Convert a checkpoint of another format into a model directory");
  convert->require_subcommand(1);
  struct Args {
    std::string checkpoint, tokenizer, out_dir;
  };
  auto args = std::make_shared<Args>();
  CLI::App* llama2c = convert->add_subcommand("llama2c", "llama2.c checkpoint + tokenizer.bin -> Hugging Face Llama");
  llama2c->add_option("checkpoint", args->checkpoint, "llama2.c model file (.bin)")->required()->check(CLI::ExistingFile);
  llama2c->add_option("tokenizer", args->tokenizer, "llama2.c tokenizer file (.bin)")->required()->check(CLI::ExistingFile);
  llama2c->add_option("out_dir", args->out_dir, "directory to write")->required();
  llama2c->callback([&runner, args] {
    runner = [args] {
      model::Llama2cHeader header = model::convert_llama2c_checkpoint(args->checkpoint, args->out_dir);
      text::write_llama2c_tokenizer(args->tokenizer, args->out_dir, header.vocab_size, header.seq_len);
      return 0;
    };
  });
}

void add_demo_model_command(CLI::App& app, Runner& runner) {
  auto out_dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("demo_model", "Write the built-in demo model (random weights: it speaks nonsense)");
  cmd->add_option("out_dir", *out_dir, "directory to write")->required();
  cmd->callback([&runner, out_dir] {
    runner = [out_dir] {
      text::write_demo_tokenizer(*out_dir);
      model::write_demo_model(*out_dir, text::kDemoVocabSize);
      log_info("wrote the demo model into {}", *out_dir);
      return 0;
    };
  });
}

}  // namespace tessera::cli
