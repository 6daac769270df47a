// `tessera convert llama2c CHECKPOINT TOKENIZER OUT_DIR`, `tessera convert
// random_model --shape NAME OUT_DIR` and `tessera demo_model OUT_DIR`: write
// model directories tessera (and transformers) can load.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "model/convert/demo_model.h"
#include "model/convert/llama2c.h"
#include "text/demo_tokenizer.h"
#include "text/llama2c_tokenizer.h"
#include "text/tokenizer.h"

namespace tessera::cli {

namespace {

// The tokenizer files of a model directory (or of a folder holding only
// them), copied beside a random model: its vocabulary is the model's.
constexpr const char* kTokenizerFiles[] = {"tokenizer.model",         "tokenizer.json",    "tokenizer_config.json",
                                            "special_tokens_map.json", "added_tokens.json", "chat_template.jinja"};

void check_tokenizer_dir(const std::filesystem::path& from) {
  if (!std::filesystem::exists(from / "tokenizer.model") && !std::filesystem::exists(from / "tokenizer.json")) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--tokenizer-from {}: no tokenizer.model or tokenizer.json there", from.string()),
                "give a model directory, or a folder with its tokenizer files");
  }
}

void copy_tokenizer(const std::filesystem::path& from, const std::filesystem::path& out_dir) {
  for (const char* name : kTokenizerFiles) {
    if (std::filesystem::exists(from / name)) {
      std::filesystem::copy_file(from / name, out_dir / name, std::filesystem::copy_options::overwrite_existing);
    }
  }
}

// `tessera convert random_model --shape NAME OUT_DIR`: a Llama-architecture
// checkpoint of a benchmark's shape with fixed-seed random weights, for
// serving runs at real sizes (its text is nonsense).
void add_random_model_command(CLI::App& convert, Runner& runner) {
  struct Args {
    std::string shape, dtype = "bfloat16", tokenizer_from, out_dir;
    double rope_theta = 0.0, dynamic_ntk_factor = 0.0;
    std::vector<int64_t> eos_ids;
    uint64_t seed = 20261204;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = convert.add_subcommand(
      "random_model", "A random-weight Llama of a known shape (demo, 100m, internlm2_5-7b, internlm2_5-20b)");
  cmd->add_option("--shape", args->shape, "demo, 100m, internlm2_5-7b or internlm2_5-20b")->required();
  cmd->add_option("--dtype", args->dtype, "float32, float16 or bfloat16")->capture_default_str();
  cmd->add_option("--tokenizer-from", args->tokenizer_from,
                  "copy the tokenizer of this model directory (its vocabulary must be the shape's; "
                  "the demo shape writes its own)");
  cmd->add_option("--rope-theta", args->rope_theta, "RoPE base (default: the shape's)");
  cmd->add_option("--dynamic-ntk-factor", args->dynamic_ntk_factor, "rope_scaling {type: dynamic, factor} (0: none)");
  cmd->add_option("--eos-ids", args->eos_ids, "eos token ids (default: 2)");
  cmd->add_option("--seed", args->seed, "weights' seed")->capture_default_str();
  cmd->add_option("out_dir", args->out_dir, "directory to write")->required();
  cmd->callback([&runner, args] {
    runner = [args] {
      const bool demo = args->shape == "demo";
      model::RandomLlamaShape shape = demo ? model::RandomLlamaShape{} : model::random_llama_shape(args->shape);
      if (demo) {
        shape.vocab = text::kDemoVocabSize;
        shape.silence_first_ids = 259;  // as the demo model: special and raw byte pieces never likeliest
      }
      if (!demo && args->tokenizer_from.empty()) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("random model {}: its {}-token vocabulary needs a tokenizer", args->shape, shape.vocab),
                    "pass --tokenizer-from DIR (e.g. an InternLM2 model directory for the internlm2_5 shapes)");
      }
      if (args->dtype == "float32") shape.dtype = DType::kF32;
      else if (args->dtype == "float16") shape.dtype = DType::kF16;
      else if (args->dtype == "bfloat16") shape.dtype = DType::kBF16;
      else throw Error(ErrorKind::kInvalidArgument, "--dtype " + args->dtype, "use float32, float16 or bfloat16");
      if (args->rope_theta > 0.0) shape.rope_theta = args->rope_theta;
      shape.dynamic_ntk_factor = args->dynamic_ntk_factor;
      if (!args->eos_ids.empty()) shape.eos_ids = args->eos_ids;
      if (!args->tokenizer_from.empty()) {  // before writing anything
        check_tokenizer_dir(args->tokenizer_from);
        const int32_t pieces = text::load_tokenizer(args->tokenizer_from)->vocab_size();
        if (pieces > shape.vocab) {
          throw Error(ErrorKind::kInvalidArgument,
                      fmt::format("--tokenizer-from {}: {} pieces, more than the {} shape's vocabulary of {}",
                                  args->tokenizer_from, pieces, args->shape, shape.vocab),
                      "give a tokenizer of at most that many pieces (InternLM2's 92,544 for the internlm2_5 shapes)");
        }
      }
      const std::filesystem::path out_dir = args->out_dir;
      std::filesystem::create_directories(out_dir);
      if (args->tokenizer_from.empty()) {
        text::write_demo_tokenizer(out_dir);
      } else {
        copy_tokenizer(args->tokenizer_from, out_dir);
      }
      log_info("writing a random {} ({:.2f}B parameters, {}) into {}", args->shape, shape.parameter_count() / 1e9,
               args->dtype, out_dir.string());
      model::write_random_llama(out_dir, shape, args->seed);
      log_info("wrote {}", out_dir.string());
      return 0;
    };
  });
}

}  // namespace

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
  add_random_model_command(*convert, runner);
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
