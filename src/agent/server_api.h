// The agent's side of the control plane's API: one blocking connection per thread, answers as
// JSON or as an Error that keeps the server's code and message.
#pragma once

#include <memory>
#include <string>

#include "common/json_reader.h"
#include "common/result.h"
#include "net/net.h"

namespace cnlab::agent {

struct ServerAddress {
  std::string url;
  std::string ca_file;
};

class ServerApi {
 public:
  ServerApi(ServerAddress address, std::string token, std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // A request whose answer must be 2xx; the body parsed as JSON (null when empty). Any other
  // status is an Error with the code the status stands for and the server's message.
  Result<Json> call(const std::string& method, const std::string& target, const std::string& body = "",
                    const std::map<std::string, std::string>& headers = {});
  // The raw answer (downloads, where the body is not JSON).
  Result<net::ClientResponse> raw(const std::string& method, const std::string& target, const std::string& body = "",
                                  const std::map<std::string, std::string>& headers = {});
  // As call(), with the body read from the file `body_path` as it is sent (archives of many GiB).
  Result<Json> upload(const std::string& method, const std::string& target, const std::string& body_path,
                      const std::map<std::string, std::string>& headers = {});
  // A GET whose 2xx body goes to the file `to_path`; see net::Client::download.
  Result<net::ClientResponse> download(const std::string& target, const std::string& to_path);
  // A streamed GET (a watch); see net::Client::stream.
  Result<int> stream(const std::string& target, const std::function<bool(std::string_view)>& on_chunk);
  // Makes a call waiting in another thread return; this object is then unusable.
  void interrupt();

  void set_token(std::string token);

 private:
  Result<net::Client*> client();

  ServerAddress address_;
  std::string token_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<net::Client> client_;
  std::mutex mutex_;  // guards client_ creation against interrupt()
  bool interrupted_ = false;
};

}  // namespace cnlab::agent
