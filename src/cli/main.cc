// tessera: serve, run and inspect language models from a Hugging Face model
// directory. This is the only place that turns errors into exit statuses.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera: a C++/CUDA engine that serves language models from a Hugging Face model directory"};
  app.require_subcommand(1);
  app.fallthrough();  // global options such as --log-level also work after the subcommand
  app.set_version_flag("--version", "tessera 0.1.0");
  std::string log_level = "INFO";
  app.add_option("--log-level", log_level, "DEBUG, INFO, WARNING or ERROR")->capture_default_str();

  tessera::cli::Runner runner;
  tessera::cli::add_serve_command(app, runner);
  tessera::cli::add_chat_command(app, runner);
  tessera::cli::add_check_env_command(app, runner);
  tessera::cli::add_generate_command(app, runner);
  tessera::cli::add_convert_command(app, runner);
  tessera::cli::add_demo_model_command(app, runner);
  tessera::cli::add_lite_command(app, runner);
  tessera::cli::add_bench_command(app, runner);
  tessera::cli::add_bench_engine_command(app, runner);
  tessera::cli::add_bench_ops_command(app, runner);
  tessera::cli::add_bench_serve_command(app, runner);
  tessera::cli::add_bench_attention_command(app, runner);
  tessera::cli::add_bench_allreduce_command(app, runner);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    tessera::set_log_level(tessera::parse_log_level(log_level));
    return runner();
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "tessera: error (%s): %s\n", tessera::error_kind_name(e.kind()), e.message().c_str());
    if (!e.hint().empty()) std::fprintf(stderr, "tessera: hint: %s\n", e.hint().c_str());
    return e.kind() == tessera::ErrorKind::kInvalidArgument ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return 1;
  }
}
