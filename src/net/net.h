// The face of src/net: an asynchronous HTTP/1.1 server and a blocking client on Boost.Beast/Asio,
// TLS (OpenSSL) by default, plain HTTP only on a loopback address.
//
// The server reads requests on a few I/O threads and runs handlers on a worker pool, so a handler
// may block (on a store commit, say) without stalling other connections. A handler answers with a
// whole body or with a Stream: chunked output that the connection writes as the producer pushes
// it, for watch and log-follow streams that stay open for hours. Hundreds of streams cost buffers,
// not threads.
#pragma once

// Boost 1.74's Asio under C++20 with GCC 12 needs <utility> before its headers.
#include <utility>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "net/tls_files.h"

namespace cnlab::net {

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // decoded path without the query
  std::multimap<std::string, std::string> query;  // decoded
  std::map<std::string, std::string> headers;     // names lower-cased
  std::string body;
  // Where the route spools its body (ServerOptions::spool_dir_for): the file holding it, 0600, and
  // `body` is empty. The server removes the file once the response is sent, unless the handler
  // renamed it to keep it.
  std::string body_file = "";
  // With `body_file`, when the request declared its length: the body's SHA-256 (64 lowercase hex),
  // computed as it arrived, so that a handler checking a digest need not read GiBs back. Empty
  // otherwise.
  std::string body_sha256 = "";
  std::string remote;  // "127.0.0.1:53422"
  // With mutual TLS (ServerOptions::client_ca_file): the DNS names of the client's verified
  // certificate; empty otherwise.
  std::vector<std::string> peer_dns_names = {};

  std::string header(const std::string& lower_name) const;  // "" when absent
  std::string query_value(const std::string& name) const;   // "" when absent
  bool has_query(const std::string& name) const;
};

// Chunked output for long-lived responses. The producer (any thread) pushes; the connection writes
// in order. When the unwritten backlog passes `max_backlog_bytes` the stream is cut off: push()
// returns false from then on and the connection ends the response, so a slow reader never grows
// the server's memory without bound.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual bool push(std::string chunk) = 0;
  // Ends the response after everything pushed so far is written.
  virtual void finish() = 0;
  // True once the client has gone or the stream was cut off or finished.
  virtual bool closed() const = 0;
  // Called once (on some thread) when the stream is closed for any reason; the producer's cleanup.
  // Registered after the close, it runs at once on the caller's thread. It never runs inside
  // push() or finish(), so it may take locks the producer holds while pushing; keep it short (it
  // usually runs on an I/O thread).
  virtual void on_close(std::function<void()> callback) = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // When set, the body is this file's content (`body` is ignored), read as it is sent: for
  // downloads of many GiB. A file that cannot be read gives a 500.
  std::string body_file = "";
  // When set, the body is ignored: the status and headers are sent, then `start_stream` is called
  // with the open stream (on a worker thread) and the response is chunked.
  std::function<void(std::shared_ptr<Stream>)> start_stream;
};

using Handler = std::function<Response(const Request&)>;

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0 picks a free port
  bool tls = true;
  std::string cert_file;  // PEM chain, required with tls
  std::string key_file;   // PEM private key, required with tls
  // Mutual TLS: when set, a client must present a certificate chaining to this CA (PEM) or the
  // handshake fails; its DNS names reach handlers as Request::peer_dns_names.
  std::string client_ca_file = "";
  int io_threads = 2;
  int worker_threads = 64;
  size_t max_body_bytes = 8 << 20;    // larger bodies get 413 before the handler runs
  // When set, the body limit of one request, decided from its method, path and headers (names
  // lower-cased) once they are read, so that only some routes take large uploads; at most
  // `max_body_bytes`. A declared length over it gets 413 before any of the body is read.
  std::function<size_t(const std::string& method, const std::string& path,
                       const std::map<std::string, std::string>& headers)>
      body_limit_for;
  // When set and it names a directory for a request (from its method and path), that request's
  // body is written to a new file there as it arrives (Request::body_file), never held in memory:
  // for uploads of many GiB. The directory must exist, on the filesystem where the handler keeps
  // what it takes (a rename, not a copy).
  std::function<std::string(const std::string& method, const std::string& path)> spool_dir_for;
  // When set, called with each request's head (method, target, path, query, headers, remote and
  // peer names; no body) once its header is read, before any of its body: a Response it returns
  // (a plain `body`) is sent instead, the body is not read and the handler does not run, and the
  // connection closes. So a route that takes large uploads refuses a caller whose credential does
  // not verify before a byte of the upload is stored. Runs on an I/O thread: keep it quick.
  std::function<std::optional<Response>(const Request& head)> admit;
  size_t max_header_bytes = 16 << 10; // larger header blocks get 431/400
  size_t max_connections = 10000;
  size_t max_stream_backlog_bytes = 4 << 20;
  // A stream written to more often than this gathers what is pushed meanwhile into one write
  // (0: every push is written at once). Adds at most this much latency to a busy stream.
  std::chrono::microseconds stream_coalesce{0};
  std::chrono::seconds idle_timeout{120};  // a keep-alive connection with no request is closed
};

class Server {
 public:
  // Binds and starts serving. Refuses plain HTTP on a non-loopback address (kInvalidArgument
  // naming "--listen"), a missing or bad certificate or key (naming the file).
  static Result<std::unique_ptr<Server>> start(const ServerOptions& options, Handler handler);
  virtual ~Server() = default;
  // "https://127.0.0.1:41234": the bound address and port; a wildcard listen address
  // (0.0.0.0, ::) is reported as the loopback address.
  virtual std::string url() const = 0;
  virtual uint16_t port() const = 0;
  // Stops accepting, closes connections and streams, joins the threads. Idempotent.
  virtual void stop() = 0;
};

struct ClientOptions {
  std::string url;      // "https://host:port" or "http://127.0.0.1:port"
  std::string ca_file;  // PEM; the server's certificate must chain to it (https only)
  std::string token;    // sent as "Authorization: Bearer ..." when not empty
  std::chrono::milliseconds timeout{30000};
  // Mutual TLS: the client's own certificate and key (PEM files), presented when the server asks.
  std::string cert_file = "";
  std::string key_file = "";
  // When set, the server's certificate must carry this DNS name, whatever host the URL names (an
  // agent reached at its IP address proves it is node X by its node certificate's name).
  std::string server_name = "";
};

// The ErrorCode an HTTP status stands for (the inverse of the server's mapping; 5xx: unavailable).
ErrorCode error_code_for_status(int status);
// The Error a non-2xx answer from a CNLab server stands for: the status's code, and the field,
// value and message of its {"error": {...}} body when it has one. `what` ("GET /v1/jobs") prefixes
// the message when not empty. The server's message starts with `field "value": `; that is kept
// once (in field and value), not repeated in the message.
Error error_from_response(int status, const std::string& body, const std::string& what);

struct ClientResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// A blocking client holding one keep-alive connection (reconnecting when it drops). Not
// thread-safe: one per thread.
class Client {
 public:
  static Result<std::unique_ptr<Client>> connect(const ClientOptions& options);
  virtual ~Client() = default;
  // Transport errors are kUnavailable; any HTTP status is a value.
  virtual Result<ClientResponse> request(const std::string& method, const std::string& target,
                                         const std::string& body = "",
                                         const std::map<std::string, std::string>& headers = {}) = 0;
  // As request(), with the body read from the file `body_path` as it is sent (never all in memory).
  virtual Result<ClientResponse> upload(const std::string& method, const std::string& target,
                                        const std::string& body_path,
                                        const std::map<std::string, std::string>& headers = {}) = 0;
  // A GET whose 2xx body is written to the file `to_path` (created 0600 or truncated) as it arrives,
  // never all in memory; the answer's `body` is then empty. Any other status keeps its body in
  // memory (an error) and leaves no file.
  virtual Result<ClientResponse> download(const std::string& target, const std::string& to_path) = 0;
  // Sends a request and calls `on_chunk` with the body as it arrives (chunk boundaries as the
  // server sent them are not promised: callers split lines themselves) until the server ends the
  // response, `on_chunk` returns false, or the timeout passes with nothing received.
  virtual Result<int> stream(const std::string& method, const std::string& target,
                             const std::function<bool(std::string_view)>& on_chunk) = 0;
  // The one thread-safe call: makes a request or stream waiting in another thread return
  // kUnavailable soon, and every later call too (a client is interrupted for good: to stop a
  // thread blocked on a watch).
  virtual void interrupt() = 0;
};

}  // namespace cnlab::net
