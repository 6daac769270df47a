// ApiError: a request the server refuses, in OpenAI's error shape
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// with the HTTP status that goes with it. Handlers throw it; the router turns
// it into the response, so a client's mistake never becomes a 500.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

namespace tessera::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(unsigned status, std::string message, std::string type = "invalid_request_error",
           std::optional<std::string> param = std::nullopt, std::optional<std::string> code = std::nullopt);

  unsigned status() const { return status_; }
  const std::string& message() const { return message_; }
  const std::string& type() const { return type_; }
  const std::optional<std::string>& param() const { return param_; }
  const std::optional<std::string>& code() const { return code_; }

  // The JSON body (one line).
  std::string body() const;

 private:
  unsigned status_;
  std::string message_;
  std::string type_;
  std::optional<std::string> param_;
  std::optional<std::string> code_;
};

// 400 invalid_request_error naming the offending field.
ApiError bad_request(std::string message, std::optional<std::string> param = std::nullopt,
                     std::optional<std::string> code = std::nullopt);

// The error body of `status` with `message`, for errors raised below the API
// (a malformed HTTP request, a body over the limit).
std::string error_body(unsigned status, const std::string& message);

}  // namespace tessera::server
