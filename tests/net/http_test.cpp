// The HTTP server and client end to end, over TLS from a CA made with tls_files, on port 0.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <openssl/evp.h>

#include "net/net.h"

namespace cnlab::net {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Polls `done` until it holds or `limit` passes.
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cnlab-net-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A CA and a server certificate for localhost and 127.0.0.1 (or the names given).
struct Pki {
  TempDir dir;
  std::string ca_cert = dir.file("ca.crt");
  std::string ca_key = dir.file("ca.key");
  std::string cert = dir.file("server.crt");
  std::string key = dir.file("server.key");

  explicit Pki(std::vector<std::string> dns = {"localhost"}, std::vector<std::string> ips = {"127.0.0.1"}) {
    auto ca = create_ca(ca_cert, ca_key, "cnlab test CA", 30);
    EXPECT_TRUE(ca) << ca.error().to_string();
    auto server = issue_server_cert(ca_cert, ca_key, cert, key, dns, ips, 30);
    EXPECT_TRUE(server) << server.error().to_string();
  }
};

std::unique_ptr<Server> start_tls(const Pki& pki, Handler handler, ServerOptions options = {}) {
  options.cert_file = pki.cert;
  options.key_file = pki.key;
  auto server = Server::start(options, std::move(handler));
  EXPECT_TRUE(server) << server.error().to_string();
  return server ? std::move(*server) : nullptr;
}

std::unique_ptr<Server> start_plain(Handler handler, ServerOptions options = {}) {
  options.tls = false;
  auto server = Server::start(options, std::move(handler));
  EXPECT_TRUE(server) << server.error().to_string();
  return server ? std::move(*server) : nullptr;
}

std::unique_ptr<Client> connect(const Server& server, const Pki* pki, std::string token = "") {
  auto client = Client::connect({.url = server.url(), .ca_file = pki ? pki->ca_cert : "", .token = token,
                                 .timeout = 10s});
  EXPECT_TRUE(client) << client.error().to_string();
  return client ? std::move(*client) : nullptr;
}

Response text(std::string body) {
  Response response;
  response.content_type = "text/plain";
  response.body = std::move(body);
  return response;
}

// A plain TCP connection for sending what no well-behaved client would.
class RawSocket {
 public:
  explicit RawSocket(uint16_t port, int receive_buffer = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (receive_buffer > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
    timeval timeout{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }

  bool send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // What arrives until `marker` has (or the server closes, or 10 s of silence).
  std::string read_until(std::string_view marker) {
    std::string out;
    char buffer[4096];
    while (out.find(marker) == std::string::npos) {
      ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) return out;
      out.append(buffer, static_cast<size_t>(n));
    }
    return out;
  }

  // Everything until the server closes (or 10 s of silence).
  std::string read_all() {
    std::string out;
    char buffer[4096];
    for (;;) {
      ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) return out;
      out.append(buffer, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// What a streaming handler hands the test: the open streams by index, and how many have closed.
struct StreamProbe {
  std::mutex mu;
  std::map<int, std::shared_ptr<Stream>> streams;
  std::atomic<int> closed{0};

  Response handle(const Request& request) {
    int index = request.has_query("i") ? std::stoi(request.query_value("i")) : 0;
    Response response;
    response.content_type = "application/x-ndjson";
    response.start_stream = [this, index](std::shared_ptr<Stream> stream) {
      stream->on_close([this] { ++closed; });
      std::lock_guard lock(mu);
      streams[index] = std::move(stream);
    };
    return response;
  }

  std::shared_ptr<Stream> stream(int index) {
    std::shared_ptr<Stream> found;
    wait_until([&] {
      std::lock_guard lock(mu);
      auto it = streams.find(index);
      if (it != streams.end()) found = it->second;
      return found != nullptr;
    });
    return found;
  }

  size_t count() {
    std::lock_guard lock(mu);
    return streams.size();
  }
};

// What a streaming client has received so far, readable from the test thread.
struct Received {
  std::mutex mu;
  std::string text;
  void add(std::string_view chunk) {
    std::lock_guard lock(mu);
    text.append(chunk);
  }
  std::string get() {
    std::lock_guard lock(mu);
    return text;
  }
};

TEST(TlsFiles, WritesCaAndServerCertificateWithOwnerOnlyPrivateKeys) {
  Pki pki;
  for (const auto& path : {pki.ca_cert, pki.cert}) EXPECT_TRUE(std::filesystem::exists(path)) << path;
  for (const auto& path : {pki.ca_key, pki.key}) {
    struct stat info {};
    ASSERT_EQ(::stat(path.c_str(), &info), 0) << path;
    EXPECT_EQ(info.st_mode & 0777, 0600u) << path;
  }
}

TEST(TlsFiles, RefusesAServerCertificateWithoutNamesOrWithABadAddress) {
  Pki pki;
  EXPECT_FALSE(issue_server_cert(pki.ca_cert, pki.ca_key, pki.dir.file("a.crt"), pki.dir.file("a.key"), {}, {}, 30));
  auto bad_ip = issue_server_cert(pki.ca_cert, pki.ca_key, pki.dir.file("a.crt"), pki.dir.file("a.key"), {},
                                  {"300.1.1.1"}, 30);
  ASSERT_FALSE(bad_ip);
  EXPECT_THAT(bad_ip.error().to_string(), HasSubstr("300.1.1.1"));
}

// A node certificate for `node` from `pki`'s CA, written beside it: {certificate, key}.
std::pair<std::string, std::string> node_cert(const Pki& pki, const std::string& node, const std::string& asked = "") {
  auto made = create_key_and_request(asked.empty() ? node : asked);
  EXPECT_TRUE(made) << made.error().to_string();
  auto cert = issue_node_cert(pki.ca_cert, pki.ca_key, made->request_pem, node, 30);
  EXPECT_TRUE(cert) << cert.error().to_string();
  const std::string cert_file = pki.dir.file(node + ".pem"), key_file = pki.dir.file(node + ".key");
  EXPECT_TRUE(write_private_file(key_file, made->key_pem, 0600));
  EXPECT_TRUE(write_private_file(cert_file, cert ? *cert : "", 0644));
  return {cert_file, key_file};
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(TlsFiles, ANodeCertificateNamesTheNodeItWasIssuedForNotWhatTheRequestAsked) {
  Pki pki;
  auto [cert, key] = node_cert(pki, "node-b", "node-x");
  auto info = read_cert_info(read_text(cert));
  ASSERT_TRUE(info) << info.error().to_string();
  EXPECT_EQ(info->dns_names, std::vector<std::string>{"node-b.node.cnlab"});
  EXPECT_NEAR(static_cast<double>(info->not_after - info->not_before), 30 * 86400.0 + 3600, 5);
}

TEST(TlsFiles, ASigningRequestWhoseSignatureDoesNotVerifyIsRefused) {
  Pki pki;
  auto one = create_key_and_request("node-a");
  auto two = create_key_and_request("node-a");
  ASSERT_TRUE(one && two);
  // The body of one request (its key) with the signature of the other: whoever sent it does not
  // hold the key it names.
  const std::string& a = one->request_pem;
  const std::string& b = two->request_pem;
  std::string forged = a.substr(0, a.size() - 120) + b.substr(b.size() - 120);
  auto cert = issue_node_cert(pki.ca_cert, pki.ca_key, forged, "node-a", 30);
  ASSERT_FALSE(cert);
  EXPECT_EQ(cert.error().field, "csr");
  EXPECT_FALSE(issue_node_cert(pki.ca_cert, pki.ca_key, "not a request", "node-a", 30));
  EXPECT_FALSE(issue_node_cert(pki.ca_cert, pki.ca_key, a, "../etc", 30));
}

TEST(Server, MutualTlsTellsTheHandlerTheClientsNamesAndRefusesOthers) {
  Pki pki, other({"localhost"}, {"127.0.0.1"});
  auto [server_cert, server_key] = node_cert(pki, "node-b");
  auto [client_cert, client_key] = node_cert(pki, "node-a");
  auto [stranger_cert, stranger_key] = node_cert(other, "node-a");
  ServerOptions options;
  options.cert_file = server_cert;
  options.key_file = server_key;
  options.client_ca_file = pki.ca_cert;
  auto started = Server::start(options, [](const Request& request) {
    std::string names;
    for (const auto& name : request.peer_dns_names) names += name + ";";
    return text(names);
  });
  ASSERT_TRUE(started) << started.error().to_string();
  auto ask = [&](const std::string& cert, const std::string& key, const std::string& server_name) {
    auto client = Client::connect({.url = (*started)->url(), .ca_file = pki.ca_cert, .timeout = 10s, .cert_file = cert,
                                   .key_file = key, .server_name = server_name});
    return client ? (*client)->request("GET", "/") : Result<ClientResponse>(client.error());
  };
  auto answered = ask(client_cert, client_key, "node-b.node.cnlab");
  ASSERT_TRUE(answered) << answered.error().to_string();
  EXPECT_EQ(answered->body, "node-a.node.cnlab;");
  EXPECT_FALSE(ask("", "", "node-b.node.cnlab")) << "a client without a certificate";
  EXPECT_FALSE(ask(stranger_cert, stranger_key, "node-b.node.cnlab")) << "a certificate from another CA";
  auto wrong = ask(client_cert, client_key, "node-c.node.cnlab");
  ASSERT_FALSE(wrong) << "the server is node-b, not node-c";
  EXPECT_THAT(wrong.error().message, HasSubstr("node-c.node.cnlab"));
}

TEST(Server, TlsRoundTripReachesHandlerAndClientVerifiesTheCa) {
  Pki pki;
  auto server = start_tls(pki, [](const Request& request) {
    return text(request.method + " " + request.path + " " + request.body);
  });
  ASSERT_TRUE(server);
  EXPECT_THAT(server->url(), StartsWith("https://127.0.0.1:"));
  EXPECT_EQ(server->url(), "https://127.0.0.1:" + std::to_string(server->port()));
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);
  auto response = client->request("POST", "/v1/jobs", R"({"name":"a"})");
  ASSERT_TRUE(response) << response.error().to_string();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, R"(POST /v1/jobs {"name":"a"})");
  EXPECT_EQ(response->headers["content-type"], "text/plain");
  EXPECT_EQ(response->headers["content-length"], std::to_string(response->body.size()));
}

TEST(Server, ALargeResponseBodyOverTlsArrivesWhole) {
  // Past one TLS record (16 KiB) many times over: the head and the body once went out as two
  // buffers, and Boost's ssl_stream stalled after the first record.
  std::string body(300 << 10, '\0');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + (i * 31 + i / 1024) % 26);
  Pki pki;
  auto server = start_tls(pki, [&](const Request&) { return text(body); });
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);
  for (int round = 0; round < 2; ++round) {  // and the kept-alive connection still serves the next one
    auto response = client->request("GET", "/large");
    ASSERT_TRUE(response) << response.error().to_string();
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->headers["content-length"], std::to_string(body.size()));
    ASSERT_EQ(response->body.size(), body.size());
    EXPECT_TRUE(response->body == body) << "the body arrived with different bytes";
  }
}

TEST(Server, ClientReachesServerByDnsNameInTheCertificate) {
  Pki pki;
  auto server = start_tls(pki, [](const Request&) { return text("ok"); });
  ASSERT_TRUE(server);
  auto client = Client::connect(
      {.url = "https://localhost:" + std::to_string(server->port()), .ca_file = pki.ca_cert, .timeout = 10s});
  ASSERT_TRUE(client) << client.error().to_string();
  auto response = (*client)->request("GET", "/");
  ASSERT_TRUE(response) << response.error().to_string();
  EXPECT_EQ(response->body, "ok");
}

TEST(Server, DecodesPathQueryAndLowerCasesHeaderNames) {
  Pki pki;
  Request seen;
  auto server = start_tls(pki, [&](const Request& request) {
    seen = request;
    return text("");
  });
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki, "secret-token");
  ASSERT_TRUE(client);
  auto response =
      client->request("GET", "/v1/jobs/a%20b?x=1&y=hello+world&y=two&flag&e=%26%3D", "", {{"X-Custom-Thing", "V"}});
  ASSERT_TRUE(response) << response.error().to_string();
  EXPECT_EQ(seen.path, "/v1/jobs/a b");
  EXPECT_EQ(seen.target, "/v1/jobs/a%20b?x=1&y=hello+world&y=two&flag&e=%26%3D");
  EXPECT_EQ(seen.query_value("x"), "1");
  EXPECT_EQ(seen.query.count("y"), 2u);
  EXPECT_EQ(seen.query_value("y"), "hello world");
  EXPECT_TRUE(seen.has_query("flag"));
  EXPECT_EQ(seen.query_value("flag"), "");
  EXPECT_EQ(seen.query_value("e"), "&=");
  EXPECT_FALSE(seen.has_query("missing"));
  EXPECT_EQ(seen.header("x-custom-thing"), "V");
  EXPECT_EQ(seen.header("authorization"), "Bearer secret-token");
  EXPECT_EQ(seen.header("absent"), "");
  EXPECT_THAT(seen.remote, StartsWith("127.0.0.1:"));
}

TEST(Server, HandlerHeadersAndStatusReachTheClient) {
  Pki pki;
  auto server = start_tls(pki, [](const Request&) {
    Response response;
    response.status = 409;
    response.body = R"({"error":{"code":"conflict"}})";
    response.headers = {{"X-Revision", "42"}, {"Bad\r\nHeader", "x"}};
    return response;
  });
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);
  auto response = client->request("PUT", "/x", "{}");
  ASSERT_TRUE(response) << response.error().to_string();
  EXPECT_EQ(response->status, 409);
  EXPECT_EQ(response->headers["x-revision"], "42");
  EXPECT_EQ(response->headers["content-type"], "application/json");
  EXPECT_EQ(response->body, R"({"error":{"code":"conflict"}})");
}

TEST(Client, RefusesAServerWhoseCertificateDoesNotChainToItsCa) {
  Pki pki;
  Pki other;
  auto server = start_tls(pki, [](const Request&) { return text("ok"); });
  ASSERT_TRUE(server);
  auto client = Client::connect({.url = server->url(), .ca_file = other.ca_cert, .timeout = 10s});
  ASSERT_FALSE(client);
  EXPECT_EQ(client.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(client.error().to_string(), HasSubstr("verification"));
}

TEST(Client, RefusesACertificateThatDoesNotNameTheServerAddress) {
  Pki pki({"example.test"}, {"10.9.8.7"});
  auto server = start_tls(pki, [](const Request&) { return text("ok"); });
  ASSERT_TRUE(server);
  auto client = Client::connect({.url = server->url(), .ca_file = pki.ca_cert, .timeout = 10s});
  ASSERT_FALSE(client);
  EXPECT_EQ(client.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(client.error().to_string(), HasSubstr("verification"));
}

TEST(Client, ATlsFileThatIsMissingOrNotPemIsRefusedSayingWhichAndWhy) {
  Pki pki;
  auto server = start_tls(pki, [](const Request&) { return text("ok"); });
  ASSERT_TRUE(server);
  const std::string missing = pki.dir.file("no-such-ca.pem"), garbage = pki.dir.file("garbage.pem");
  std::FILE* f = std::fopen(garbage.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("not a certificate\n", f);
  std::fclose(f);
  auto absent = Client::connect({.url = server->url(), .ca_file = missing, .timeout = 10s});
  ASSERT_FALSE(absent);
  EXPECT_EQ(absent.error().field, "ca_file");
  EXPECT_EQ(absent.error().value, missing);
  EXPECT_THAT(absent.error().message, HasSubstr("cannot read the file: No such file or directory"));
  auto wrong = Client::connect({.url = server->url(), .ca_file = garbage, .timeout = 10s});
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().field, "ca_file");
  EXPECT_THAT(wrong.error().message, HasSubstr("not a PEM certificate"));
  auto no_key = Client::connect(
      {.url = server->url(), .ca_file = pki.ca_cert, .timeout = 10s, .cert_file = pki.cert, .key_file = missing});
  ASSERT_FALSE(no_key);
  EXPECT_EQ(no_key.error().field, "key_file");
  EXPECT_THAT(no_key.error().message, HasSubstr("cannot read the file"));

  auto no_cert = Server::start({.cert_file = missing, .key_file = pki.key}, [](const Request&) { return text("ok"); });
  ASSERT_FALSE(no_cert);
  EXPECT_EQ(no_cert.error().field, "cert_file");
  EXPECT_THAT(no_cert.error().message, HasSubstr("cannot read the file: No such file or directory"));
  auto bad_ca = Server::start({.cert_file = pki.cert, .key_file = pki.key, .client_ca_file = garbage},
                              [](const Request&) { return text("ok"); });
  ASSERT_FALSE(bad_ca);
  EXPECT_EQ(bad_ca.error().field, "client_ca_file");
  EXPECT_THAT(bad_ca.error().message, HasSubstr("not a PEM certificate"));
}

TEST(Client, ReportsAServerThatIsNotThereAsUnavailable) {
  auto server = start_plain([](const Request&) { return text("ok"); });
  ASSERT_TRUE(server);
  std::string url = server->url();
  server->stop();
  auto client = Client::connect({.url = url, .timeout = 5s});
  ASSERT_FALSE(client);
  EXPECT_EQ(client.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(client.error().to_string(), HasSubstr("cannot connect"));
}

TEST(Client, ReconnectsOnceWhenTheServerClosedTheKeptAliveConnection) {
  auto first = start_plain([](const Request&) { return text("first"); });
  ASSERT_TRUE(first);
  uint16_t port = first->port();
  auto client = connect(*first, nullptr);
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->request("GET", "/"));
  first->stop();  // closes the kept-alive connection
  auto second = start_plain([](const Request&) { return text("second"); },
                            {.listen = "127.0.0.1:" + std::to_string(port)});
  ASSERT_TRUE(second);
  auto response = client->request("GET", "/");
  ASSERT_TRUE(response) << response.error().to_string();
  EXPECT_EQ(response->body, "second");
}

TEST(Server, RefusesPlainHttpOnANonLoopbackAddress) {
  auto server = Server::start({.listen = "0.0.0.0:0", .tls = false}, [](const Request&) { return text("ok"); });
  ASSERT_FALSE(server);
  EXPECT_EQ(server.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(server.error().field, "--listen");
}

TEST(Server, ServesPlainHttpOnLoopback) {
  auto server = start_plain([](const Request&) { return text("plain"); }, {.listen = "127.0.0.1:0"});
  ASSERT_TRUE(server);
  EXPECT_THAT(server->url(), StartsWith("http://127.0.0.1:"));
  auto client = connect(*server, nullptr);
  ASSERT_TRUE(client);
  auto response = client->request("GET", "/");
  ASSERT_TRUE(response) << response.error().to_string();
  EXPECT_EQ(response->body, "plain");
}

TEST(Server, NamesAMissingOrBadCertificateOrKeyFile) {
  Pki pki;
  auto handler = [](const Request&) { return text("ok"); };
  auto missing = Server::start({.cert_file = pki.dir.file("nope.crt"), .key_file = pki.key}, handler);
  ASSERT_FALSE(missing);
  EXPECT_THAT(missing.error().to_string(), HasSubstr("nope.crt"));
  // The CA key is a key, but not the certificate's.
  auto mismatched = Server::start({.cert_file = pki.cert, .key_file = pki.ca_key}, handler);
  ASSERT_FALSE(mismatched);
  EXPECT_THAT(mismatched.error().to_string(), HasSubstr(pki.ca_key));
  auto not_a_key = Server::start({.cert_file = pki.cert, .key_file = pki.cert}, handler);
  ASSERT_FALSE(not_a_key);
  EXPECT_THAT(not_a_key.error().to_string(), HasSubstr(pki.cert));
}

TEST(Server, OversizedBodyGets413BeforeTheHandlerRuns) {
  Pki pki;
  std::atomic<int> calls{0};
  auto server = start_tls(pki, [&](const Request&) {
    ++calls;
    return text("ok");
  }, {.max_body_bytes = 1024});
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);
  auto response = client->request("POST", "/upload", std::string(64 << 10, 'x'));
  ASSERT_TRUE(response) << response.error().to_string();
  EXPECT_EQ(response->status, 413);
  EXPECT_THAT(response->body, HasSubstr(R"("code":"too_large")"));
  EXPECT_EQ(calls.load(), 0);
  // The client reconnects; the server goes on serving.
  auto next = client->request("POST", "/upload", "small");
  ASSERT_TRUE(next) << next.error().to_string();
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(calls.load(), 1);
}

TEST(Server, AnAdmitRefusalIsSentFromTheHeadBeforeAnyBodyAndTheHandlerNeverRuns) {
  std::atomic<int> calls{0};
  ServerOptions options;
  options.max_body_bytes = size_t{2} << 30;
  options.admit = [](const Request& head) -> std::optional<Response> {
    if (head.path != "/upload" || head.header("authorization") == "Bearer good") return std::nullopt;
    Response refusal = text("who are you");
    refusal.status = 401;
    return refusal;
  };
  auto server = start_plain([&](const Request&) {
    ++calls;
    return text("taken");
  }, options);
  ASSERT_TRUE(server);
  // A gibibyte declared and none of it sent: the answer comes anyway.
  RawSocket raw(server->port());
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.send("PUT /up%6Coad?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 1073741824\r\n\r\n"));
  const std::string answer = raw.read_until("who are you");
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(answer, HasSubstr("who are you"));
  EXPECT_EQ(calls.load(), 0);
  auto client = connect(*server, nullptr);
  ASSERT_TRUE(client);
  auto admitted = client->request("PUT", "/upload", "body", {{"Authorization", "Bearer good"}});
  ASSERT_TRUE(admitted) << admitted.error().to_string();
  EXPECT_EQ(admitted->status, 200);
  auto other = client->request("PUT", "/elsewhere", "body");
  ASSERT_TRUE(other) << other.error().to_string();
  EXPECT_EQ(other->status, 200);
  EXPECT_EQ(calls.load(), 2);
}

// What a spooling route's handler saw.
struct SpoolProbe {
  std::mutex mu;
  std::string body_in_memory, body_file, content, body_sha256;
  std::filesystem::perms perms{};
  int calls = 0;

  Response handle(const Request& request) {
    std::lock_guard lock(mu);
    ++calls;
    body_in_memory = request.body;
    body_file = request.body_file;
    body_sha256 = request.body_sha256;
    if (!body_file.empty()) {
      std::ifstream in(body_file, std::ios::binary);
      content.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      perms = std::filesystem::status(body_file).permissions();
    }
    return text("ok");
  }
};

std::string fmt_hex(unsigned char byte) {
  static constexpr char kHex[] = "0123456789abcdef";
  return {kHex[byte >> 4], kHex[byte & 0xf]};
}

std::string sha256_hex(const std::string& data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) hex += fmt_hex(digest[i]);
  return hex;
}

std::string random_bytes(size_t size) {
  std::mt19937_64 random(size);
  std::string out(size, '\0');
  for (char& c : out) c = static_cast<char>(random());
  return out;
}

bool empty_dir(const std::string& dir) { return std::filesystem::is_empty(dir); }

TEST(Server, ASpooledRouteGetsItsBodyAsAFileRemovedOnceAnswered) {
  Pki pki;
  TempDir spool;
  SpoolProbe probe;
  ServerOptions options;
  options.max_body_bytes = 64 << 20;
  options.spool_dir_for = [&](const std::string& method, const std::string& path) {
    return method == "PUT" && path == "/big" ? spool.file("") : std::string();
  };
  auto server = start_tls(pki, [&](const Request& request) { return probe.handle(request); }, options);
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);
  TempDir source;
  const std::string body = random_bytes(9 << 20);  // several chunks, TLS records and reads
  std::ofstream(source.file("body"), std::ios::binary) << body;

  auto response = client->upload("PUT", "/big", source.file("body"), {{"Content-Type", "application/octet-stream"}});
  ASSERT_TRUE(response) << response.error().to_string();
  EXPECT_EQ(response->status, 200);
  {
    std::lock_guard lock(probe.mu);
    EXPECT_TRUE(probe.body_in_memory.empty());
    ASSERT_FALSE(probe.body_file.empty());
    EXPECT_EQ(std::filesystem::path(probe.body_file).parent_path(), std::filesystem::path(spool.file("")).parent_path());
    EXPECT_TRUE(probe.content == body) << "the spooled body differs from what was sent";
    EXPECT_EQ(probe.body_sha256, sha256_hex(body)) << "hashed as it arrived";
    EXPECT_EQ(probe.perms & std::filesystem::perms::all,
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  EXPECT_TRUE(wait_until([&] { return empty_dir(spool.file("")); })) << "the spool file stayed";

  // Other routes keep their body in memory; the same connection goes on serving.
  auto small = client->request("POST", "/small", "hello");
  ASSERT_TRUE(small) << small.error().to_string();
  std::lock_guard lock(probe.mu);
  EXPECT_EQ(probe.body_in_memory, "hello");
  EXPECT_TRUE(probe.body_file.empty());
  EXPECT_TRUE(probe.body_sha256.empty());
  EXPECT_EQ(probe.calls, 2);
}

TEST(Server, AHandlerKeepsASpooledBodyByMovingIt) {
  TempDir spool, kept;
  ServerOptions options;
  options.spool_dir_for = [&](const std::string&, const std::string&) { return spool.file(""); };
  auto server = start_plain([&](const Request& request) {
    std::filesystem::rename(request.body_file, kept.file("mine"));
    return text("kept");
  }, options);
  ASSERT_TRUE(server);
  auto client = connect(*server, nullptr);
  ASSERT_TRUE(client);
  auto response = client->request("PUT", "/keep", "the body");
  ASSERT_TRUE(response) << response.error().to_string();
  EXPECT_EQ(response->status, 200);
  std::ifstream in(kept.file("mine"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), "the body");
  EXPECT_TRUE(empty_dir(spool.file("")));
}

// A plain server that spools every body into `spool` (up to `max_body_bytes`), counting the
// requests its handler sees.
std::unique_ptr<Server> start_spooling(const TempDir& spool, size_t max_body_bytes, std::atomic<int>& calls) {
  ServerOptions options;
  options.max_body_bytes = max_body_bytes;
  options.spool_dir_for = [dir = spool.file("")](const std::string&, const std::string&) { return dir; };
  return start_plain([&calls](const Request&) {
    ++calls;
    return text("ok");
  }, options);
}

TEST(Server, ASpooledBodyOverTheLimitGets413AndLeavesNoFile) {
  TempDir spool;
  std::atomic<int> calls{0};
  auto server = start_spooling(spool, 1 << 20, calls);
  ASSERT_TRUE(server);
  RawSocket raw(server->port());
  ASSERT_TRUE(raw.connected());
  // Chunked: no length is declared, so the limit is found while the body is being spooled.
  ASSERT_TRUE(raw.send("PUT /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk(256 << 10, 'x');
  for (int i = 0; i < 8; ++i) {
    char size[16];
    std::snprintf(size, sizeof(size), "%zx\r\n", chunk.size());
    if (!raw.send(std::string(size) + chunk + "\r\n")) break;  // the server may stop reading
  }
  EXPECT_THAT(raw.read_until("too_large"), StartsWith("HTTP/1.1 413"));
  EXPECT_EQ(calls.load(), 0);
  EXPECT_TRUE(wait_until([&] { return empty_dir(spool.file("")); })) << "the partial spool file stayed";
}

TEST(Server, AClientGoneMidBodyLeavesNoSpoolFile) {
  TempDir spool;
  std::atomic<int> calls{0};
  auto server = start_spooling(spool, 64 << 20, calls);
  ASSERT_TRUE(server);
  {
    RawSocket raw(server->port());
    ASSERT_TRUE(raw.connected());
    ASSERT_TRUE(raw.send("PUT /big HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n"));
    ASSERT_TRUE(raw.send(std::string(1 << 20, 'x')));
    EXPECT_TRUE(wait_until([&] { return !empty_dir(spool.file("")); })) << "nothing was spooled";
  }  // closed with most of the body unsent
  EXPECT_TRUE(wait_until([&] { return empty_dir(spool.file("")); })) << "the partial spool file stayed";
  EXPECT_EQ(calls.load(), 0);
}

TEST(Client, AnUploadToAServerThatHasGoneIsUnavailable) {
  auto server = start_plain([](const Request&) { return text("ok"); });
  ASSERT_TRUE(server);
  auto client = connect(*server, nullptr);
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->request("GET", "/"));
  server->stop();
  TempDir dir;
  std::ofstream(dir.file("body")) << "bytes";
  auto response = client->upload("PUT", "/x", dir.file("body"));
  ASSERT_FALSE(response);
  EXPECT_EQ(response.error().code, ErrorCode::kUnavailable) << response.error().to_string();
}

TEST(Client, AnUploadOfAFileThatCannotBeReadNamesIt) {
  auto server = start_plain([](const Request&) { return text("ok"); });
  ASSERT_TRUE(server);
  auto client = connect(*server, nullptr);
  ASSERT_TRUE(client);
  auto response = client->upload("PUT", "/x", "/nonexistent/cnlab-body");
  ASSERT_FALSE(response);
  EXPECT_EQ(response.error().code, ErrorCode::kInvalidArgument);
  EXPECT_THAT(response.error().to_string(), HasSubstr("/nonexistent/cnlab-body"));
}

TEST(Server, AResponseFromAFileArrivesWholeAndTheConnectionGoesOn) {
  Pki pki;
  TempDir files, downloads;
  const std::string content = random_bytes(7 << 20);
  std::ofstream(files.file("blob"), std::ios::binary) << content;
  auto server = start_tls(pki, [&](const Request& request) {
    if (request.path == "/small") return text("small");
    Response response;
    response.content_type = "application/octet-stream";
    response.headers.emplace_back("X-Kind", "blob");
    response.body_file = files.file(request.path.substr(1));
    return response;
  });
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);

  auto got = client->download("/blob", downloads.file("blob"));
  ASSERT_TRUE(got) << got.error().to_string();
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->headers["x-kind"], "blob");
  EXPECT_TRUE(got->body.empty());
  std::ifstream in(downloads.file("blob"), std::ios::binary);
  EXPECT_TRUE(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()) == content);
  EXPECT_EQ(std::filesystem::status(downloads.file("blob")).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  // The same body read into memory; then a plain answer on the same connection.
  auto whole = client->request("GET", "/blob");
  ASSERT_TRUE(whole) << whole.error().to_string();
  EXPECT_TRUE(whole->body == content);
  auto small = client->request("GET", "/small");
  ASSERT_TRUE(small) << small.error().to_string();
  EXPECT_EQ(small->body, "small");

  // A file that is not there: a 500, kept in memory, and no file written.
  auto missing = client->download("/gone", downloads.file("gone"));
  ASSERT_TRUE(missing) << missing.error().to_string();
  EXPECT_EQ(missing->status, 500);
  EXPECT_THAT(missing->body, HasSubstr("internal"));
  EXPECT_FALSE(std::filesystem::exists(downloads.file("gone")));
}

TEST(Server, OversizedHeaderIsRefused) {
  Pki pki;
  std::atomic<int> calls{0};
  auto server = start_tls(pki, [&](const Request&) {
    ++calls;
    return text("ok");
  }, {.max_header_bytes = 4096});
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);
  auto response = client->request("GET", "/", "", {{"X-Big", std::string(16 << 10, 'h')}});
  ASSERT_TRUE(response) << response.error().to_string();
  EXPECT_EQ(response->status, 431);
  EXPECT_THAT(response->body, HasSubstr("too_large"));
  EXPECT_EQ(calls.load(), 0);
}

TEST(Server, MalformedRequestLineGets400AndTheServerKeepsServing) {
  auto server = start_plain([](const Request&) { return text("ok"); });
  ASSERT_TRUE(server);
  RawSocket raw(server->port());
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.send("this is not http at all\r\n\r\n"));
  std::string reply = raw.read_all();
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(reply, HasSubstr("invalid_argument"));
  auto client = connect(*server, nullptr);
  ASSERT_TRUE(client);
  auto response = client->request("GET", "/");
  ASSERT_TRUE(response) << response.error().to_string();
  EXPECT_EQ(response->status, 200);
}

TEST(Server, AnswersExpectContinueBeforeTheBodyIsSent) {
  auto server = start_plain([](const Request& request) { return text("got " + request.body); });
  ASSERT_TRUE(server);
  RawSocket raw(server->port());
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.send("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_THAT(raw.read_until("\r\n\r\n"), StartsWith("HTTP/1.1 100 Continue\r\n"));
  ASSERT_TRUE(raw.send("hello"));
  std::string reply = raw.read_until("got hello");
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(reply, HasSubstr("got hello"));
}

TEST(Server, KeepAliveServesManyRequestsOnOneConnection) {
  Pki pki;
  std::mutex mu;
  std::set<std::string> remotes;
  auto server = start_tls(pki, [&](const Request& request) {
    std::lock_guard lock(mu);
    remotes.insert(request.remote);
    return text("ok");
  });
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);
  for (int i = 0; i < 50; ++i) {
    auto response = client->request("GET", "/n");
    ASSERT_TRUE(response) << response.error().to_string();
    ASSERT_EQ(response->status, 200);
  }
  std::lock_guard lock(mu);
  EXPECT_EQ(remotes.size(), 1u);
}

TEST(Server, HandlerThatBlocksDoesNotStallOtherConnections) {
  Pki pki;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<bool> entered{false};
  auto server = start_tls(pki, [&](const Request& request) {
    if (request.path == "/block") {
      entered = true;
      std::unique_lock lock(mu);
      cv.wait_for(lock, 30s, [&] { return release; });
    }
    return text(request.path);
  }, {.io_threads = 1, .worker_threads = 4});
  ASSERT_TRUE(server);
  Result<ClientResponse> blocked = Error::internal("not run");
  std::thread slow([&] {
    auto client = connect(*server, &pki);
    if (client) blocked = client->request("GET", "/block");
  });
  ASSERT_TRUE(wait_until([&] { return entered.load(); }));
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);
  auto fast = client->request("GET", "/fast");
  ASSERT_TRUE(fast) << fast.error().to_string();
  EXPECT_EQ(fast->body, "/fast");
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  slow.join();
  ASSERT_TRUE(blocked) << blocked.error().to_string();
  EXPECT_EQ(blocked->body, "/block");
}

TEST(Server, HandlerThatThrowsGets500AndTheConnectionStaysUsable) {
  Pki pki;
  auto server = start_tls(pki, [](const Request& request) -> Response {
    if (request.path == "/throw") throw std::runtime_error("boom");
    return text("fine");
  });
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);
  auto response = client->request("GET", "/throw");
  ASSERT_TRUE(response) << response.error().to_string();
  EXPECT_EQ(response->status, 500);
  EXPECT_THAT(response->body, HasSubstr(R"("code":"internal")"));
  auto next = client->request("GET", "/");
  ASSERT_TRUE(next) << next.error().to_string();
  EXPECT_EQ(next->body, "fine");
}

TEST(Server, ConnectionsBeyondTheLimitGet503) {
  Pki pki;
  auto server = start_tls(pki, [](const Request&) { return text("ok"); }, {.max_connections = 1});
  ASSERT_TRUE(server);
  auto first = connect(*server, &pki);
  ASSERT_TRUE(first);
  auto before = first->request("GET", "/");
  ASSERT_TRUE(before) << before.error().to_string();
  EXPECT_EQ(before->status, 200);
  auto second = Client::connect({.url = server->url(), .ca_file = pki.ca_cert, .timeout = 10s});
  if (second) {  // the handshake may finish before the 503 arrives, or the close may win the race
    auto response = (*second)->request("GET", "/");
    if (response) {
      EXPECT_EQ(response->status, 503);
      EXPECT_THAT(response->body, HasSubstr("unavailable"));
    } else {
      EXPECT_EQ(response.error().code, ErrorCode::kUnavailable);
    }
  }
  // The connection within the limit is unaffected.
  auto after = first->request("GET", "/");
  ASSERT_TRUE(after) << after.error().to_string();
  EXPECT_EQ(after->status, 200);
}

TEST(Stream, DeliversChunksInOrderAsTheyArePushedUntilFinish) {
  Pki pki;
  StreamProbe probe;
  auto server = start_tls(pki, [&](const Request& request) { return probe.handle(request); });
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);
  Received received;
  Result<int> status = Error::internal("not run");
  std::thread reader([&] {
    status = client->stream("GET", "/watch", [&](std::string_view chunk) {
      received.add(chunk);
      return true;
    });
  });
  auto stream = probe.stream(0);
  ASSERT_TRUE(stream);
  std::string expected;
  for (int i = 0; i < 5; ++i) {
    std::string line = "{\"event\":" + std::to_string(i) + "}\n";
    ASSERT_TRUE(stream->push(line));
    expected += line;
    // The client sees each chunk before the next is pushed: delivery is incremental.
    ASSERT_TRUE(wait_until([&] { return received.get() == expected; })) << received.get();
  }
  stream->finish();
  EXPECT_TRUE(stream->closed());
  EXPECT_FALSE(stream->push("late"));
  reader.join();
  ASSERT_TRUE(status) << status.error().to_string();
  EXPECT_EQ(*status, 200);
  EXPECT_EQ(received.get(), expected);
  EXPECT_TRUE(wait_until([&] { return probe.closed.load() == 1; }));
}

TEST(Stream, WithCoalescingABurstOfPushesArrivesWholeInOrderAndAQuietStreamIsNotHeldBack) {
  Pki pki;
  StreamProbe probe;
  ServerOptions options;
  options.stream_coalesce = std::chrono::milliseconds(20);
  auto server = start_tls(pki, [&](const Request& request) { return probe.handle(request); }, options);
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);
  Received received;
  Result<int> status = Error::internal("not run");
  std::thread reader([&] {
    status = client->stream("GET", "/watch", [&](std::string_view chunk) {
      received.add(chunk);
      return true;
    });
  });
  auto stream = probe.stream(0);
  ASSERT_TRUE(stream);
  // The first push after a quiet spell is written at once, then a burst inside the window.
  ASSERT_TRUE(stream->push("first\n"));
  ASSERT_TRUE(wait_until([&] { return received.get() == "first\n"; }));
  std::string expected = "first\n";
  for (int i = 0; i < 200; ++i) {
    std::string line = "{\"event\":" + std::to_string(i) + "}\n";
    ASSERT_TRUE(stream->push(line));
    expected += line;
  }
  ASSERT_TRUE(wait_until([&] { return received.get() == expected; })) << received.get().size();
  stream->finish();
  reader.join();
  ASSERT_TRUE(status) << status.error().to_string();
  EXPECT_EQ(*status, 200);
  EXPECT_EQ(received.get(), expected);
}

TEST(Stream, ClientThatDisconnectsMidStreamTriggersOnCloseOnce) {
  Pki pki;
  StreamProbe probe;
  auto server = start_tls(pki, [&](const Request& request) { return probe.handle(request); });
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki);
  ASSERT_TRUE(client);
  std::thread reader([&] {
    // Stops after the first chunk, which closes the connection.
    auto status = client->stream("GET", "/watch", [](std::string_view) { return false; });
    EXPECT_TRUE(status);
  });
  auto stream = probe.stream(0);
  ASSERT_TRUE(stream);
  ASSERT_TRUE(stream->push("first\n"));
  reader.join();
  ASSERT_TRUE(wait_until([&] { return probe.closed.load() == 1; }));
  EXPECT_TRUE(stream->closed());
  EXPECT_FALSE(stream->push("more\n"));
  stream->finish();
  // A callback registered after the close runs at once; the first one ran exactly once.
  bool late = false;
  stream->on_close([&] { late = true; });
  EXPECT_TRUE(late);
  EXPECT_EQ(probe.closed.load(), 1);
}

TEST(Stream, InterruptFromAnotherThreadEndsAWaitingStreamAndLaterCalls) {
  Pki pki;
  StreamProbe probe;
  auto server = start_tls(pki, [&](const Request& request) { return probe.handle(request); });
  ASSERT_TRUE(server);
  auto client = connect(*server, &pki);  // its timeout (seconds) is far longer than this test waits
  ASSERT_TRUE(client);
  std::atomic<bool> returned{false};
  Result<int> status = 0;
  std::thread reader([&] {
    status = client->stream("GET", "/watch", [](std::string_view) { return true; });
    returned = true;
  });
  auto stream = probe.stream(0);
  ASSERT_TRUE(stream);
  ASSERT_TRUE(stream->push("first\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(returned.load());  // waiting for more
  client->interrupt();
  EXPECT_TRUE(wait_until([&] { return returned.load(); }));
  reader.join();
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().code, ErrorCode::kUnavailable);
  auto later = client->request("GET", "/anything");
  ASSERT_FALSE(later);
  EXPECT_THAT(later.error().message, HasSubstr("interrupted"));
}

// However an interrupt falls against the client's steps (connecting, the TLS handshake, sending,
// the first read), the call it interrupts ends as interrupted, never by running into its timeout:
// an agent stopping had to wait out its watch's 60 s timeout when it fell between two steps.
TEST(Stream, AnInterruptAtAnyMomentOfAStreamsStepsEndsIt) {
  Pki pki;
  StreamProbe probe;
  auto server = start_tls(pki, [&](const Request& request) { return probe.handle(request); });
  ASSERT_TRUE(server);
  for (int i = 0; i < 60; ++i) {
    auto client = Client::connect({.url = server->url(), .ca_file = pki.ca_cert, .timeout = 3s});
    ASSERT_TRUE(client);
    Result<int> status = 0;
    std::thread reader([&] { status = (*client)->stream("GET", "/watch", [](std::string_view) { return true; }); });
    std::this_thread::sleep_for(std::chrono::microseconds(100 * (i % 30)));  // 0 to 2.9 ms into it
    (*client)->interrupt();
    reader.join();
    ASSERT_FALSE(status) << "iteration " << i;
    EXPECT_THAT(status.error().message, ::testing::Not(HasSubstr("timeout"))) << "iteration " << i;
  }
}

TEST(Stream, ReaderThatNeverReadsIsCutOffOnceItsBacklogPassesTheLimit) {
  StreamProbe probe;
  constexpr size_t kBacklog = 256 << 10;
  auto server = start_plain([&](const Request& request) { return probe.handle(request); },
                            {.max_stream_backlog_bytes = kBacklog});
  ASSERT_TRUE(server);
  RawSocket raw(server->port(), /*receive_buffer=*/4096);
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.send("GET /watch HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto stream = probe.stream(0);
  ASSERT_TRUE(stream);
  const std::string chunk(16 << 10, 'z');
  size_t pushed = 0;
  bool cut = false;
  // Kernel buffers take a few MB; beyond them the backlog limit must stop the producer.
  while (pushed < (256u << 20)) {
    if (!stream->push(chunk)) {
      cut = true;
      break;
    }
    pushed += chunk.size();
  }
  EXPECT_TRUE(cut) << "pushed " << pushed << " bytes without a cut-off";
  EXPECT_TRUE(stream->closed());
  EXPECT_TRUE(wait_until([&] { return probe.closed.load() == 1; }));
}

TEST(Stream, TwoHundredConcurrentStreamsEachGetTheirOwnChunks) {
  StreamProbe probe;
  auto server = start_plain([&](const Request& request) { return probe.handle(request); },
                            {.worker_threads = 8});
  ASSERT_TRUE(server);
  constexpr int kStreams = 200;
  std::vector<std::unique_ptr<RawSocket>> sockets;
  for (int i = 0; i < kStreams; ++i) {
    sockets.push_back(std::make_unique<RawSocket>(server->port()));
    ASSERT_TRUE(sockets.back()->connected());
    ASSERT_TRUE(sockets.back()->send("GET /watch?i=" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n"));
  }
  ASSERT_TRUE(wait_until([&] { return probe.count() == kStreams; }));
  for (int i = 0; i < kStreams; ++i) {
    auto stream = probe.stream(i);
    ASSERT_TRUE(stream->push("hello " + std::to_string(i) + "\n"));
    ASSERT_TRUE(stream->push("bye " + std::to_string(i) + "\n"));
    stream->finish();
  }
  for (int i = 0; i < kStreams; ++i) {
    std::string reply = sockets[i]->read_all();
    EXPECT_THAT(reply, StartsWith("HTTP/1.1 200"));
    EXPECT_THAT(reply, HasSubstr("Transfer-Encoding: chunked"));
    std::string hello = "hello " + std::to_string(i) + "\n";
    std::string bye = "bye " + std::to_string(i) + "\n";
    EXPECT_THAT(reply, HasSubstr(hello));
    EXPECT_LT(reply.find(hello), reply.find(bye));
    EXPECT_TRUE(reply.ends_with("0\r\n\r\n")) << i;
  }
  EXPECT_TRUE(wait_until([&] { return probe.closed.load() == kStreams; }));
}

TEST(Server, RandomGarbageOnRawSocketsNeverCrashesTheServer) {
  Pki pki;
  auto tls = start_tls(pki, [](const Request&) { return text("ok"); });
  auto plain = start_plain([](const Request&) { return text("ok"); });
  ASSERT_TRUE(tls && plain);
  std::mt19937 random(12345);
  const std::vector<std::string> prefixes = {"", "GET / HTTP/1.1\r\n", "POST /x HTTP/1.1\r\nContent-Length: 99999\r\n\r\n",
                                             "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                                             "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"};
  for (int i = 0; i < 120; ++i) {
    uint16_t port = i % 2 == 0 ? tls->port() : plain->port();
    RawSocket raw(port);
    ASSERT_TRUE(raw.connected());
    std::string bytes = prefixes[i % prefixes.size()];
    size_t size = random() % 3000;
    for (size_t k = 0; k < size; ++k) bytes.push_back(static_cast<char>(random() & 0xff));
    raw.send(bytes);
  }
  for (auto* server : {tls.get(), plain.get()}) {
    auto client = connect(*server, server == tls.get() ? &pki : nullptr);
    ASSERT_TRUE(client);
    auto response = client->request("GET", "/");
    ASSERT_TRUE(response) << response.error().to_string();
    EXPECT_EQ(response->body, "ok");
  }
}

TEST(Server, StopWithOpenStreamsClosesThemAndReturns) {
  Pki pki;
  StreamProbe probe;
  auto server = start_tls(pki, [&](const Request& request) { return probe.handle(request); });
  ASSERT_TRUE(server);
  constexpr int kReaders = 3;
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&, i] {
      auto client = connect(*server, &pki);
      if (!client) return;
      (void)client->stream("GET", "/watch?i=" + std::to_string(i), [](std::string_view) { return true; });
    });
  }
  ASSERT_TRUE(wait_until([&] { return probe.count() == kReaders; }));
  for (int i = 0; i < kReaders; ++i) ASSERT_TRUE(probe.stream(i)->push("tick\n"));
  server->stop();
  EXPECT_EQ(probe.closed.load(), kReaders);
  for (int i = 0; i < kReaders; ++i) EXPECT_FALSE(probe.stream(i)->push("after stop\n"));
  for (auto& reader : readers) reader.join();
  server->stop();  // idempotent
  server.reset();
}

}  // namespace
}  // namespace cnlab::net
