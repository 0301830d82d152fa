#include "base/tls_pair.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"

namespace lrkv {
namespace {

// OpenSSL's reasons for the last failures, oldest first; the queue cleared.
std::string OpenSslReasons() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? "no reason given" : out;
}

// Whether the file's first line opens a PEM private key.
bool LooksLikeKey(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.find("PRIVATE KEY") != std::string::npos;
}

}  // namespace

absl::Status CheckTlsPair(const std::string& cert, const std::string& key) {
  for (const auto& [path, what] :
       {std::pair{cert, "certificate"}, std::pair{key, "key"}}) {
    if (!std::ifstream(path).good()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the TLS ", what, " ", path, " cannot be read"));
    }
  }
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(
      SSL_CTX_new(TLS_server_method()), &SSL_CTX_free);
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()) != 1) {
    const std::string hint =
        LooksLikeKey(cert)
            ? " (it holds a private key: are the certificate and key swapped?)"
            : "";
    return absl::InvalidArgumentError(
        absl::StrCat("the TLS certificate ", cert,
                     " does not load as a PEM certificate chain", hint, ": ",
                     OpenSslReasons()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM) !=
      1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the TLS key ", key,
        " does not load as a PEM private key: ", OpenSslReasons()));
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the TLS key ", key, " does not belong to the certificate ", cert, ": ",
        OpenSslReasons()));
  }
  return absl::OkStatus();
}

}  // namespace lrkv
