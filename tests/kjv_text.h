// Held-out text of the kjv-d64 test model (../shared/models/kjv-d64, trained
// on the first 95 % of the KJV's chapters): Revelation, read from Debian's
// `bible` program (bible-kjv, scripts/setup.sh).
#ifndef LRKV_TESTS_KJV_TEXT_H_
#define LRKV_TESTS_KJV_TEXT_H_

#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lrkv::testing {

// Held-out text of kjv-d64 (trained on the first 95 % of the KJV's chapters):
// Revelation, from Debian's `bible` program, in passages of about 600
// characters ending at a sentence, as scripts/compare_study.sh cuts them.
inline std::vector<std::string> RevelationPassages(size_t count) {
  std::vector<std::string> out;
  FILE* pipe = popen("bible -f Rev1:1-Rev22:21 2>/dev/null", "r");
  EXPECT_NE(pipe, nullptr);
  if (pipe == nullptr) return out;
  std::string text;
  char line[4096];
  while (fgets(line, sizeof line, pipe) != nullptr) {
    std::string l(line);
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
    // "Rev1:1 In the ..." starts a verse; other lines continue one.
    if (l.rfind("Rev", 0) == 0 && l.find(' ') != std::string::npos)
      l = l.substr(l.find(' ') + 1);
    if (!l.empty()) text += l + " ";
  }
  pclose(pipe);
  std::string passage;
  for (size_t i = 0; i < text.size() && out.size() < count; ++i) {
    passage += text[i];
    const bool end = (text[i] == '.' || text[i] == ';' || text[i] == ':' ||
                      text[i] == '?') &&
                     i + 1 < text.size() && text[i + 1] == ' ';
    if (end && passage.size() >= 600) {
      out.push_back(passage);
      passage.clear();
      ++i;  // the space after the sentence
    }
  }
  EXPECT_EQ(out.size(), count)
      << "is Debian's bible-kjv installed (scripts/setup.sh)?";
  return out;
}

}  // namespace lrkv::testing

#endif  // LRKV_TESTS_KJV_TEXT_H_
