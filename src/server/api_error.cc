#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace tessera::server {

namespace {
const char* type_of_status(unsigned status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "internal_error" : "invalid_request_error";
  }
}
}  // namespace

ApiError::ApiError(unsigned status, std::string message, std::string type, std::optional<std::string> param,
                   std::optional<std::string> code)
    : std::runtime_error(message),
      status_(status),
      message_(std::move(message)),
      type_(std::move(type)),
      param_(std::move(param)),
      code_(std::move(code)) {}

std::string ApiError::body() const {
  nlohmann::ordered_json error = {{"message", message_}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
  if (param_) error["param"] = *param_;
  if (code_) error["code"] = *code_;
  return nlohmann::ordered_json{{"error", error}}.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

ApiError bad_request(std::string message, std::optional<std::string> param, std::optional<std::string> code) {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(param), std::move(code));
}

std::string error_body(unsigned status, const std::string& message) {
  return ApiError(status, message, type_of_status(status)).body();
}

}  // namespace tessera::server
