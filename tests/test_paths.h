// Paths to the shared model and data the tests read (never copied into the repo).
#ifndef LRKV_TESTS_TEST_PATHS_H_
#define LRKV_TESTS_TEST_PATHS_H_

#include <unistd.h>

#include <filesystem>
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

// A fresh, empty folder under the system temp dir, unique to this process.
inline std::filesystem::path FreshTempDir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() /
               ("lrkv_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

}  // namespace lrkv::testing

#endif  // LRKV_TESTS_TEST_PATHS_H_
