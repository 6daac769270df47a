#include "cli/bench_decode_table.h"

#include <fmt/format.h>

#include <chrono>
#include <string>

#include "backend/backend.h"
#include "cli/bench_limits.h"
#include "core/device.h"
#include "core/error.h"
#include "model/random_weights.h"
#include "model/transformer.h"

namespace tessera::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Bytes one decode step reads for the weights: the linear layers (16-bit, or
// packed 4-bit + f16 scales + u8 zeros) and the 16-bit LM head.
double weight_bytes_per_step(const model::ModelSpec& s, double element_bytes, int64_t awq_group) {
  const double linear = static_cast<double>(s.num_layers * s.linear_params_per_layer());
  const double per_weight = awq_group > 0 ? 0.5 + 3.0 / static_cast<double>(awq_group) : element_bytes;
  return linear * per_weight + element_bytes * static_cast<double>(s.vocab_size * s.hidden_size);
}

struct Row {
  std::string format;
  int64_t batch = 0;
  double step_seconds = 0;
  double host_seconds = -1;  // of a replayed step, before its graph runs; -1 without graphs
  double bytes = 0;
};

// `batch` sequences: one prefill of every prompt, then decode steps of one
// token each (fixed ids: the tokens sampled are not needed), timed after two
// warm-up steps. Every step is sampled as in serving: greedily on the device
// where the model samples there (only the ids come back), else the logits
// come back to the host.
Row time_decode(model::Transformer& model, int64_t batch, const DecodeTableArgs& args) {
  const model::ModelSpec& spec = model.spec();
  const int64_t block_size = 64, steps = args.decode_tokens + 2;
  const int64_t blocks_per_seq = (args.prompt_tokens + steps + block_size) / block_size;
  backend::PagedKvCache cache = model.allocate_cache(batch * blocks_per_seq, block_size);
  auto make_batch = [&](int64_t first_position, int64_t tokens) {
    model::ForwardBatch fb;
    fb.attention.max_blocks_per_seq = static_cast<int32_t>(blocks_per_seq);
    fb.attention.query_start.push_back(0);
    for (int64_t s = 0; s < batch; ++s) {
      for (int64_t t = 0; t < tokens; ++t) {
        fb.token_ids.push_back(static_cast<int32_t>((s * 131 + first_position + t) * 7 % spec.vocab_size));
        fb.attention.positions.push_back(static_cast<int32_t>(first_position + t));
      }
      fb.attention.query_start.push_back(static_cast<int32_t>(fb.token_ids.size()));
      for (int64_t b = 0; b < blocks_per_seq; ++b) fb.attention.block_tables.push_back(static_cast<int32_t>(s * blocks_per_seq + b));
      fb.logit_rows.push_back(static_cast<int32_t>(fb.token_ids.size() - 1));
    }
    return fb;
  };
  backend::SamplingBatch greedy;
  greedy.rows.resize(static_cast<size_t>(batch));  // temperature 0: the argmax
  auto step = [&](const model::ForwardBatch& fb) {
    if (model.samples_on_device()) model.forward_sample(fb, cache, greedy);
    else model.forward(fb, cache);
  };
  step(make_batch(0, args.prompt_tokens));
  int64_t position = args.prompt_tokens;
  for (int i = 0; i < 2; ++i) step(make_batch(position++, 1));  // warm-up
  const int64_t replays_before = model.graph_replays();
  const double host_before = model.graph_replay_host_seconds();
  auto start = Clock::now();
  for (int64_t i = 0; i < args.decode_tokens; ++i) step(make_batch(position++, 1));
  Row row;
  row.batch = batch;
  row.step_seconds = std::chrono::duration<double>(Clock::now() - start).count() / args.decode_tokens;
  if (const int64_t replays = model.graph_replays() - replays_before; replays > 0) {
    row.host_seconds = (model.graph_replay_host_seconds() - host_before) / static_cast<double>(replays);
  }
  const double element_bytes = static_cast<double>(dtype_bytes(model.backend().compute_dtype(), 1));
  const double kv = element_bytes * 2 * spec.num_layers * spec.kv_size() * batch *
                    (args.prompt_tokens + args.decode_tokens / 2.0 + 2);
  // A backend without 4-bit kernels holds the dequantized weights and reads those.
  const int64_t group = model.backend().supports_quantized_linear() ? spec.quantization.group_size : 0;
  row.bytes = weight_bytes_per_step(spec, element_bytes, group) + kv;
  return row;
}

}  // namespace

int run_decode_table(const DecodeTableArgs& args) {
  if (args.random_shape.empty()) {
    throw Error(ErrorKind::kInvalidArgument, "bench decode with --quant or --batch runs a random model",
                "e.g. tessera bench decode --random internlm2_5-7b --device cuda --quant none awq --batch 1 16 64");
  }
  const Device device = parse_device(args.device);
  const DType dtype = backend::choose_compute_dtype(args.dtype, device);
  std::unique_ptr<backend::Backend> backend =
      device.is_cpu() ? backend::make_cpu_backend() : backend::make_cuda_backend(device.index, dtype);
  const double bandwidth = measure_copy_bandwidth(*backend);
  const model::ModelSpec spec = model::random_model_spec(args.random_shape);
  fmt::print("model           random {} on {}, activations {}\n", args.random_shape, device.to_string(),
             dtype_name(backend->compute_dtype()));
  fmt::print("copy bandwidth  {:.1f} GB/s (read + write, measured now)\n", bandwidth / 1e9);
  fmt::print("host us         of a step replayed by a device graph: staging its inputs and launching the graph, "
             "while the device waits\n");
  fmt::print("bytes/step      the linear weights (awq: packed 4-bit + f16 scales + u8 zeros per group of 128 where the "
             "backend keeps them packed), the LM head and the KV cache read\n\n");
  std::vector<Row> rows;
  for (const std::string& format : args.formats) {
    if (format != "none" && format != "awq") {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("--quant {}: unknown", format), "use none or awq");
    }
    std::unique_ptr<model::Transformer> model =
        model::make_random_transformer(spec, *backend, 1, format == "awq" ? 128 : 0);
    for (int64_t batch : args.batches) {
      Row row = time_decode(*model, batch, args);
      row.format = format;
      rows.push_back(row);
    }
  }
  fmt::print("{:<8} {:>6} {:>12} {:>10} {:>12} {:>12} {:>14} {:>12}\n", "weights", "batch", "tokens/s", "ms/step",
             "MB/step", "of limit", "vs first", "host us");
  for (const Row& row : rows) {
    double baseline = 0;
    for (const Row& other : rows) {
      if (other.batch == row.batch) {
        baseline = other.step_seconds;
        break;
      }
    }
    const double limit = row.bytes / bandwidth;
    const std::string host = row.host_seconds < 0 ? "-" : fmt::format("{:.1f}", row.host_seconds * 1e6);
    fmt::print("{:<8} {:>6} {:>12.1f} {:>10.3f} {:>12.1f} {:>11.1f}% {:>13.2f}x {:>12}\n", row.format, row.batch,
               row.batch / row.step_seconds, row.step_seconds * 1e3, row.bytes / 1e6, 100.0 * limit / row.step_seconds,
               baseline / row.step_seconds, host);
  }
  return 0;
}

}  // namespace tessera::cli
