// What the communicator tests share: each rank's work on a thread of its own,
// the checks on what the ranks threw, random inputs.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace tessera::testing {

// Runs fn(communicator) on one thread per rank; each rank's exception (or null).
template <typename Comm>
std::vector<std::exception_ptr> run_ranks(std::vector<std::unique_ptr<Comm>>& comms,
                                          const std::function<void(Comm&)>& fn) {
  std::vector<std::exception_ptr> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*comms[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

inline void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
}

// The message (and hint) of a kCommFailure, or a test failure when it is something else.
inline std::string comm_failure_message(const std::exception_ptr& error) {
  if (!error) {
    ADD_FAILURE() << "expected Error(kCommFailure), got no error";
    return {};
  }
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCommFailure) << e.what();
    return e.message() + " (" + e.hint() + ")";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected Error(kCommFailure), got " << e.what();
  }
  return {};
}

inline std::vector<float> random_floats(int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace tessera::testing
