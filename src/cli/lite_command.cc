// `tessera lite auto_awq MODEL OUT`: LMDeploy's command name and flags for a
// 4-bit AWQ export; tessera quantizes by round-to-nearest per group
// (model/convert/awq_quantize.h), without calibration.
#include "cli/commands.h"
#include "core/error.h"
#include "model/convert/awq_quantize.h"

namespace tessera::cli {

void add_lite_command(CLI::App& app, Runner& runner) {
  CLI::App* lite = app.add_subcommand("lite", "Quantize a model (LMDeploy's lite commands)");
  lite->require_subcommand(1);
  struct Args {
    std::string model, out, work_dir;
    int bits = 4;
    int64_t group_size = 128;
  };
  auto args = std::make_shared<Args>();
  CLI::App* awq = lite->add_subcommand(
      "auto_awq",
      "Write a 4-bit AWQ checkpoint (LMDeploy/AutoAWQ GEMM layout) of a 16-bit model. Round-to-nearest with a "
      "per-group min/max zero point; not activation-aware (no calibration data, no --calib-* flags)");
  awq->add_option("model", args->model, "16-bit Hugging Face model directory")->required()->check(CLI::ExistingDirectory);
  awq->add_option("out", args->out, "directory to write (or --work-dir)");
  awq->add_option("--work-dir", args->work_dir, "directory to write (LMDeploy's name for OUT)");
  awq->add_option("--w-bits", args->bits, "weight bits (4)")->capture_default_str()->check(CLI::IsMember({4}));
  awq->add_option("--w-group-size", args->group_size, "inputs per quantization group: 32, 64 or 128")
      ->capture_default_str()
      ->check(CLI::IsMember({32, 64, 128}));
  awq->callback([&runner, args] {
    runner = [args] {
      const std::string out = args->out.empty() ? args->work_dir : args->out;
      if (out.empty() || (!args->out.empty() && !args->work_dir.empty() && args->out != args->work_dir)) {
        throw Error(ErrorKind::kInvalidArgument, "lite auto_awq needs one output directory",
                    "tessera lite auto_awq MODEL OUT (or --work-dir OUT)");
      }
      model::write_awq_model(args->model, out, args->group_size);
      return 0;
    };
  });
}

}  // namespace tessera::cli
