#include "transport/tls.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio/ssl/context.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "common/env.h"
#include "common/launch_env.h"
#include "troupe/error.h"

namespace troupe::transport {
namespace {

constexpr long kCaDays = 3650;
constexpr long kCertificateDays = 825;

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
  void operator()(X509* c) const { X509_free(c); }
};
struct TlsFileClose {
  void operator()(FILE* f) const { std::fclose(f); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

std::string openssl_error() {
  unsigned long e = ERR_get_error();
  if (!e) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

[[noreturn]] void throw_tls(ErrorCode code, const std::string& what) {
  throw Error(code, "TLS: " + what);
}

bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

Key new_key() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) throw_tls(ErrorCode::kInternal, "cannot make a key: " + openssl_error());
  return key;
}

void add_extension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext || !X509_add_ext(cert, ext, -1)) {
    X509_EXTENSION_free(ext);
    throw_tls(ErrorCode::kInternal, "cannot add a certificate extension: " + openssl_error());
  }
  X509_EXTENSION_free(ext);
}

// A certificate for `key` named `common_name`, signed by `issuer_key` (self-signed when `issuer`
// is null).
Cert new_certificate(EVP_PKEY* key, const std::string& common_name, X509* issuer,
                     EVP_PKEY* issuer_key, bool is_ca) {
  Cert cert(X509_new());
  if (!cert) throw_tls(ErrorCode::kInternal, "cannot make a certificate: " + openssl_error());
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  RAND_bytes(serial, sizeof(serial));
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);  // clocks of hosts differ a little
  X509_gmtime_adj(X509_getm_notAfter(cert.get()),
                  (is_ca ? kCaDays : kCertificateDays) * 24L * 3600L);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("troupe cluster"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509* signer = issuer ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  if (is_ca) {
    add_extension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
    add_extension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add_extension(cert.get(), signer, NID_basic_constraints, "critical,CA:FALSE");
    add_extension(cert.get(), signer, NID_key_usage, "critical,digitalSignature");
    add_extension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  add_extension(cert.get(), signer, NID_subject_key_identifier, "hash");
  if (!X509_sign(cert.get(), issuer_key, EVP_sha256()))
    throw_tls(ErrorCode::kInternal, "cannot sign a certificate: " + openssl_error());
  return cert;
}

// Writes through a temporary file renamed into place: readers never see half a file, and two
// processes making the same file at once both succeed.
template <typename Write>
void write_file(const std::string& path, mode_t mode, Write write) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0)
    throw_tls(ErrorCode::kResourceUnavailable, "cannot write " + tmp + ": " + strerror(errno));
  std::unique_ptr<FILE, TlsFileClose> f(::fdopen(fd, "w"));
  if (!f || !write(f.get()) || std::fflush(f.get()) != 0) {
    ::unlink(tmp.c_str());
    throw_tls(ErrorCode::kResourceUnavailable, "cannot write " + path + ": " + openssl_error());
  }
  f.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw_tls(ErrorCode::kResourceUnavailable, "cannot write " + path + ": " + strerror(errno));
  }
}

void write_key(const std::string& path, EVP_PKEY* key) {
  write_file(path, 0600, [key](FILE* f) {
    return PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  });
}

void write_certificate(const std::string& path, X509* cert) {
  write_file(path, 0644, [cert](FILE* f) { return PEM_write_X509(f, cert) == 1; });
}

Key read_key(const std::string& path) {
  std::unique_ptr<FILE, TlsFileClose> f(std::fopen(path.c_str(), "r"));
  if (!f) throw_tls(ErrorCode::kInvalidArgument, "cannot read " + path + ": " + strerror(errno));
  Key key(PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr));
  if (!key) throw_tls(ErrorCode::kInvalidArgument, path + " holds no key: " + openssl_error());
  return key;
}

Cert read_certificate(const std::string& path) {
  std::unique_ptr<FILE, TlsFileClose> f(std::fopen(path.c_str(), "r"));
  if (!f) throw_tls(ErrorCode::kInvalidArgument, "cannot read " + path + ": " + strerror(errno));
  Cert cert(PEM_read_X509(f.get(), nullptr, nullptr, nullptr));
  if (!cert)
    throw_tls(ErrorCode::kInvalidArgument, path + " holds no certificate: " + openssl_error());
  return cert;
}

bool valid_certificate_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name == "ca" || name[0] == '.') return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      return false;
  }
  return true;
}

std::string this_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || !buf[0]) return "host";
  return buf;
}

std::shared_ptr<asio::ssl::context> make_context(const TlsSettings& s) {
  std::string name = s.name.empty() ? this_host_name() : s.name;
  ensure_certificate(s.dir, name);
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls);
  SSL_CTX* native = ctx->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_3_VERSION);
  asio::error_code ec;
  ctx->load_verify_file(s.dir + "/ca.pem", ec);
  if (!ec) ctx->use_certificate_chain_file(s.dir + "/" + name + ".pem", ec);
  if (!ec) ctx->use_private_key_file(s.dir + "/" + name + ".key", asio::ssl::context::pem, ec);
  if (ec)
    throw_tls(ErrorCode::kInvalidArgument,
              "cannot load the certificates of " + s.dir + " (" + name + "): " + ec.message());
  // Both ends present a certificate signed by the cluster's CA; a server refuses a client
  // without one.
  ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  return ctx;
}

struct TlsGlobal {
  std::mutex mu;
  bool resolved = false;
  std::optional<TlsSettings> settings;
  std::shared_ptr<asio::ssl::context> context;
};

TlsGlobal& tls_global() {
  static TlsGlobal* g = new TlsGlobal;  // never destroyed: used by connections to the end
  return *g;
}

}  // namespace

void make_cluster_ca(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw_tls(ErrorCode::kResourceUnavailable, "cannot make " + dir + ": " + strerror(errno));
  if (file_exists(dir + "/ca.pem")) return;
  Key key = new_key();
  // A name of its own: a peer that trusts another cluster's CA finds no issuer of this name.
  unsigned char id[6];
  RAND_bytes(id, sizeof(id));
  char hex[2 * sizeof(id) + 1];
  for (size_t i = 0; i < sizeof(id); ++i) std::snprintf(hex + 2 * i, 3, "%02x", id[i]);
  Cert cert =
      new_certificate(key.get(), std::string("troupe cluster CA ") + hex, nullptr, key.get(), true);
  write_key(dir + "/ca.key", key.get());
  write_certificate(dir + "/ca.pem", cert.get());
}

void ensure_certificate(const std::string& dir, const std::string& name) {
  if (!valid_certificate_name(name))
    throw_tls(ErrorCode::kInvalidArgument,
              "bad certificate name '" + name + "' (letters, digits, '-', '_' and '.'; not 'ca')");
  std::string cert_path = dir + "/" + name + ".pem";
  if (!file_exists(dir + "/ca.pem"))
    throw_tls(ErrorCode::kInvalidArgument,
              dir + " has no ca.pem (make it with `troupe start --head --tls`)");
  if (file_exists(cert_path)) return;
  if (!file_exists(dir + "/ca.key"))
    throw_tls(ErrorCode::kInvalidArgument,
              dir + " has no " + name + ".pem and no ca.key to make it with");
  Key ca_key = read_key(dir + "/ca.key");
  Cert ca = read_certificate(dir + "/ca.pem");
  Key key = new_key();
  Cert cert = new_certificate(key.get(), name, ca.get(), ca_key.get(), false);
  write_key(dir + "/" + name + ".key", key.get());  // the key first: a reader that sees the
  write_certificate(cert_path, cert.get());         // certificate finds its key
}

std::optional<TlsSettings> tls_settings_from_environment() {
  auto dir = env::get(launch_env::kTlsDir);
  if (!dir || dir->empty()) return std::nullopt;
  return TlsSettings{*dir, env::get_or(launch_env::kTlsName, "")};
}

void configure_tls(std::optional<TlsSettings> settings) {
  std::shared_ptr<asio::ssl::context> ctx;
  if (settings) ctx = make_context(*settings);
  TlsGlobal& g = tls_global();
  std::lock_guard<std::mutex> lock(g.mu);
  g.resolved = true;
  g.settings = std::move(settings);
  g.context = std::move(ctx);
}

std::shared_ptr<asio::ssl::context> tls_context() {
  TlsGlobal& g = tls_global();
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.resolved) {
    auto settings = tls_settings_from_environment();
    if (settings) g.context = make_context(*settings);  // throws: stays unresolved
    g.settings = std::move(settings);
    g.resolved = true;
  }
  return g.context;
}

std::string tls_dir() {
  tls_context();
  TlsGlobal& g = tls_global();
  std::lock_guard<std::mutex> lock(g.mu);
  return g.settings ? g.settings->dir : "";
}

std::string tls_name() {
  tls_context();
  TlsGlobal& g = tls_global();
  std::lock_guard<std::mutex> lock(g.mu);
  return g.settings ? g.settings->name : "";
}

}  // namespace troupe::transport
