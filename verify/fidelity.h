// Fidelity of a converted model to its source, a different question from equivalence:
// per-position KL(source ‖ converted) of next-token distributions, top-1 agreement, and
// perplexity of both on the same text.
#ifndef LRKV_VERIFY_FIDELITY_H_
#define LRKV_VERIFY_FIDELITY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/transformer.h"
#include "tokenizer/tokenizer.h"
#include "verify/verify_report.h"

namespace lrkv {

// Runs both models over [BOS] + encode(doc) for each document until `max_tokens`
// predicted positions have been seen.
absl::StatusOr<FidelityResult> MeasureFidelity(const Transformer& source,
                                               const Transformer& converted,
                                               const Tokenizer& tokenizer,
                                               const std::vector<std::string>& docs,
                                               int64_t max_tokens);

}  // namespace lrkv

#endif  // LRKV_VERIFY_FIDELITY_H_
