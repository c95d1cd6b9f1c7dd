#include "agent/server_api.h"

#include <utility>

namespace cnlab::agent {
ServerApi::ServerApi(ServerAddress address, std::string token, std::chrono::milliseconds timeout)
    : address_(std::move(address)), token_(std::move(token)), timeout_(timeout) {}

void ServerApi::set_token(std::string token) {
  std::lock_guard lock(mutex_);
  token_ = std::move(token);
  client_.reset();
}

Result<net::Client*> ServerApi::client() {
  std::lock_guard lock(mutex_);
  if (interrupted_) return Error::of(ErrorCode::kUnavailable, "", "", "stopping");
  if (!client_) {
    auto connected = net::Client::connect({address_.url, address_.ca_file, token_, timeout_});
    if (!connected) return connected.error();
    client_ = std::move(*connected);
  }
  return client_.get();
}

void ServerApi::interrupt() {
  std::lock_guard lock(mutex_);
  interrupted_ = true;
  if (client_) client_->interrupt();
}

Result<net::ClientResponse> ServerApi::raw(const std::string& method, const std::string& target,
                                           const std::string& body, const std::map<std::string, std::string>& headers) {
  auto c = client();
  if (!c) return c.error();
  return (*c)->request(method, target, body, headers);
}

namespace {

Result<Json> json_answer(const Result<net::ClientResponse>& response, const std::string& method,
                         const std::string& target) {
  if (!response) return response.error();
  if (response->status < 200 || response->status > 299) {
    return net::error_from_response(response->status, response->body, method + " " + target);
  }
  if (response->body.empty()) return Json();
  Json parsed = Json::parse(response->body, nullptr, false);
  if (parsed.is_discarded()) {
    return Error::of(ErrorCode::kInternal, "", "", method + " " + target + ": the answer is not JSON");
  }
  return parsed;
}

}  // namespace

Result<Json> ServerApi::call(const std::string& method, const std::string& target, const std::string& body,
                             const std::map<std::string, std::string>& headers) {
  return json_answer(raw(method, target, body, headers), method, target);
}

Result<Json> ServerApi::upload(const std::string& method, const std::string& target, const std::string& body_path,
                               const std::map<std::string, std::string>& headers) {
  auto c = client();
  if (!c) return c.error();
  return json_answer((*c)->upload(method, target, body_path, headers), method, target);
}

Result<net::ClientResponse> ServerApi::download(const std::string& target, const std::string& to_path) {
  auto c = client();
  if (!c) return c.error();
  return (*c)->download(target, to_path);
}

Result<int> ServerApi::stream(const std::string& target, const std::function<bool(std::string_view)>& on_chunk) {
  auto c = client();
  if (!c) return c.error();
  return (*c)->stream("GET", target, on_chunk);
}

}  // namespace cnlab::agent
