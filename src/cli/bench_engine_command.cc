// `tessera bench engine`: the serving engine's own cost. With a fake executor
// (no model: each step returns one logits row per sampling sequence at once)
// it times the host work between two steps at a full decode batch —
// sampling, update, events and statistics of one step, then taking the inbox
// and scheduling the next — and the Scheduler alone. With a model directory
// (or --random SHAPE) it runs many streams through the Engine on the chosen
// device and reports their output tokens/s next to one stream through
// engine::generate on the same model; a short run of the same batch first
// warms plans, kernel choices and the allocator, so the timed run is steady.
// With --tp N the streams run on N tensor-parallel ranks (the serving path's
// executor and communicator choice), a model directory only. With
// --constrained K the first K streams carry a structured output's
// constraint that allows every token: the path such a request takes (a mask
// a step), without a grammar's own cost (tessera_bench_grammar has that).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/serving_model.h"
#include "core/error.h"
#include "engine/cpu_executor.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/token_constraint.h"
#include "engine/tp_executor.h"
#include "model/random_weights.h"
#include "model/transformer.h"

namespace tessera::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchEngineArgs {
  std::string model_dir;  // empty (and no random_shape): the fake executor
  std::string random_shape;
  std::string device = "cpu";
  std::string dtype = "auto";
  bool skip_single = false;
  int tp = 1;  // tensor-parallel ranks (a model directory)
  int64_t batch = 256;
  int64_t steps = 2000;
  int64_t vocab = 256;
  int64_t prompt_tokens = 32;
  int64_t new_tokens = 128;  // per stream, with a model
  int quant_policy = 0;      // 8 or 4: an 8- or 4-bit KV cache
  // The streams' sampling (a model only): greedy by default; LMDeploy's
  // defaults are temperature 0.8, top_k 40, top_p 0.8.
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  int64_t constrained = 0;  // streams with a constraint (AnyToken)
};

// A structured output that allows every token and never ends the output.
class AnyToken final : public engine::TokenConstraint {
 public:
  void allowed(std::span<uint64_t> allowed) const override {
    std::fill(allowed.begin(), allowed.end(), ~uint64_t{0});
  }
  bool can_end() const override { return true; }
  bool done() const override { return false; }
  bool accept(int32_t) override { return true; }
};

backend::KvCacheFormat kv_format(const BenchEngineArgs& args) {
  return backend::kv_cache_format_for_policy(args.quant_policy);
}

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Summary {
  double mean = 0, p50 = 0, p99 = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  return s;
}

// Logits at once: the row of a chunk ending in token t peaks at (t + 1) % vocab.
// Records, for consecutive full decode steps, the time from one step's return
// to the next step's call (the engine's host work) and its own time.
class TimedFakeExecutor : public engine::Executor {
 public:
  TimedFakeExecutor(int64_t vocab, int64_t batch) : vocab_(vocab), batch_(batch) {}

  engine::StepOutput execute(const engine::StepPlan& plan) override {
    const auto entry = Clock::now();
    const bool full_decode = static_cast<int64_t>(plan.chunks.size()) == batch_ && plan.num_tokens == batch_;
    if (full_decode && last_full_decode_) host_us.push_back(micros(entry - last_exit_));
    const int64_t rows = plan.num_sampling();
    engine::StepOutput out;
    if (rows > 0) {
      out.logits = Tensor::empty({rows, vocab_}, DType::kF32);
      float* data = out.logits.data<float>();
      std::fill(data, data + rows * vocab_, 0.0f);
      int64_t row = 0;
      for (const auto& c : plan.chunks) {
        if (c.sample) data[row++ * vocab_ + (c.token_ids.back() + 1) % vocab_] = 10.0f;
      }
    }
    last_full_decode_ = full_decode;
    last_exit_ = Clock::now();
    if (full_decode) executor_us.push_back(micros(last_exit_ - entry));
    return out;
  }
  int64_t vocab_size() const override { return vocab_; }

  std::vector<double> host_us;      // engine thread only until the engine stops
  std::vector<double> executor_us;

 private:
  int64_t vocab_, batch_;
  bool last_full_decode_ = false;
  Clock::time_point last_exit_;
};

engine::EngineConfig engine_config(int64_t batch, int64_t session_len) {
  engine::EngineConfig config;
  config.block_size = 64;
  config.session_len = session_len;
  config.num_blocks = batch * ((session_len + 63) / 64);
  config.scheduler.max_batch_size = batch;
  config.scheduler.max_num_batched_tokens = std::max<int64_t>(8192, batch);
  config.enable_prefix_caching = true;
  return config;
}

engine::Request decode_request(int64_t index, int64_t prompt_tokens, int64_t vocab, int64_t max_tokens) {
  engine::Request r;
  r.prompt.resize(prompt_tokens);
  for (int64_t i = 0; i < prompt_tokens; ++i) r.prompt[i] = static_cast<int32_t>((index * 7 + i * 13) % vocab);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

void bench_fake(const BenchEngineArgs& args) {
  const int64_t session_len = args.prompt_tokens + args.steps + 8;
  auto fake = std::make_unique<TimedFakeExecutor>(args.vocab, args.batch);
  TimedFakeExecutor* timed = fake.get();  // owned by the engine: read before it goes
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  std::vector<double> host_us, executor_us;
  {
      engine::Engine engine(engine_config(args.batch, session_len), std::move(fake));
      for (int64_t i = 0; i < args.batch; ++i) {
          auto req = decode_request(i, args.prompt_tokens, args.vocab, args.steps);
          streams.push_back(engine.submit(req));
    }
      // A consumer as a server has one: it takes each stream's events as they come.
    for (auto& s : streams) {
      while (!s->next().last()) {
      }
    }
    engine.stop();
    host_us = timed->host_us;
    executor_us = timed->executor_us;
  }
  const Summary host = summarize(host_us), exec = summarize(executor_us);
  fmt::print("engine, fake executor: batch {}, vocab {}, {} full decode steps\n", args.batch, args.vocab,
             host_us.size());
  fmt::print("  engine host time per step   mean {:.1f} us  p50 {:.1f} us  p99 {:.1f} us\n", host.mean, host.p50,
             host.p99);
  fmt::print("  fake executor (logits)      mean {:.1f} us\n", exec.mean);

  // The scheduler alone: schedule + update over the same batch, no threads.
  kv::KvCacheManager kv(args.batch * ((session_len + 63) / 64), 64, true);
  engine::Scheduler scheduler({args.batch, std::max<int64_t>(8192, args.batch)}, {{}, session_len}, kv);
  for (int64_t i = 0; i < args.batch; ++i) {
    engine::Request r = decode_request(i, args.prompt_tokens, args.vocab, args.steps);
    r.id = static_cast<engine::RequestId>(i + 1);
    scheduler.add(std::make_unique<engine::Sequence>(r));
  }
  std::vector<double> sched_us;
  for (int64_t step = 0; step < args.steps && !scheduler.empty(); ++step) {
    const auto start = Clock::now();
    engine::StepPlan plan = scheduler.schedule();
    engine::SampleResult token_one;
    token_one.token = 1;
    std::vector<engine::SampleResult> sampled(plan.num_sampling(), token_one);
    scheduler.update(plan, sampled);
    if (plan.num_tokens == args.batch) sched_us.push_back(micros(Clock::now() - start));
  }
  const Summary sched = summarize(sched_us);
  fmt::print("  scheduler alone (schedule + update)  mean {:.1f} us  p50 {:.1f} us  p99 {:.1f} us\n", sched.mean,
             sched.p50, sched.p99);
}

// Every stream to its end; returns the tokens they produced.
int64_t run_streams(engine::Engine& engine, const BenchEngineArgs& args, int64_t vocab, int64_t new_tokens,
                    int64_t salt) {
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (int64_t i = 0; i < args.batch; ++i) {
    engine::Request r = decode_request(i + salt, args.prompt_tokens, vocab, new_tokens);
    r.sampling.temperature = args.temperature;
    r.sampling.top_k = args.top_k;
    r.sampling.top_p = args.top_p;
    r.sampling.seed = static_cast<uint64_t>(i + salt);
    if (i < args.constrained) r.constraint = std::make_shared<AnyToken>();
    streams.push_back(engine.submit(std::move(r)));
  }
  int64_t generated = 0;
  for (auto& s : streams) {
    while (true) {
      engine::TokenEvent e = s->next();
      generated += e.has_token() ? 1 : 0;
      if (e.last()) break;
    }
  }
  return generated;
}

// How the header line names the streams' sampling.
std::string sampling_name(const BenchEngineArgs& args) {
  std::string name = args.temperature > 0.0f
                         ? fmt::format("temperature {} top_k {} top_p {}", args.temperature, args.top_k, args.top_p)
                         : std::string("greedy");
  if (args.constrained > 0) name += fmt::format(", {} of them constrained", std::min(args.constrained, args.batch));
  return name;
}

// A short run of the batch (plans, kernel choices, the allocator), then the
// timed one, through an engine over `executor`; prints output tokens/s.
void time_streams(const BenchEngineArgs& args, const engine::EngineConfig& config,
                  std::unique_ptr<engine::Executor> executor, int64_t vocab) {
  int64_t generated = 0;
  double batched_s = 0;
  {
    engine::Engine engine(config, std::move(executor));
    run_streams(engine, args, vocab, std::min<int64_t>(args.new_tokens, 4), 1000000);
    const auto start = Clock::now();
    generated = run_streams(engine, args, vocab, args.new_tokens, 0);
    batched_s = std::chrono::duration<double>(Clock::now() - start).count();
  }
  fmt::print("  {} streams through the engine     {:.0f} output tokens/s ({} tokens in {:.2f} s, prefill included)\n",
             args.batch, generated / batched_s, generated, batched_s);
}

// The streams through the engine on `tp` ranks of the model directory's
// shards, each rank's device as serving would pick it.
void bench_tp(const BenchEngineArgs& args) {
  if (!args.random_shape.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "--tp needs a model directory, not --random",
                "write one with `tessera convert random_model --shape SHAPE DIR` and pass DIR");
  }
  const Device device = parse_device(args.device);
  const DType dtype = backend::choose_compute_dtype(args.dtype, device);
  const model::HostModel model = model::read_host_model(args.model_dir);
  const int64_t session_len = args.prompt_tokens + args.new_tokens + 8;
  engine::EngineConfig config = engine_config(args.batch, session_len);
  engine::TpExecutorConfig tp_config;
  tp_config.tp = args.tp;
  tp_config.num_blocks = config.num_blocks;
  tp_config.block_size = config.block_size;
  tp_config.kv_cache_format = kv_format(args);
  tp_config.comm_plan = choose_tp_comm(args.tp, device, false);
  tp_config.compute_dtype = dtype;
  auto executor = std::make_unique<engine::TpExecutor>(model, tp_config);
  fmt::print("model {} ({} on {} ranks, {} communicator, sampling on {}, KV cache in {}): prompt {} tokens, {} new "
             "tokens per stream, batch {}, {}\n",
             args.model_dir, dtype_name(dtype), args.tp, executor->communicator_name(),
             executor->samples_on_device() ? "rank 0's device" : "the host",
             backend::kv_cache_format_name(tp_config.kv_cache_format), args.prompt_tokens, args.new_tokens,
             args.batch, sampling_name(args));
  time_streams(args, config, std::move(executor), model.spec.vocab_size);
}

void bench_model(const BenchEngineArgs& args) {
  const Device device = parse_device(args.device);
  const DType dtype = backend::choose_compute_dtype(args.dtype, device);
  std::unique_ptr<backend::Backend> backend =
      device.is_cpu() ? backend::make_cpu_backend() : backend::make_cuda_backend(device.index, dtype);
  std::unique_ptr<model::Transformer> model =
      args.random_shape.empty() ? model::load_transformer(args.model_dir, *backend)
                                : model::make_random_transformer(model::random_model_spec(args.random_shape), *backend, 1);
  model->set_kv_cache_format(kv_format(args));
  const std::string name = args.random_shape.empty() ? args.model_dir : "random " + args.random_shape;
  const int64_t vocab = model->spec().vocab_size;
  const int64_t session_len = args.prompt_tokens + args.new_tokens + 8;
  fmt::print("model {} ({} on {}, KV cache in {}): prompt {} tokens, {} new tokens per stream, batch {}, {}\n",
             name, dtype_name(backend->compute_dtype()), device.to_string(),
             backend::kv_cache_format_name(model->kv_cache_format()), args.prompt_tokens, args.new_tokens, args.batch,
             sampling_name(args));

  if (!args.skip_single) {
    engine::GenerateOptions alone;
    alone.max_new_tokens = args.new_tokens;
    const auto prompt = decode_request(0, args.prompt_tokens, vocab, 0).prompt;
    engine::generate(*model, prompt, alone);  // warm-up
    auto start = Clock::now();
    const int64_t single = static_cast<int64_t>(engine::generate(*model, prompt, alone).tokens.size());
    const double single_s = std::chrono::duration<double>(Clock::now() - start).count();
    fmt::print("  one stream (engine::generate)      {:.0f} tokens/s\n", single / single_s);
  }

  const engine::EngineConfig config = engine_config(args.batch, session_len);
  time_streams(args, config, std::make_unique<engine::CpuExecutor>(*model, config.num_blocks, config.block_size),
               vocab);
}

}  // namespace

void add_bench_engine_command(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<BenchEngineArgs>();
  CLI::App* bench = app.get_subcommand("bench");
  CLI::App* cmd = bench->add_subcommand("engine", "Engine host time per step (fake executor), or many streams on a model");
  cmd->add_option("model_dir", args->model_dir, "a model directory: streams through the engine");
  cmd->add_option("--random", args->random_shape, "a random model of a known shape instead: 100m, internlm2_5-7b, internlm2_5-20b");
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N (with a model)")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "auto, float16, bfloat16 or float32")->capture_default_str();
  cmd->add_flag("--skip-single", args->skip_single, "no one-stream baseline");
  cmd->add_option("--tp", args->tp, "tensor-parallel ranks over the GPUs from --device (a model directory)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", args->batch, "sequences decoding together")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--steps", args->steps, "decode steps (fake executor)")->capture_default_str()->check(CLI::Range(2, 1000000));
  cmd->add_option("--vocab", args->vocab, "vocabulary of the fake executor")->capture_default_str()->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--prompt-tokens", args->prompt_tokens)->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", args->temperature, "the streams' sampling (0: greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 2.0));
  cmd->add_option("--top-k", args->top_k, "0: off")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", args->top_p, "1: off")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--new-tokens", args->new_tokens, "tokens per stream (model)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--constrained", args->constrained,
                  "streams (the first K) under a structured output's constraint that allows every token (model)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--quant-policy", args->quant_policy,
                  "the KV cache: 0 (the compute dtype), 8 or 4 (8- or 4-bit codes)")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 4, 8}));
  cmd->callback([&runner, args] {
    runner = [args] {
      if (args->model_dir.empty() && args->random_shape.empty()) {
        bench_fake(*args);
      } else if (args->tp > 1) {
        bench_tp(*args);
      } else {
        bench_model(*args);
      }
      return 0;
    };
  });
}

}  // namespace tessera::cli
