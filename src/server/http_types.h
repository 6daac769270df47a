// The HTTP exchange as the API layer sees it: a parsed request in, a response
// out. A response that needs the engine is a PendingResponse, which the
// connection polls on its own strand whenever the producer wakes it, so no
// I/O thread ever blocks waiting for tokens.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera::server {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // the target without the query string
  std::string query;                           // after '?', maybe empty
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string remote;                          // the peer's address, for logs

  // The header's value, or "" when absent. `name` in lower case.
  const std::string& header(const std::string& name) const;
};

class PendingResponse;

struct HttpResponse {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers (CORS, Allow, ...)
  // Set when the answer comes later; status, content type and body above are
  // then ignored except for a streaming response's extra headers.
  std::shared_ptr<PendingResponse> pending;
};

// An answer produced over time. The connection calls start() once, then
// poll() on its strand after start and after every wake(), until poll returns
// true; cancel() when the client goes away (or the server stops) first.
class PendingResponse {
 public:
  virtual ~PendingResponse() = default;

  // True: a 200 text/event-stream head goes out at once and poll() appends
  // body bytes (each poll's bytes are sent and flushed as one chunk).
  // False: poll() fills `response` when it returns true.
  virtual bool streaming() const = 0;
  // `wake` is thread-safe and cheap; call it whenever poll() has more to give.
  virtual void start(std::function<void()> wake) = 0;
  // Returns true when the answer is complete.
  virtual bool poll(std::string& chunk, HttpResponse& response) = 0;
  virtual void cancel() noexcept = 0;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

}  // namespace tessera::server
