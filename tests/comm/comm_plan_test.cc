// The communicator choice from plain facts (no GPU needed): CPU ranks take
// threads; GPUs where every pair has peer access take the custom all-reduce
// unless it is disabled; anything less takes NCCL; fewer GPUs than ranks is
// refused naming the same-device switch; the one-shot / two-shot threshold.
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/comm_group.h"
#include "comm/comm_plan.h"
#include "core/error.h"

namespace tessera {
namespace {

using comm::CommKind;

std::vector<std::vector<bool>> full_matrix(int n) { return std::vector<std::vector<bool>>(n, std::vector<bool>(n, true)); }

comm::CommRequest gpus(int world, int visible) {
  comm::CommRequest r;
  r.world_size = world;
  r.on_gpu = true;
  r.visible_gpus = visible;
  r.nccl_available = true;
  r.peer_access = full_matrix(visible);
  return r;
}

ErrorKind kind_of(const comm::CommRequest& request, std::string* message = nullptr) {
  try {
    comm::choose_comm(request);
  } catch (const Error& e) {
    if (message) *message = e.message() + " | " + e.hint();
    return e.kind();
  }
  ADD_FAILURE() << "no error";
  return ErrorKind::kInternal;
}

TEST(CommPlan, CpuRanksTakeThreads) {
  comm::CommRequest r;
  r.world_size = 4;
  comm::CommPlan plan = comm::choose_comm(r);
  EXPECT_EQ(plan.kind, CommKind::kThread);
  EXPECT_TRUE(plan.devices.empty());
}

TEST(CommPlan, SeveralNodesTakeTcpForCpuRanksAndNcclForGpus) {
  comm::CommRequest cpu;
  cpu.world_size = 4;
  cpu.nnodes = 2;
  comm::CommPlan plan = comm::choose_comm(cpu);
  EXPECT_EQ(plan.kind, CommKind::kTcp) << plan.reason;
  EXPECT_NE(plan.reason.find("2 CPU rank(s) on each of 2 nodes"), std::string::npos) << plan.reason;
  // Peer access everywhere, yet NCCL: the custom all-reduce stops at the node.
  comm::CommRequest gpu = gpus(8, 4);
  gpu.nnodes = 2;
  plan = comm::choose_comm(gpu);
  EXPECT_EQ(plan.kind, CommKind::kNccl) << plan.reason;
  EXPECT_EQ(plan.devices, (std::vector<int>{0, 1, 2, 3}));  // this node's four
  std::string message;
  gpu.world_size = 16;  // eight per node, four visible
  EXPECT_EQ(kind_of(gpu, &message), ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find("runs 8 ranks on each node, but 4 GPU(s)"), std::string::npos) << message;
  gpu.world_size = 5;  // does not split over two nodes
  EXPECT_EQ(kind_of(gpu, &message), ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find("does not split over --nnodes 2"), std::string::npos) << message;
  gpu.world_size = 4;
  gpu.nccl_available = false;
  EXPECT_EQ(kind_of(gpu, &message), ErrorKind::kUnsupported);
  EXPECT_NE(message.find("needs NCCL"), std::string::npos) << message;
}

TEST(CommPlan, EveryPairWithPeerAccessTakesCustom) {
  comm::CommPlan plan = comm::choose_comm(gpus(4, 8));
  EXPECT_EQ(plan.kind, CommKind::kCustom) << plan.reason;
  EXPECT_EQ(plan.devices, (std::vector<int>{0, 1, 2, 3}));
}

TEST(CommPlan, OneMissingPairTakesNccl) {
  comm::CommRequest r = gpus(4, 4);
  r.peer_access[3][1] = false;  // one direction of one pair is enough to refuse
  comm::CommPlan plan = comm::choose_comm(r);
  EXPECT_EQ(plan.kind, CommKind::kNccl);
  EXPECT_NE(plan.reason.find("peer access"), std::string::npos) << plan.reason;
  // A pair outside the ranks' devices does not matter.
  r = gpus(2, 4);
  r.peer_access[3][2] = false;
  EXPECT_EQ(comm::choose_comm(r).kind, CommKind::kCustom);
  // An unknown matrix (no driver) is no peer access.
  r.peer_access.clear();
  EXPECT_EQ(comm::choose_comm(r).kind, CommKind::kNccl);
}

TEST(CommPlan, PeerAccessOffByTheSwitchOrNcclP2pDisableLeavesEachDeviceItselfAndTakesNccl) {
  comm::CommRequest r = gpus(2, 3);
  const auto full = r.peer_access;
  EXPECT_EQ(comm::peer_access_as_configured(full, nullptr), full);
  EXPECT_EQ(comm::peer_access_as_configured(full, "1"), full);
  EXPECT_EQ(comm::peer_access_as_configured(full, ""), full);
  for (const char* off : {"0", "off", "FALSE", "no"}) {
    r.peer_access = comm::peer_access_as_configured(full, off);
    ASSERT_EQ(r.peer_access.size(), 3u);
    for (size_t a = 0; a < 3; ++a) {
      for (size_t b = 0; b < 3; ++b) EXPECT_EQ(r.peer_access[a][b], a == b) << off << " " << a << "," << b;
    }
    comm::CommPlan plan = comm::choose_comm(r);
    EXPECT_EQ(plan.kind, CommKind::kNccl) << off;
    EXPECT_NE(plan.reason.find("peer access"), std::string::npos) << plan.reason;
  }
  // NCCL_P2P_DISABLE decides where the switch is unset; the switch wins.
  const auto diagonal = comm::peer_access_as_configured(full, "0");
  EXPECT_EQ(comm::peer_access_as_configured(full, nullptr, "1"), diagonal);
  EXPECT_EQ(comm::peer_access_as_configured(full, "", "1"), diagonal);
  EXPECT_EQ(comm::peer_access_as_configured(full, nullptr, "0"), full);
  EXPECT_EQ(comm::peer_access_as_configured(full, "1", "1"), full);
  EXPECT_EQ(comm::peer_access_as_configured(full, "0", "0"), diagonal);
  try {
    comm::peer_access_as_configured(full, "sometimes");
    ADD_FAILURE() << "a malformed switch was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("TESSERA_PEER_ACCESS"), std::string::npos) << e.what();
  }
}

TEST(CommPlan, DisableCustomAllReduceForcesNccl) {
  comm::CommRequest r = gpus(2, 2);
  r.disable_custom_all_reduce = true;
  comm::CommPlan plan = comm::choose_comm(r);
  EXPECT_EQ(plan.kind, CommKind::kNccl);
  EXPECT_NE(plan.reason.find("--disable-custom-all-reduce"), std::string::npos) << plan.reason;
}

TEST(CommPlan, RanksStartAtTheChosenDevice) {
  comm::CommRequest r = gpus(2, 4);
  r.first_device = 2;
  EXPECT_EQ(comm::choose_comm(r).devices, (std::vector<int>{2, 3}));
  r.first_device = 3;
  std::string message;
  EXPECT_EQ(kind_of(r, &message), ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find("cuda:3"), std::string::npos) << message;
}

TEST(CommPlan, FewerGpusThanRanksIsRefusedNamingTheSameDeviceSwitch) {
  std::string message;
  EXPECT_EQ(kind_of(gpus(4, 2), &message), ErrorKind::kInvalidArgument);
  EXPECT_NE(message.find("--tp 4"), std::string::npos) << message;
  EXPECT_NE(message.find("TESSERA_TP_SAME_DEVICE=1"), std::string::npos) << message;
  EXPECT_NE(message.find("--tp 1 or 2"), std::string::npos) << message;
  EXPECT_EQ(kind_of(gpus(2, 0), &message), ErrorKind::kInvalidArgument);
}

TEST(CommPlan, SameDevicePutsEveryRankOnOneGpu) {
  comm::CommRequest r = gpus(4, 1);
  r.same_device = true;
  comm::CommPlan plan = comm::choose_comm(r);
  EXPECT_EQ(plan.kind, CommKind::kSameDevice);
  EXPECT_EQ(plan.devices, (std::vector<int>{0, 0, 0, 0}));
  r.first_device = 0;
  r.visible_gpus = 2;
  r.disable_custom_all_reduce = true;  // NCCL cannot run two ranks on one device: still same-device
  plan = comm::choose_comm(r);
  EXPECT_EQ(plan.kind, CommKind::kSameDevice);
  EXPECT_NE(plan.reason.find("does not apply"), std::string::npos) << plan.reason;
}

// Ranks sharing a GPU share its memory: what each rank's load must leave for the others.
TEST(CommPlan, RanksOnADeviceCountTheRanksThatShareIt) {
  comm::CommRequest r = gpus(4, 1);
  r.same_device = true;
  const comm::CommPlan same = comm::choose_comm(r);
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(comm::ranks_on_device_of(same, rank), 4) << rank;
  const comm::CommPlan own = comm::choose_comm(gpus(4, 4));
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(comm::ranks_on_device_of(own, rank), 1) << rank;
  comm::CommPlan mixed;
  mixed.devices = {0, 1, 1, 2};
  EXPECT_EQ(comm::ranks_on_device_of(mixed, 0), 1);
  EXPECT_EQ(comm::ranks_on_device_of(mixed, 2), 2);
  EXPECT_EQ(comm::ranks_on_device_of(comm::CommPlan{}, 0), 1) << "CPU ranks";
}

TEST(CommPlan, NoNcclAndNoPeerAccessIsUnsupported) {
  comm::CommRequest r = gpus(2, 2);
  r.nccl_available = false;
  EXPECT_EQ(comm::choose_comm(r).kind, CommKind::kCustom);  // peers alone carry every collective
  r.peer_access[0][1] = false;
  std::string message;
  EXPECT_EQ(kind_of(r, &message), ErrorKind::kUnsupported);
  EXPECT_NE(message.find("NCCL"), std::string::npos) << message;
}

TEST(CommPlan, OneShotBelowTheThresholdTwoShotAbove) {
  using comm::AllReduceAlgorithm;
  EXPECT_EQ(comm::pick_all_reduce(comm::kOneShotMaxBytes - 2, 4), AllReduceAlgorithm::kOneShot);
  EXPECT_EQ(comm::pick_all_reduce(comm::kOneShotMaxBytes, 4), AllReduceAlgorithm::kTwoShot);
  EXPECT_EQ(comm::pick_all_reduce(comm::kCustomMaxBytes, 8), AllReduceAlgorithm::kTwoShot);
  EXPECT_EQ(comm::pick_all_reduce(comm::kCustomMaxBytes, 2), AllReduceAlgorithm::kOneShot);  // two ranks: one step
  EXPECT_EQ(comm::pick_all_reduce(64, 4, AllReduceAlgorithm::kTwoShot), AllReduceAlgorithm::kTwoShot);
}

TEST(CommPlan, SameDeviceSwitchParsing) {
  EXPECT_TRUE(comm::parse_same_device("1"));
  EXPECT_TRUE(comm::parse_same_device("TRUE"));
  EXPECT_FALSE(comm::parse_same_device(""));
  EXPECT_FALSE(comm::parse_same_device("0"));
  EXPECT_FALSE(comm::parse_same_device("off"));
  try {
    comm::parse_same_device("2");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("TESSERA_TP_SAME_DEVICE=2"), std::string::npos);
  }
  setenv("TESSERA_TP_SAME_DEVICE", "yes", 1);
  EXPECT_TRUE(comm::same_device_from_env());
  unsetenv("TESSERA_TP_SAME_DEVICE");
  EXPECT_FALSE(comm::same_device_from_env());
}

TEST(CommPlan, AThreadGroupHandsEachRankItsCommunicatorOnce) {
  comm::CommPlan plan;
  auto group = comm::make_comm_group(plan, 2);
  EXPECT_EQ(group->kind(), CommKind::kThread);
  auto first = group->make_rank(0, nullptr);
  EXPECT_EQ(first->rank(), 0);
  EXPECT_EQ(first->backend_name(), "thread");
  EXPECT_THROW(group->make_rank(0, nullptr), Error);
  // A rank that cannot start fails the group: its peers' collectives fail at once.
  group->abort(1, "no device");
  Tensor t = Tensor::from_f32({1.0f}, {1});
  try {
    first->all_reduce_sum(t);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCommFailure);
    EXPECT_NE(e.message().find("no device"), std::string::npos) << e.message();
  }
}

TEST(CommPlan, GpuGroupsInABuildWithoutCudaAreUnsupported) {
#if !defined(TESSERA_WITH_CUDA)
  comm::CommPlan plan{CommKind::kSameDevice, {0, 0}, ""};
  try {
    comm::make_comm_group(plan, 2);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  }
#else
  GTEST_SKIP() << "this build has CUDA";
#endif
}

}  // namespace
}  // namespace tessera
