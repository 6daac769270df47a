// The `tessera` subcommands. Each registers its options on the CLI11 app and
// returns the function that runs it once the command line is parsed.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace tessera::cli {

using Runner = std::function<int()>;

void add_generate_command(CLI::App& app, Runner& runner);
void add_convert_command(CLI::App& app, Runner& runner);
void add_demo_model_command(CLI::App& app, Runner& runner);
void add_bench_command(CLI::App& app, Runner& runner);
void add_bench_engine_command(CLI::App& app, Runner& runner);  // after add_bench_command
void add_bench_ops_command(CLI::App& app, Runner& runner);     // after add_bench_command
void add_bench_serve_command(CLI::App& app, Runner& runner);   // after add_bench_command
void add_bench_attention_command(CLI::App& app, Runner& runner);  // after add_bench_command
void add_bench_allreduce_command(CLI::App& app, Runner& runner);  // after add_bench_command
void add_serve_command(CLI::App& app, Runner& runner);
void add_chat_command(CLI::App& app, Runner& runner);
void add_check_env_command(CLI::App& app, Runner& runner);
void add_lite_command(CLI::App& app, Runner& runner);

}  // namespace tessera::cli
