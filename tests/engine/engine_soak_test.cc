// A bounded randomized soak: four threads submit and abort requests for about
// a second (seeded: the same choices every run, the interleaving is the
// threads'), against a fake executor that checks every step's block tables and
// now and then fails a step. Afterwards every stream has ended with a finish
// reason, each request's tokens are the fake's, and every block is back in the
// pool — with and without prefix caching.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <thread>

#include "engine/engine.h"
#include "fake_executor.h"

namespace tessera::engine {
namespace {

using testing::FakeExecutor;

constexpr int64_t kNumBlocks = 40;
constexpr int64_t kBlockSize = 4;
constexpr int32_t kVocab = 32;

struct Submitted {
  std::shared_ptr<RequestStream> stream;
  Request request;
  bool aborted = false;
};

// Checks a step's block tables: ids in range, one table entry per started
// block, and (without prefix caching) no block in two sequences' tables.
std::string check_plan(const StepPlan& plan, bool prefix_caching) {
  std::set<int32_t> seen;
  for (const ScheduledChunk& c : plan.chunks) {
    const int64_t end = c.start_position + static_cast<int64_t>(c.token_ids.size());
    if (static_cast<int64_t>(c.block_table.size()) != (end + kBlockSize - 1) / kBlockSize) {
      return "a block table does not cover its chunk";
    }
    for (int32_t b : c.block_table) {
      if (b < 0 || b >= kNumBlocks) return "a block id out of range";
      if (!seen.insert(b).second && !prefix_caching) return "a block in two tables";
    }
  }
  return {};
}

void soak(bool prefix_caching) {
  EngineConfig config;
  config.block_size = kBlockSize;
  config.num_blocks = kNumBlocks;
  config.session_len = 48;
  config.scheduler = {8, 24};
  config.enable_prefix_caching = prefix_caching;
  config.eos_ids = {2};
  auto fake = std::make_unique<FakeExecutor>(kVocab);
  std::mutex problems_mutex;
  std::vector<std::string> problems;
  std::mt19937 fault_rng(99);  // engine thread only
  fake->before_step = [&](const StepPlan& plan) {
    if (std::string p = check_plan(plan, prefix_caching); !p.empty()) {
      std::lock_guard lock(problems_mutex);
      problems.push_back(p);
    }
    if (fault_rng() % 200 == 0) throw std::runtime_error("injected fault");
  };
  Engine engine(config, std::move(fake));

  constexpr int kThreads = 4;
  const auto deadline = Clock::now() + std::chrono::milliseconds(1000);
  std::vector<std::vector<Submitted>> submitted(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1000 + t);
      auto& mine = submitted[t];
      while (Clock::now() < deadline) {
        const uint32_t action = rng() % 10;
        if (action < 6) {
          Request r;
          r.prompt.resize(1 + rng() % 30);
          // A few common prompt heads, so prefix caching has hits to share.
          const int32_t head = static_cast<int32_t>(rng() % 3);
          for (size_t i = 0; i < r.prompt.size(); ++i) {
            r.prompt[i] = i < 8 ? head + 10 : static_cast<int32_t>(rng() % kVocab);
          }
          r.max_tokens = 1 + rng() % 24;
          r.ignore_eos = rng() % 2 == 0;
          mine.push_back({engine.submit(r), r, false});
        } else if (action < 8 && !mine.empty()) {
          Submitted& s = mine[rng() % mine.size()];
          engine.abort(s.stream->id());  // maybe already finished: ignored
          s.aborted = true;
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
        }
      }
    });
  }
  for (auto& th : threads) th.join();

  // Every request must end within 10 s in all (a leak would stall some forever).
  const auto drain_deadline = Clock::now() + std::chrono::seconds(10);
  int64_t total = 0, never_ended = 0;
  std::map<FinishReason, int64_t> reasons;
  for (auto& mine : submitted) {
    for (Submitted& s : mine) {
      ++total;
      std::vector<int32_t> tokens;
      std::optional<TokenEvent> last;
      while (!last) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(drain_deadline - Clock::now());
        auto e = s.stream->next_for(std::max(left, std::chrono::milliseconds(0)));
        if (!e) break;
        if (e->has_token()) tokens.push_back(e->token);
        if (e->last()) last = e;
      }
      if (!last) {
        ++never_ended;
        continue;
      }
      ++reasons[*last->finish];
      EXPECT_LE(static_cast<int64_t>(tokens.size()), s.request.max_tokens);
      // The fake counts upwards from the last prompt token, whatever happened around it.
      for (size_t k = 0; k < tokens.size(); ++k) {
        EXPECT_EQ(tokens[k], (s.request.prompt.back() + 1 + static_cast<int32_t>(k)) % kVocab);
      }
      switch (*last->finish) {
        case FinishReason::kAbort: EXPECT_TRUE(s.aborted); break;
        case FinishReason::kError: EXPECT_EQ(last->error, "injected fault"); break;
        case FinishReason::kLength:
          EXPECT_TRUE(static_cast<int64_t>(tokens.size()) == s.request.max_tokens ||
                      static_cast<int64_t>(s.request.prompt.size() + tokens.size()) == 48);
          break;
        case FinishReason::kStop: EXPECT_EQ(tokens.back(), 2); break;
      }
    }
  }
  EXPECT_EQ(never_ended, 0) << "of " << total << " requests";
  EngineStats stats;
  for (int i = 0; i < 2000; ++i) {
    stats = engine.stats();
    if (stats.finished_requests == total) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(stats.finished_requests, total);
  EXPECT_EQ(stats.running + stats.waiting, 0);
  EXPECT_EQ(stats.kv.used_blocks, 0);
  EXPECT_EQ(stats.kv.free_blocks, kNumBlocks);
  EXPECT_TRUE(engine.healthy());
  std::lock_guard lock(problems_mutex);
  EXPECT_TRUE(problems.empty()) << problems.front();
  // The soak was meant to reach every path.
  EXPECT_GT(total, 200);
  EXPECT_GT(reasons[FinishReason::kAbort], 0);
  EXPECT_GT(reasons[FinishReason::kError], 0);
  EXPECT_GT(reasons[FinishReason::kLength], 0);
  EXPECT_GT(reasons[FinishReason::kStop], 0);
  EXPECT_GT(stats.preemptions, 0);
  if (prefix_caching) {
    EXPECT_GT(stats.kv.prefix_hit_tokens, 0);
  }
}

TEST(engineSoak, ConcurrentSubmitsAndAbortsKeepThePoolConsistent) { soak(false); }
TEST(engineSoak, ConcurrentSubmitsAndAbortsKeepThePoolConsistentWithPrefixCaching) { soak(true); }

}  // namespace
}  // namespace tessera::engine
