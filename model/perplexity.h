// Perplexity of a model on documents, as evaluation defines it: each document is
// [BOS] + encode(doc); the NLL is summed over predicting every document token.
#ifndef LRKV_MODEL_PERPLEXITY_H_
#define LRKV_MODEL_PERPLEXITY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer.h"
#include "model/transformer.h"

namespace lrkv {

struct PerplexityStats {
  int64_t documents = 0;
  int64_t tokens = 0;  // predicted tokens
  double total_nll = 0;
  double mean_nll() const { return tokens > 0 ? total_nll / tokens : 0; }
  double perplexity() const;
};

// InvalidArgument when no document has a token to predict.
absl::StatusOr<PerplexityStats> MeasurePerplexity(const Transformer& model,
                                                  const Tokenizer& tokenizer,
                                                  const std::vector<std::string>& docs);

}  // namespace lrkv

#endif  // LRKV_MODEL_PERPLEXITY_H_
