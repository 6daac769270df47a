// A step's ForwardBatch as int32 words, and its broadcast from global rank 0
// to the ranks of other processes over their host channel (comm::
// TcpCommunicator), so a worker node runs the same step as node 0.
//
// Words: kind, then each vector as its length and its elements (token_ids,
// positions, query_start, block_tables, logit_rows), then max_blocks_per_seq
// and sliding_window (two words). Decoding checks every length against what is
// left and the batch's own consistency, so a corrupt message is an error, not
// a read out of bounds.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "comm/tcp_communicator.h"
#include "model/forward_batch.h"

namespace tessera::engine {

std::vector<int32_t> encode_step(const model::ForwardBatch& batch);
// Throws Error(kCommFailure) naming what is malformed.
model::ForwardBatch decode_step(const std::vector<int32_t>& words);

// Global rank 0: sends `batch` (null: "stop", the group is shutting down).
// Every other rank of the process that calls it takes part and drops the
// message (it has the batch already).
void send_step(comm::TcpCommunicator& link, const model::ForwardBatch* batch);
// A rank of a worker node: waits, without a deadline, for rank 0's next
// step; nullopt when rank 0 says stop. Throws Error(kCommFailure) when the
// group fails or node 0 goes away.
std::optional<model::ForwardBatch> receive_step(comm::TcpCommunicator& link);

}  // namespace tessera::engine
