#include "train/cli/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/process_model.h"
#include "runtime/schedule/explore.h"
#include "train/cli/flags.h"

namespace dtsim::cli {
namespace {

// The temporary files that exist now, for the signal handler: fixed storage, no allocation.
constexpr int kSlots = 16;
// How long commit() waits for a FIFO's reader.
constexpr std::chrono::seconds kReaderDeadline{10};
char g_tmp_path[kSlots][PATH_MAX];
std::atomic<bool> g_tmp_used[kSlots];

// Async-signal-safe, and safe from any thread.
void remove_temporaries() {
  for (int i = 0; i < kSlots; ++i) {
    if (g_tmp_used[i].load(std::memory_order_acquire)) unlink(g_tmp_path[i]);
  }
}

void remove_temporaries_and_die(int sig) {
  remove_temporaries();
  // SA_RESETHAND restored the default action: the process dies of `sig` once this returns,
  // so that the shell sees 128 + sig and a calling script stops as for any killed program.
  raise(sig);
}

void install_handlers_once() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  // Under mpirun the MPI process takes over SIGTERM / SIGINT and calls this before exiting.
  set_termination_cleanup(remove_temporaries);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    struct sigaction old {};
    sigaction(sig, nullptr, &old);
    if (old.sa_handler == SIG_IGN) continue;  // nohup and friends: keep ignoring
    struct sigaction sa {};
    sa.sa_handler = remove_temporaries_and_die;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

// Where each declared output goes, to reject the same file twice.
struct Identity {
  bool is_stdout = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string new_path;  // a file that does not exist yet: its absolute path
  std::string flag;
};
std::vector<Identity> g_declared;

int g_stdout_fd = -1;  // the original standard output once an output took it

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string errno_text() { return std::strerror(errno); }

// Whether `head`, the start of a file, carries dtsim's generator mark where dtsim puts it
// (output_file.h): a JSON object whose first field it is, an HTML page's head, a schedule
// file's first line. A file that only quotes a mark elsewhere is not dtsim's.
bool marked(std::string_view head) {
  if (head.starts_with(schedule::kScheduleMagic) &&
      head.substr(std::string_view(schedule::kScheduleMagic).size()).starts_with("\n")) {
    return true;
  }
  if (head.starts_with("{")) {
    const size_t field = head.find_first_not_of(" \n", 1);
    if (field == std::string_view::npos) return false;
    const std::string_view rest = head.substr(field);
    return rest.starts_with("\"generator\": \"dtsim ") ||
           rest.starts_with("\"generator\":\"dtsim ");
  }
  if (head.starts_with("<!doctype html>")) {
    const size_t meta = head.find("<meta name=\"generator\" content=\"dtsim ");
    return meta != std::string_view::npos && meta < head.find("</head>");
  }
  return false;
}

// Why the regular file at `path` (of `size` bytes) may not be replaced, or "" when it may:
// empty, or marked as dtsim's in its first 4 KiB.
std::string not_replaceable(const std::string& path, off_t size) {
  if (size == 0) return "";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return "exists and cannot be read to tell whether dtsim wrote it (" + errno_text() + ")";
  char head[4096];
  size_t got = 0;
  for (;;) {  // a short read is not the end of the file
    const ssize_t n = read(fd, head + got, sizeof head - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
    if (got == sizeof head) break;
  }
  close(fd);
  if (marked(std::string_view(head, got))) return "";
  return "exists and is not a file dtsim wrote; pick another name, or remove the file first if "
         "it may go";
}

// Makes a unique FILE.XXXXXX beside `target` (like mkstemp) and enters it in the signal
// handler's table, with signals blocked in between so that a signal never finds a temporary
// file outside the table. Returns its descriptor and sets *tmp and *slot, or returns -1 with
// errno set. drop_temporary() takes it out of the table again (and removes it if `remove`).
int make_temporary(const std::string& target, std::string* tmp, int* slot) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  for (*slot = 0; *slot < kSlots && g_tmp_used[*slot].load(); ++*slot) {
  }
  *tmp = target + ".XXXXXX";
  int fd = -1, err = EMFILE;  // every slot taken
  if (*slot < kSlots && tmp->size() >= PATH_MAX) {
    err = ENAMETOOLONG;
  } else if (*slot < kSlots) {
    fd = mkstemp(tmp->data());
    err = errno;
  }
  if (fd >= 0) {
    std::memcpy(g_tmp_path[*slot], tmp->c_str(), tmp->size() + 1);
    g_tmp_used[*slot].store(true, std::memory_order_release);
  } else {
    *slot = -1;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = err;
  return fd;
}

void drop_temporary(const std::string& tmp, int* slot, bool remove) {
  if (remove) unlink(tmp.c_str());
  if (*slot >= 0) g_tmp_used[*slot].store(false, std::memory_order_release);
  *slot = -1;
}

void write_all(int fd, const std::string& text, const std::string& name) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("cannot write " + name + ": " + errno_text());
    done += static_cast<size_t>(n);
  }
}

}  // namespace

OutputFile::OutputFile(const std::string& command, const std::string& flag, const std::string& path,
                       bool writer)
    : path_(path) {
  const std::string what = "--" + flag + " " + path;
  if (path.empty()) fail(command, "--" + flag + " needs a file name (or - for standard output)");
  Identity id;
  id.flag = flag;
  struct stat out {
  }, st{}, link{};
  const bool have_stdout = fstat(STDOUT_FILENO, &out) == 0;
  if (path == "-") {
    id.is_stdout = true;
  } else if (lstat(path.c_str(), &link) != 0) {
    if (errno != ENOENT) fail(command, what + " cannot be used (" + errno_text() + ")");
    const std::string folder = folder_of(path);
    struct stat dir {};
    if (stat(folder.c_str(), &dir) != 0 || !S_ISDIR(dir.st_mode)) {
      fail(command, what + ": folder " + folder + " does not exist (create it first)");
    }
    if (path.back() == '/') fail(command, what + " names a folder; give a file name");
    char real[PATH_MAX];
    if (realpath(folder.c_str(), real) == nullptr) fail(command, what + ": " + errno_text());
    target_ = path;
    id.new_path = std::string(real) + "/" + path.substr(path.rfind('/') + 1);  // npos + 1 == 0
    kind_ = Kind::kReplace;
  } else if (stat(path.c_str(), &st) != 0) {
    fail(command,
         what + " is a symlink to nothing (" + errno_text() + "); remove it or pick another name");
  } else if (S_ISDIR(st.st_mode)) {
    const std::string example = flag == "html"            ? "report.html"
                                : flag == "schedule-file" ? "schedule.txt"
                                                          : flag + ".json";
    fail(command, what + " is a folder; give a file name, e.g. " + path +
                      (path.back() == '/' ? "" : "/") + example);
  } else if (have_stdout && st.st_dev == out.st_dev && st.st_ino == out.st_ino) {
    id.is_stdout = true;  // /dev/stdout, /proc/self/fd/1, or the file stdout is redirected to
  } else if (S_ISREG(st.st_mode)) {
    const std::string why = not_replaceable(path, st.st_size);
    if (!why.empty()) fail(command, what + " " + why);
    char real[PATH_MAX];
    if (realpath(path.c_str(), real) == nullptr) fail(command, what + ": " + errno_text());
    target_ = real;  // a symlink keeps pointing at the file we replace
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    kind_ = Kind::kReplace;
  } else {
    if (access(path.c_str(), W_OK) != 0) {
      fail(command, what + " cannot be written (" + errno_text() + ")");
    }
    kind_ = Kind::kInPlace;  // a device or a FIFO: written where it is, never replaced
  }
  if (id.is_stdout) kind_ = Kind::kStdout;
  name_ = id.is_stdout ? "standard output" : path_;

  for (const Identity& other : g_declared) {
    const bool same =
        kind_ != Kind::kInPlace && ((id.is_stdout && other.is_stdout) ||
                                    (!id.new_path.empty() && id.new_path == other.new_path) ||
                                    (id.ino != 0 && id.dev == other.dev && id.ino == other.ino));
    if (same) {
      fail(command,
           what + " is the same file as --" + other.flag + "; give each output its own file");
    }
  }

  if (!writer) {
    g_declared.push_back(std::move(id));
    kind_ = Kind::kNone;
    return;
  }
  if (kind_ == Kind::kReplace) {
    // A probe: the folder takes a FILE.XXXXXX now, so that commit() will not fail for it.
    install_handlers_once();
    std::string probe;
    int slot = -1;
    const int fd = make_temporary(target_, &probe, &slot);
    if (fd < 0) fail(command, what + " cannot be written (" + errno_text() + ")");
    close(fd);
    drop_temporary(probe, &slot, /*remove=*/true);
    // The permissions a plain create would give, or those of the file we replace.
    const mode_t mask = umask(0);
    umask(mask);
    mode_ = st.st_ino != 0 ? (st.st_mode & 07777) : (0666 & ~mask);
  }
  if (kind_ == Kind::kStdout && g_stdout_fd < 0) {
    // Standard output now carries the file alone; the command's text goes to stderr.
    std::fflush(stdout);
    g_stdout_fd = dup(STDOUT_FILENO);
    dup2(STDERR_FILENO, STDOUT_FILENO);
  }
  g_declared.push_back(std::move(id));
}

OutputFile::OutputFile(OutputFile&& o) noexcept { *this = std::move(o); }

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this != &o) {
    discard();
    kind_ = std::exchange(o.kind_, Kind::kNone);
    path_ = std::move(o.path_);
    name_ = std::move(o.name_);
    target_ = std::move(o.target_);
    mode_ = o.mode_;
    staged_ = std::exchange(o.staged_, false);
    staged_tmp_ = std::move(o.staged_tmp_);
    o.staged_tmp_.clear();
    staged_slot_ = std::exchange(o.staged_slot_, -1);
    staged_text_ = std::move(o.staged_text_);
  }
  return *this;
}

OutputFile::~OutputFile() {
  if (staged_ && !staged_tmp_.empty()) drop_temporary(staged_tmp_, &staged_slot_, true);
  discard();
}

void OutputFile::stage(const std::string& text) {
  if (kind_ != Kind::kReplace) {
    staged_text_ = text;
    staged_ = true;
    return;
  }
  int slot = -1;
  std::string tmp;
  const int fd = make_temporary(target_, &tmp, &slot);
  if (fd < 0) throw std::runtime_error("cannot write " + path_ + ": " + errno_text());
  std::string why;
  try {
    fchmod(fd, mode_);
    write_all(fd, text, path_);
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (close(fd) != 0 && why.empty()) why = "cannot write " + path_ + ": " + errno_text();
  if (!why.empty()) {
    drop_temporary(tmp, &slot, /*remove=*/true);
    discard();
    throw std::runtime_error(why);
  }
  staged_tmp_ = tmp;
  staged_slot_ = slot;
  staged_ = true;
}

void OutputFile::commit_all(std::initializer_list<OutputFile*> outputs) {
  for (OutputFile* o : outputs) {
    if (o->open() && o->staged_ && o->kind_ != Kind::kReplace) o->commit_staged();
  }
  for (OutputFile* o : outputs) {
    if (o->open() && o->staged_) o->commit_staged();
  }
}

void OutputFile::commit_staged() {
  if (!staged_) throw std::logic_error("OutputFile::commit_staged without stage()");
  staged_ = false;
  if (kind_ != Kind::kReplace) {
    commit(staged_text_);
    return;
  }
  const bool renamed = std::rename(staged_tmp_.c_str(), target_.c_str()) == 0;
  const std::string why = renamed ? "" : "cannot write " + path_ + ": " + errno_text();
  drop_temporary(staged_tmp_, &staged_slot_, /*remove=*/!renamed);
  staged_tmp_.clear();
  discard();
  if (!renamed) throw std::runtime_error(why);
}

void OutputFile::discard() noexcept { kind_ = Kind::kNone; }

void OutputFile::commit(const std::string& text) {
  switch (kind_) {
    case Kind::kNone:
      throw std::runtime_error("output file " + path_ + " is not open");
    case Kind::kStdout:
      write_all(g_stdout_fd, text, "standard output");
      break;
    case Kind::kInPlace: {
      // Opening a FIFO for writing blocks until it has a reader: wait for one at most
      // kReaderDeadline, then fail, rather than hang after the run.
      const auto deadline = std::chrono::steady_clock::now() + kReaderDeadline;
      int fd = -1;
      while ((fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK)) < 0 &&
             errno == ENXIO && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (fd < 0 && errno == ENXIO) {
        throw std::runtime_error("cannot write " + path_ +
                                 ": no process opened it for reading within " +
                                 std::to_string(kReaderDeadline.count()) +
                                 " s (start its reader first, as in cat " + path_ + " &)");
      }
      if (fd < 0) throw std::runtime_error("cannot write " + path_ + ": " + errno_text());
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      try {
        write_all(fd, text, path_);
      } catch (...) {
        close(fd);
        throw;
      }
      if (close(fd) != 0) throw std::runtime_error("cannot write " + path_ + ": " + errno_text());
      break;
    }
    case Kind::kReplace:  // a temporary file beside the target, renamed over it
      stage(text);
      commit_staged();
      return;
  }
  discard();
}

bool may_write(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return errno == ENOENT;
  return S_ISREG(st.st_mode) && not_replaceable(path, st.st_size).empty();
}

std::string json_with_generator(const std::string& object_text, const std::string& generator) {
  if (object_text.size() < 3 || object_text.front() != '{') {
    throw std::logic_error("json_with_generator: not a JSON object with fields");
  }
  // Indented text opens with "{\n" and the first field's indent; compact text with "{\"".
  const bool indented = object_text[1] == '\n';
  const size_t indent = indented ? object_text.find_first_not_of(' ', 2) - 2 : 0;
  std::string field = "\"generator\":";
  if (indented) field = "\n" + std::string(indent, ' ') + field + " ";
  field += "\"" + generator + "\",";  // dtsim's own names: nothing to escape
  std::string out = object_text;
  out.insert(1, field);
  return out;
}

std::string html_generator_meta(const std::string& generator) {
  return "<meta name=\"generator\" content=\"" + generator + "\">\n";
}

}  // namespace dtsim::cli
