#include "server/sse.h"

namespace tessera::server {

std::string dump_json(const nlohmann::ordered_json& data) {
  return data.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::ordered_json& data) { return "data: " + dump_json(data) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace tessera::server
