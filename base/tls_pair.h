// A TLS server's certificate and key, checked before a server starts: each file
// loads as what it should be (a PEM certificate chain, a PEM private key) and
// the key belongs to the certificate. lrkvd's gRPC and `lrkv serve`'s HTTPS
// check the same way, so that a swapped or mismatched pair is named as such
// rather than as a port that cannot be listened on.
#ifndef LRKV_BASE_TLS_PAIR_H_
#define LRKV_BASE_TLS_PAIR_H_

#include <string>

#include "absl/status/status.h"

namespace lrkv {

// InvalidArgument naming the file at fault and OpenSSL's reason.
absl::Status CheckTlsPair(const std::string& cert_path,
                          const std::string& key_path);

}  // namespace lrkv

#endif  // LRKV_BASE_TLS_PAIR_H_
