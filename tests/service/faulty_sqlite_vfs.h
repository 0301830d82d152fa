// A SQLite VFS for the tests that need a full disk at an exact moment: it passes every
// call to the default VFS, except that while FaultySqliteVfs::fail_writes() is set (or
// while the file it names exists) every write answers SQLITE_FULL, as a file system
// without space does. Installed as the default VFS by Install(), so a Store opened by
// path uses it; with the flag off it changes nothing.
#ifndef LRKV_TESTS_SERVICE_FAULTY_SQLITE_VFS_H_
#define LRKV_TESTS_SERVICE_FAULTY_SQLITE_VFS_H_

#include <sqlite3.h>
#include <sys/stat.h>

#include <atomic>
#include <string>

namespace lrkv::testing {

class FaultySqliteVfs {
 public:
  // Every write fails with SQLITE_FULL while set.
  static std::atomic<bool>& fail_writes() {
    static std::atomic<bool> flag{false};
    return flag;
  }
  // Every write fails while this file exists (a reserve the store may give up).
  static std::string& fail_while_exists() {
    static std::string path;
    return path;
  }
  // Writes refused so far.
  static std::atomic<int>& refused() {
    static std::atomic<int> n{0};
    return n;
  }

  static void Install() {
    static bool installed = [] {
      real() = sqlite3_vfs_find(nullptr);
      static sqlite3_vfs vfs = *real();
      vfs.zName = "lrkv-faulty";
      vfs.szOsFile = static_cast<int>(sizeof(File)) + real()->szOsFile;
      vfs.xOpen = &Open;
      return sqlite3_vfs_register(&vfs, /*makeDflt=*/1) == SQLITE_OK;
    }();
    (void)installed;
  }

 private:
  struct File {
    sqlite3_file base;
    sqlite3_file* real;
  };

  static sqlite3_vfs*& real() {
    static sqlite3_vfs* vfs = nullptr;
    return vfs;
  }
  static sqlite3_file* Real(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }

  static bool Failing() {
    if (fail_writes()) return true;
    struct stat st;
    const std::string& path = fail_while_exists();
    return !path.empty() && ::stat(path.c_str(), &st) == 0;
  }

  static int Write(sqlite3_file* f, const void* buf, int n, sqlite3_int64 off) {
    if (Failing()) {
      ++refused();
      return SQLITE_FULL;
    }
    return Real(f)->pMethods->xWrite(Real(f), buf, n, off);
  }
  static int Close(sqlite3_file* f) {
    const int rc = Real(f)->pMethods ? Real(f)->pMethods->xClose(Real(f)) : SQLITE_OK;
    return rc;
  }
  static int Read(sqlite3_file* f, void* b, int n, sqlite3_int64 o) {
    return Real(f)->pMethods->xRead(Real(f), b, n, o);
  }
  static int Truncate(sqlite3_file* f, sqlite3_int64 size) {
    return Real(f)->pMethods->xTruncate(Real(f), size);
  }
  static int Sync(sqlite3_file* f, int flags) { return Real(f)->pMethods->xSync(Real(f), flags); }
  static int FileSize(sqlite3_file* f, sqlite3_int64* size) {
    return Real(f)->pMethods->xFileSize(Real(f), size);
  }
  static int Lock(sqlite3_file* f, int l) { return Real(f)->pMethods->xLock(Real(f), l); }
  static int Unlock(sqlite3_file* f, int l) { return Real(f)->pMethods->xUnlock(Real(f), l); }
  static int CheckReservedLock(sqlite3_file* f, int* out) {
    return Real(f)->pMethods->xCheckReservedLock(Real(f), out);
  }
  static int FileControl(sqlite3_file* f, int op, void* arg) {
    return Real(f)->pMethods->xFileControl(Real(f), op, arg);
  }
  static int SectorSize(sqlite3_file* f) { return Real(f)->pMethods->xSectorSize(Real(f)); }
  static int DeviceCharacteristics(sqlite3_file* f) {
    return Real(f)->pMethods->xDeviceCharacteristics(Real(f));
  }
  static int ShmMap(sqlite3_file* f, int i, int size, int extend, void volatile** p) {
    return Real(f)->pMethods->xShmMap(Real(f), i, size, extend, p);
  }
  static int ShmLock(sqlite3_file* f, int offset, int n, int flags) {
    return Real(f)->pMethods->xShmLock(Real(f), offset, n, flags);
  }
  static void ShmBarrier(sqlite3_file* f) { Real(f)->pMethods->xShmBarrier(Real(f)); }
  static int ShmUnmap(sqlite3_file* f, int del) {
    return Real(f)->pMethods->xShmUnmap(Real(f), del);
  }
  static int Fetch(sqlite3_file* f, sqlite3_int64 off, int n, void** p) {
    return Real(f)->pMethods->xFetch(Real(f), off, n, p);
  }
  static int Unfetch(sqlite3_file* f, sqlite3_int64 off, void* p) {
    return Real(f)->pMethods->xUnfetch(Real(f), off, p);
  }

  static int Open(sqlite3_vfs*, const char* name, sqlite3_file* f, int flags, int* out_flags) {
    static const sqlite3_io_methods methods = {
        3,          &Close,      &Read,   &Write,        &Truncate,
        &Sync,      &FileSize,   &Lock,   &Unlock,       &CheckReservedLock,
        &FileControl, &SectorSize, &DeviceCharacteristics, &ShmMap, &ShmLock,
        &ShmBarrier, &ShmUnmap,   &Fetch,  &Unfetch};
    File* file = reinterpret_cast<File*>(f);
    file->real = reinterpret_cast<sqlite3_file*>(file + 1);
    const int rc = real()->xOpen(real(), name, file->real, flags, out_flags);
    // SQLite calls xClose only when pMethods is set: set it only for an opened file.
    file->base.pMethods = rc == SQLITE_OK && file->real->pMethods ? &methods : nullptr;
    return rc;
  }
};

}  // namespace lrkv::testing

#endif  // LRKV_TESTS_SERVICE_FAULTY_SQLITE_VFS_H_
