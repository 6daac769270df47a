// `tessera lite auto_awq MODEL OUT`: LMDeploy's command name and flags for a
// 4-bit AWQ export. With a calibration text the inputs of the linear layers
// are scaled by their activations before rounding (model/convert/awq_scales.h);
// without one, round-to-nearest only, and a warning says how to calibrate.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/backend.h"
#include "cli/commands.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "model/convert/awq_quantize.h"
#include "model/loader/hf_config.h"
#include "text/tokenizer.h"

namespace tessera::cli {

namespace {

struct LiteArgs {
  std::string model, out, work_dir;
  int bits = 4;
  int64_t group_size = 128;
  std::string calib_text, calib_dataset, device = "cpu", dtype = "auto";
  int64_t calib_samples = 128, calib_seqlen = 2048, batch_size = 1;
  bool search_scale = false, w_sym = false;
};

// The calibration text cut into at most `samples` sequences of `seqlen`
// tokens (the last may be shorter), seqlen capped at the model's context.
std::vector<std::vector<int32_t>> calibration_sequences(const LiteArgs& args) {
  std::ifstream file(args.calib_text, std::ios::binary);
  if (!file) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("cannot read --calib-text {}", args.calib_text),
                "give a plain text file");
  }
  std::stringstream text;
  text << file.rdbuf();
  const std::vector<int32_t> ids = text::load_tokenizer(args.model)->encode(text.str(), /*add_special=*/false);
  const model::ModelSpec spec = model::read_model_spec(args.model);
  const int64_t seqlen = spec.max_position_embeddings > 0
                             ? std::min<int64_t>(args.calib_seqlen, spec.max_position_embeddings)
                             : args.calib_seqlen;
  std::vector<std::vector<int32_t>> sequences;
  for (size_t begin = 0; begin < ids.size() && static_cast<int64_t>(sequences.size()) < args.calib_samples;
       begin += seqlen) {
    sequences.emplace_back(ids.begin() + begin, ids.begin() + std::min(ids.size(), begin + size_t(seqlen)));
  }
  if (sequences.empty()) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("--calib-text {} encodes to no tokens", args.calib_text),
                "give a file with some text in it");
  }
  return sequences;
}

int run_auto_awq(LiteArgs args) {
  const std::string out = args.out.empty() ? args.work_dir : args.out;
  if (out.empty() || (!args.out.empty() && !args.work_dir.empty() && args.out != args.work_dir)) {
    throw Error(ErrorKind::kInvalidArgument, "lite auto_awq needs one output directory",
                "tessera lite auto_awq MODEL OUT (or --work-dir OUT)");
  }
  if (args.w_sym) {
    throw Error(ErrorKind::kInvalidArgument, "--w-sym: symmetric 4-bit weights (no zero points) are not supported",
                "drop --w-sym: AWQ GEMM checkpoints carry a zero point per group");
  }
  if (!args.calib_dataset.empty() && args.calib_text.empty() && std::filesystem::is_regular_file(args.calib_dataset)) {
    args.calib_text = args.calib_dataset;  // a file, not a dataset name: its text is the calibration
    args.calib_dataset.clear();
  }
  if (!args.calib_dataset.empty()) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("--calib-dataset {}: tessera downloads no datasets", args.calib_dataset),
                "save some text of the kind the model will see to a file and give it as --calib-text FILE");
  }
  if (args.calib_text.empty()) {
    if (args.search_scale) {
      throw Error(ErrorKind::kInvalidArgument, "--search-scale needs calibration text",
                  "give --calib-text FILE");
    }
    log_warning("auto_awq: no --calib-text: rounding to nearest without activation-aware scales (less accurate); "
             "give --calib-text FILE to calibrate");
    model::write_awq_model(args.model, out, args.group_size);
    return 0;
  }
  model::AwqCalibration calibration;
  calibration.sequences = calibration_sequences(args);
  calibration.search_scale = args.search_scale;
  calibration.batch_size = args.batch_size;
  const Device device = parse_device(args.device);
  std::unique_ptr<backend::Backend> backend;
  if (!device.is_cpu()) {
    backend = backend::make_cuda_backend(device.index, backend::choose_compute_dtype(args.dtype, device));
    calibration.backend = backend.get();
  }
  model::write_awq_model(args.model, out, args.group_size, calibration);
  return 0;
}

}  // namespace

void add_lite_command(CLI::App& app, Runner& runner) {
  CLI::App* lite = app.add_subcommand("lite", "Quantize a model (LMDeploy's lite commands)");
  lite->require_subcommand(1);
  auto args = std::make_shared<LiteArgs>();
  CLI::App* awq = lite->add_subcommand(
      "auto_awq",
      "Write a 4-bit AWQ checkpoint (LMDeploy/AutoAWQ GEMM layout) of a 16-bit model: with --calib-text, input "
      "channels scaled by their activations on it before rounding to nearest per group; without, rounding only");
  awq->add_option("model", args->model, "16-bit Hugging Face model directory")->required()->check(CLI::ExistingDirectory);
  awq->add_option("out", args->out, "directory to write (or --work-dir)");
  awq->add_option("--work-dir", args->work_dir, "directory to write (LMDeploy's name for OUT)");
  awq->add_option("--w-bits", args->bits, "weight bits (4)")->capture_default_str()->check(CLI::IsMember({4}));
  awq->add_option("--w-group-size", args->group_size, "inputs per quantization group: 32, 64 or 128")
      ->capture_default_str()
      ->check(CLI::IsMember({32, 64, 128}));
  awq->add_option("--calib-text", args->calib_text, "plain text file the model is run on to find the salient channels")
      ->check(CLI::ExistingFile);
  awq->add_option("--calib-dataset", args->calib_dataset,
                  "(LMDeploy's) a text file is taken as --calib-text; dataset names are refused (nothing is downloaded)");
  awq->add_option("--calib-samples", args->calib_samples, "sequences of the text to run, at most")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  awq->add_option("--calib-seqlen", args->calib_seqlen, "tokens a sequence (at most the model's context)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  awq->add_option("--batch-size", args->batch_size, "calibration sequences a forward")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  awq->add_flag("--w-sym", args->w_sym, "(LMDeploy's; not supported: the zero points are kept)");
  awq->add_flag("--search-scale", args->search_scale,
                "search the scale exponent per layer input (0, 0.05, ... 0.95) instead of 0.5, and each "
                "group's clipping");
  awq->add_option("--device", args->device, "where the calibration runs: cpu, cuda or cuda:N")->capture_default_str();
  awq->add_option("--dtype", args->dtype, "the calibration's compute dtype on a GPU: auto, float16, bfloat16")
      ->capture_default_str();
  awq->callback([&runner, args] { runner = [args] { return run_auto_awq(*args); }; });
}

}  // namespace tessera::cli
