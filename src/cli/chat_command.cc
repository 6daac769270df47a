// `tessera chat MODEL_PATH`: an interactive, multi-turn chat in the terminal,
// through the same engine, chat template, detokenizer and stop handling as
// the server. The reply streams onto stdout as it is generated.
//   /reset  forget the conversation        exit (or Ctrl-D)  leave
#include <fmt/format.h>

#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <random>

#include "cli/commands.h"
#include "cli/serving_model.h"
#include "core/error.h"
#include "core/log.h"
#include "server/api_server.h"
#include "server/generation.h"

namespace tessera::cli {

namespace {

struct ChatArgs {
  EngineArgs engine;
  std::string system;
  double temperature = 0.7;
  double top_p = 1.0;
  int top_k = 40;
  double repetition_penalty = 1.0;
  int64_t max_new_tokens = 0;
  int64_t seed = -1;
};

// Wakes the terminal loop when the engine pushed an event.
struct Wakeup {
  std::mutex mutex;
  std::condition_variable cv;
  bool pending = false;
  void notify() {
    {
      std::lock_guard lock(mutex);
      pending = true;
    }
    cv.notify_one();
  }
  void wait() {
    std::unique_lock lock(mutex);
    cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return pending; });
    pending = false;
  }
};

text::ChatMessage message(std::string role, const std::string& content) {
  text::ChatMessage m;
  m.role = std::move(role);
  m.content = nlohmann::ordered_json(content);
  return m;
}

int run_chat(const ChatArgs& a) {
  if (a.engine.node_rank > 0) {
    throw Error(ErrorKind::kInvalidArgument, "a worker node (--node-rank > 0) has no terminal to chat in",
                "start worker nodes with `tessera serve api_server ... --node-rank N`; chat runs on node 0");
  }
  std::unique_ptr<ServingModel> model = load_serving_model(a.engine);
  if (log_level() == LogLevel::kInfo) set_log_level(LogLevel::kWarning);  // one log line per reply would interleave
  const text::Tokenizer& tokenizer = *model->tokenizer;
  const std::vector<int32_t> stop_ids = server::find_chat_stop_ids(tokenizer);
  server::Metrics metrics;
  std::vector<text::ChatMessage> history;
  auto system_message = [&] {
    history.clear();
    if (!a.system.empty()) history.push_back(message("system", a.system));
  };
  system_message();
  std::fprintf(stderr, "tessera chat: %s (template %s). Type /reset to start over, exit or Ctrl-D to leave.\n",
               a.engine.model_path.c_str(), model->chat_template->name().c_str());
  uint64_t turn = 0;
  std::string line;
  while (true) {
    std::fputs("\n>>> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || line == "exit" || line == "quit") break;
    if (line.empty()) continue;
    if (line == "/reset") {
      system_message();
      std::fputs("(conversation cleared)\n", stdout);
      continue;
    }
    history.push_back(message("user", line));
    text::ChatTemplateInput input;
    input.messages = history;
    if (tokenizer.bos_id()) input.bos_token = tokenizer.id_to_piece(*tokenizer.bos_id());
    if (tokenizer.eos_id()) input.eos_token = tokenizer.id_to_piece(*tokenizer.eos_id());
    engine::Request request;
    request.prompt = tokenizer.encode(model->chat_template->render(input), /*add_special=*/false);
    if (static_cast<int64_t>(request.prompt.size()) >= model->plan.session_len) {
      history.pop_back();
      std::fprintf(stdout, "(the conversation has %zu tokens, more than the session length %lld: /reset to start over)\n",
                   request.prompt.size(), static_cast<long long>(model->plan.session_len));
      continue;
    }
    server::GenerationOptions options;
    options.sampling.temperature = static_cast<float>(a.temperature);
    options.sampling.top_p = static_cast<float>(a.top_p);
    options.sampling.top_k = a.top_k;
    options.sampling.repetition_penalty = static_cast<float>(a.repetition_penalty);
    options.sampling.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) + turn : std::random_device{}();
    request.sampling = options.sampling;
    request.stop_ids = stop_ids;
    if (a.max_new_tokens > 0) request.max_tokens = a.max_new_tokens;
    const int64_t prompt_tokens = static_cast<int64_t>(request.prompt.size());
    const auto arrival = request.arrival;
    Wakeup wakeup;
    auto stream = model->engine->submit(std::move(request), [&wakeup] { wakeup.notify(); });
    server::Generation generation(*model->engine, tokenizer, metrics, stream, options, prompt_tokens, arrival);
    std::string reply;
    while (!generation.finished()) {
      server::GenerationDelta delta = generation.poll();
      if (!delta.text.empty()) {
        std::fwrite(delta.text.data(), 1, delta.text.size(), stdout);
        std::fflush(stdout);
        reply += delta.text;
      }
      if (!generation.finished()) wakeup.wait();
    }
    std::fputc('\n', stdout);
    if (!generation.error().empty()) std::fprintf(stderr, "tessera chat: error: %s\n", generation.error().c_str());
    history.push_back(message("assistant", reply));
    ++turn;
  }
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app, Runner& runner) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal (multi-turn, streaming)");
  add_engine_options(cmd, a->engine);
  cmd->add_option("--system", a->system, "a system message to start every conversation with");
  cmd->add_option("--temperature", a->temperature, "0 for greedy")->capture_default_str()->check(CLI::Range(0.0, 2.0));
  cmd->add_option("--top-p", a->top_p)->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", a->top_k, "0: off")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--repetition-penalty", a->repetition_penalty)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "tokens per reply at most (0: until the session ends)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", a->seed, "random seed (each turn adds its number); default: random");
  cmd->callback([&runner, a] { runner = [a] { return run_chat(*a); }; });
}

}  // namespace tessera::cli
