// The face of src/auth: JWT verification and minting, role-based access, and the audit chain's
// verification. No I/O beyond reading the key files it is pointed at; the server wires it to the
// store.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_reader.h"
#include "common/result.h"
#include "common/time.h"

namespace cnlab::auth {

// ---- JWT ------------------------------------------------------------------------------------

// Who a verified token speaks for.
struct Principal {
  std::string subject;      // "sub": a user name, or "node:<name>" for an agent's credential
  std::string token_id;     // "jti": lets a minted token be revoked; may be empty for outside tokens
  std::string issuer;       // "iss"
  std::string project;      // "cnlab.project": the default project, may be empty
  Time expires_at{};        // "exp"
  bool is_node() const { return subject.rfind("node:", 0) == 0; }
};

struct VerifierOptions {
  std::string hs256_secret;           // the server's own signing key (raw bytes, at least 32); empty disables HS256
  std::string own_issuer = "cnlab";   // "iss" of tokens the server mints
  std::string audience = "cnlab";     // "aud" every token must carry (string or array member)
  // Outside identity provider (RS256/ES256), enabled when `jwks_file` is set.
  std::string jwks_file;              // a JWKS document: {"keys": [{"kty":"RSA","kid",...,"n","e"}, {"kty":"EC","crv":"P-256","x","y"}]}
  std::string external_issuer;        // required "iss" for tokens verified against the JWKS; != own_issuer
  std::chrono::seconds leeway{30};    // clock skew allowed on exp and nbf, 0..1 day
  size_t max_token_bytes = 8192;      // longer tokens are refused before any parsing
};

// Verifies compact JWS tokens. Refuses (kUnauthenticated, with a message saying which check
// failed): "alg":"none" and any algorithm not enabled, an HS256 token where the issuer is the
// outside provider and RS/ES tokens claiming the server's issuer (algorithm confusion), a bad
// signature, an unknown "kid", exp in the past, nbf in the future, a wrong iss or aud, tokens over
// the size limit, malformed base64url or JSON. Thread-safe after construction.
//
// HS256 tokens must claim iss == own_issuer and RS256/ES256 tokens iss == external_issuer; the
// JWKS key is picked by "kid" (a token without one is tried only when the JWKS holds exactly one
// key of its algorithm's family). ES256 signatures are the JWS form, r||s in 64 bytes.
class Verifier {
 public:
  // Loads the JWKS file when one is set. Errors (kInvalidArgument) name the option, or the file
  // and the JSON path in it ("/etc/cnlab/jwks.json: keys[1].n"). JWKS keys this server cannot use
  // (another kty, crv or alg, or "use" other than "sig") are skipped; a file with none usable is an
  // error.
  static Result<std::unique_ptr<Verifier>> create(const VerifierOptions& options);
  virtual ~Verifier() = default;
  virtual Result<Principal> verify(std::string_view token, Time now) const = 0;
};

struct MintRequest {
  std::string subject;
  std::string project;       // optional default project claim
  std::string token_id;      // "jti"; a random one is made when empty
  Duration ttl{30 * 86400};
};

// An HS256 token signed with `options.hs256_secret` (must not be empty), with iss = own_issuer and
// aud = audience from `options`, iat/nbf = now, exp = now + ttl.
std::string mint_hs256(const MintRequest& request, const VerifierOptions& options, Time now);

// Helpers shared with the tests: base64url without padding (decode is strict: no padding, no
// other alphabet, unused trailing bits zero, so each byte string has exactly one encoding), random
// bytes from OpenSSL (aborts if the system RNG fails), and lowercase hex SHA-256.
std::string base64url_encode(std::string_view bytes);
Result<std::string> base64url_decode(std::string_view text);
std::string random_bytes(size_t count);
std::string random_hex(size_t bytes);
std::string sha256_hex(std::string_view data);

// ---- RBAC -----------------------------------------------------------------------------------

enum class Role { kViewer, kMember, kProjectAdmin, kAdmin };
std::string_view to_string(Role role);
Result<Role> parse_role(std::string_view text, std::string_view field);

enum class Action {
  kRead,          // get, list, watch, logs
  kSubmit,        // create jobs, upload workspaces
  kCancelOwn,     // cancel one's own job
  kCancelAny,     // cancel anyone's job in the project
  kManageProject, // quotas, role bindings and tokens inside the project
  kManageCluster, // nodes, projects, join tokens, cluster quotas, audit
};

// A user's roles: per project, and "*" for a cluster-wide binding (admin). Only a "*" admin
// binding makes a cluster admin (is_admin); callers check kManageCluster against it.
struct Bindings {
  std::map<std::string, Role> by_project;
  // The strongest role that applies to `project` (a "*" binding applies everywhere).
  std::optional<Role> role_in(const std::string& project) const;
  bool is_admin() const;
};

// Whether `role` allows `action`: viewer reads; member reads, submits and cancels own jobs;
// project-admin also cancels any job and manages the project; admin does everything.
bool allows(Role role, Action action);

// ---- Audit chain ----------------------------------------------------------------------------

// SHA-256 hex of prev_hash + "\n" + record: how each link is made (the store computes it on
// commit; verify() recomputes it).
std::string chain_hash(std::string_view prev_hash, std::string_view record);
inline const std::string kGenesisHash(64, '0');

struct AuditLink {
  int64_t seq = 0;
  std::string record;
  std::string prev_hash;
  std::string hash;
};

struct AuditProblem {
  int64_t seq = 0;       // the seq of the first record found wrong (for a gap: the seq found there)
  std::string what;      // "edited", "deleted or reordered (expected seq 41, found 43)", ...
};

// Walks `links` in the given order from the genesis hash: seq must run 1, 2, 3, ...; prev_hash must
// be the previous link's hash (kGenesisHash first); hash must be chain_hash(prev_hash, record).
// The first broken link, or nothing when it is intact (an empty chain is intact).
std::optional<AuditProblem> verify_chain(const std::vector<AuditLink>& links);

}  // namespace cnlab::auth
