// The median of measured times: what every benchmark here reports as a step's
// time (bench generate's decode steps, bench serve's engines alone), one rule
// for all.
#ifndef LRKV_BASE_MEDIAN_H_
#define LRKV_BASE_MEDIAN_H_

#include <algorithm>
#include <vector>

namespace lrkv {

// The middle value of `values` (at least one), or the mean of the two middle
// ones for an even count.
inline double Median(std::vector<double> values) {
  const size_t n = values.size(), mid = n / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  const double upper = values[mid];
  if (n % 2 == 1) return upper;
  return (*std::max_element(values.begin(), values.begin() + mid) + upper) / 2;
}

}  // namespace lrkv

#endif  // LRKV_BASE_MEDIAN_H_
