// Paths to the shared model and data the tests read (never copied into the repo).
#ifndef LRKV_TESTS_TEST_PATHS_H_
#define LRKV_TESTS_TEST_PATHS_H_

#include <string>

namespace lrkv::testing {

inline std::string SharedPath(const std::string& rel) {
  return std::string(LRKV_SHARED_DIR) + "/" + rel;
}
inline std::string StoriesModelPath() { return SharedPath("models/stories260K.gguf"); }
inline std::string StoriesTextPath() {
  return SharedPath("data/tinystories-valid-excerpt.txt");
}
inline std::string FixturePath(const std::string& rel) {
  return std::string(LRKV_FIXTURES_DIR) + "/" + rel;
}

}  // namespace lrkv::testing

#endif  // LRKV_TESTS_TEST_PATHS_H_
