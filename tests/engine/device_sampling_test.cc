// The engine's side of sampling on a device (StepPlan::device_sampling): an
// executor that samples on its device gets one row per sampling chunk, each
// with the uniform number its request's own generator draws — one per
// sampled token, none for a greedy one — and the penalties and min_tokens
// masks as the host Sampler's edits; a step with a logprobs request stays
// on host logits and draws nothing. The fake device here picks
// floor(uniform · vocab) at temperature > 0 and the fake logits' argmax past
// masked ids at 0, so the tokens show which numbers it was given; a row
// with allowed ids takes the first of them from the argmax on.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "even_ids_constraint.h"
#include "fake_executor.h"

namespace tessera::engine {
namespace {

using testing::FakeExecutor;

class DeviceExecutor : public FakeExecutor {
 public:
  bool samples_on_device() const override { return true; }
  StepOutput execute(const StepPlan& plan) override {
    if (!plan.device_sampling || plan.num_sampling() == 0) {
      if (plan.num_sampling() > 0) ++host_steps;
      return FakeExecutor::execute(plan);
    }
    batches.push_back(*plan.device_sampling);
    backend::SamplingBatch& seen = batches.back();
    if (seen.make_allowed) {  // as a device sampler does, once the forward is under way
      seen.make_allowed(seen.allowed);
      seen.make_allowed = nullptr;
    }
    StepOutput out;
    int32_t row = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      if (!c.sample) continue;
      const backend::SamplingRow& r = plan.device_sampling->rows.at(row);
      if (r.temperature > 0.0f) {
        out.token_ids.push_back(static_cast<int32_t>(std::floor(r.uniform * static_cast<double>(vocab_size()))));
      } else {
        int32_t token = (c.token_ids.back() + 1) % vocab_size();  // the fake logits' argmax
        for (const backend::LogitEdit& e : plan.device_sampling->edits) {
          if (e.row == row && e.id == token && e.masked != 0) token = (c.token_ids.back() + 2) % vocab_size();
        }
        out.token_ids.push_back(first_allowed(seen, row, token));
      }
      ++row;
    }
    return out;
  }
  std::vector<backend::SamplingBatch> batches;
  int host_steps = 0;

 private:
  // The first id from `token` on (wrapping) that row's allowed bits keep; `token` without bits.
  int32_t first_allowed(const backend::SamplingBatch& b, int32_t row, int32_t token) const {
    const size_t words = (static_cast<size_t>(vocab_size()) + 63) / 64;
    for (size_t k = 0; k < b.allowed_rows.size(); ++k) {
      if (b.allowed_rows[k] != row) continue;
      for (int32_t step = 0; step < vocab_size(); ++step) {
        const int32_t id = (token + step) % vocab_size();
        if (b.allowed[k * words + static_cast<size_t>(id) / 64] >> (id % 64) & 1) return id;
      }
    }
    return token;
  }
};

EngineConfig config() {
  EngineConfig c;
  c.block_size = 4;
  c.num_blocks = 64;
  c.session_len = 64;
  c.scheduler = {8, 16};
  c.eos_ids = {2};
  return c;
}

Request request(float temperature, uint64_t seed) {
  Request r;
  r.prompt = {5, 6};
  r.max_tokens = 6;
  r.ignore_eos = true;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

// What the device executor was given (copied out: the engine owns it).
struct Seen {
  std::vector<backend::SamplingBatch> batches;
  int host_steps = 0;
  int64_t vocab = 0;
};

// Every stream's tokens, the requests submitted together.
std::vector<std::vector<int32_t>> run(const std::vector<Request>& requests, Seen* seen) {
  auto executor = std::make_unique<DeviceExecutor>();
  DeviceExecutor* device = executor.get();
  Engine engine(config(), std::move(executor));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& r : requests) streams.push_back(engine.submit(r));
  std::vector<std::vector<int32_t>> all;
  for (auto& s : streams) {
    all.emplace_back();
    while (true) {
      TokenEvent e = s->next();
      if (e.has_token()) all.back().push_back(e.token);
      if (e.last()) break;
    }
  }
  engine.stop();  // the engine thread is done with the executor
  seen->batches = device->batches;
  seen->host_steps = device->host_steps;
  seen->vocab = device->vocab_size();
  return all;
}

// What the fake device makes of a request's generator: one number a token.
std::vector<int32_t> expected_draws(const SamplingParams& params, int count, int64_t vocab) {
  Sampler reference(params);
  std::vector<int32_t> tokens;
  for (int i = 0; i < count; ++i) {
    tokens.push_back(static_cast<int32_t>(std::floor(reference.next_uniform() * static_cast<double>(vocab))));
  }
  return tokens;
}

TEST(DeviceSampling, EachSampledTokenIsOneNumberOfItsOwnGenerator) {
  Seen seen;
  const std::vector<Request> requests = {request(0.9f, 7), request(0.0f, 0), request(1.2f, 8)};
  const auto tokens = run(requests, &seen);
  const int64_t vocab = seen.vocab;
  EXPECT_EQ(tokens[0], expected_draws(requests[0].sampling, 6, vocab));
  EXPECT_EQ(tokens[1], (std::vector<int32_t>{7, 8, 9, 10, 11, 12}));  // greedy: the fake logits' tokens
  EXPECT_EQ(tokens[2], expected_draws(requests[2].sampling, 6, vocab));
  EXPECT_NE(tokens[0], tokens[2]);
  EXPECT_EQ(seen.host_steps, 0);
  for (const backend::SamplingBatch& b : seen.batches) {
    for (const backend::SamplingRow& r : b.rows) {
      if (r.temperature == 0.0f) {
        EXPECT_EQ(r.uniform, 0.0);
      }
    }
  }
}

TEST(DeviceSampling, PenaltiesAndMasksArriveAsTheSamplersEdits) {
  Seen seen;
  Request penalised = request(0.8f, 3);
  penalised.sampling.repetition_penalty = 1.3f;
  penalised.sampling.frequency_penalty = 0.5f;
  penalised.sampling.logit_bias = {{9, 2.0f}};
  Request masked = request(0.0f, 0);
  masked.ignore_eos = false;
  masked.min_tokens = 2;
  masked.prompt = {1};  // the argmax is eos (2) at first: masked, so 3
  const auto tokens = run({penalised, masked}, &seen);
  ASSERT_FALSE(seen.batches.empty());
  // The first row of each request (known by its temperature: the engine
  // thread may take the second submission a step later than the first) and
  // its edits: the penalised request's are logit_edits of its prompt, the
  // masked request's mask eos.
  auto first_edits = [&](bool sampled) {
    for (const backend::SamplingBatch& b : seen.batches) {
      for (size_t row = 0; row < b.rows.size(); ++row) {
        if ((b.rows[row].temperature > 0.0f) != sampled) continue;
        std::vector<backend::LogitEdit> edits;
        for (const backend::LogitEdit& e : b.edits) {
          if (e.row == static_cast<int32_t>(row)) edits.push_back(e);
        }
        return edits;
      }
    }
    ADD_FAILURE() << "no row of the " << (sampled ? "penalised" : "masked") << " request";
    return std::vector<backend::LogitEdit>{};
  };
  std::vector<backend::LogitEdit> want =
      logit_edits(penalised.sampling, SampleInputs{penalised.prompt, {}, {}}, seen.vocab, 0);
  const std::vector<backend::LogitEdit> got = first_edits(true);
  bool eos_masked = false;
  for (const backend::LogitEdit& e : first_edits(false)) {
    if (e.id == 2 && e.masked != 0) eos_masked = true;
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, want[i].id);
    EXPECT_EQ(got[i].repetition_penalty, want[i].repetition_penalty);
    EXPECT_EQ(got[i].penalty, want[i].penalty);
    EXPECT_EQ(got[i].bias, want[i].bias);
  }
  EXPECT_TRUE(eos_masked);
  ASSERT_GE(tokens[1].size(), 1u);
  EXPECT_EQ(tokens[1][0], 3);  // eos masked before min_tokens
}

TEST(DeviceSampling, ALogprobsRequestKeepsItsStepsOnHostLogitsAndDrawsOnlyThere) {
  Seen seen;
  Request with_logprobs = request(0.0f, 0);
  with_logprobs.logprobs = true;
  with_logprobs.max_tokens = 3;
  const Request sampled = request(0.9f, 7);
  const auto tokens = run({with_logprobs, sampled}, &seen);
  EXPECT_GE(seen.host_steps, 3);
  EXPECT_EQ(tokens[0], (std::vector<int32_t>{7, 8, 9}));
  // The sampled request's first tokens came from the host Sampler (one number
  // each), its last `on_device` from the device at the generator's next numbers.
  ASSERT_EQ(tokens[1].size(), 6u);
  int on_device = 0;
  for (const backend::SamplingBatch& b : seen.batches) {
    for (const backend::SamplingRow& r : b.rows) on_device += r.temperature > 0.0f ? 1 : 0;
  }
  EXPECT_GE(on_device, 3);
  const std::vector<int32_t> draws = expected_draws(sampled.sampling, 6, seen.vocab);
  for (int i = 6 - on_device; i < 6; ++i) EXPECT_EQ(tokens[1][i], draws[i]) << "token " << i;
}

TEST(DeviceSampling, AConstraintsAllowedIdsTravelWithItsRowAndItTakesTheDevicesTokens) {
  Seen seen;
  Request constrained = request(0.0f, 0);  // prompt {5, 6}: the fake argmax is odd, 7, then 9, ...
  constrained.ignore_eos = false;
  constrained.constraint = std::make_shared<testing::EvenIds>(3, 4);
  const Request free = request(0.9f, 7);
  const auto tokens = run({constrained, free}, &seen);
  EXPECT_EQ(seen.host_steps, 0);  // the constraint no longer keeps the steps on host logits
  EXPECT_EQ(tokens[0], (std::vector<int32_t>{8, 10, 12, 14}));  // done after four: the output stops
  EXPECT_EQ(tokens[1], expected_draws(free.sampling, 6, seen.vocab));
  int masked_rows = 0, eos_allowed = 0;
  const size_t words = (static_cast<size_t>(seen.vocab) + 63) / 64;
  for (const backend::SamplingBatch& b : seen.batches) {
    ASSERT_EQ(b.allowed.size(), b.allowed_rows.size() * words);
    for (size_t k = 0; k < b.allowed_rows.size(); ++k) {
      ++masked_rows;
      EXPECT_EQ(b.rows.at(static_cast<size_t>(b.allowed_rows[k])).temperature, 0.0f);  // the constrained row's
      EXPECT_EQ(b.allowed[k * words] & 0x18, uint64_t{0x10}) << "3 masked, 4 allowed";
      eos_allowed += (b.allowed[k * words] >> 2 & 1) != 0 ? 1 : 0;
    }
  }
  EXPECT_EQ(masked_rows, 4);
  EXPECT_EQ(eos_allowed, 1);  // where the output may end: after three
}

}  // namespace
}  // namespace tessera::engine
