// `zerorun`: starts a job's ranks on one machine or many. Options and modes: launcher/options.h,
// launcher/launch.h; user guide: docs/launcher.md.
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include <cstdio>
#include <string>
#include <vector>

#include "zerorun/core/error.h"
#include "zerorun/launcher/launch.h"
#include "zerorun/launcher/options.h"
#include "zerorun/launcher/supervisor.h"

int main(int argc, char** argv) {
  using namespace zerorun::launcher;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "sweep") {  // `zerorun sweep SPEC ...` is zerorun-sweep (docs/experiments.md)
    char self[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string("./zerorun");
    std::string sweep = dir.substr(0, dir.rfind('/') + 1) + "zerorun-sweep";
    argv[1] = const_cast<char*>(sweep.c_str());
    ::execv(sweep.c_str(), argv + 1);
    std::fprintf(stderr, "zerorun: error: cannot run %s: %s\n", sweep.c_str(), std::strerror(errno));
    return 2;
  }
  // Orphans of the ranks (daemonized helpers) are re-parented to us, so none outlives the job.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  int code = 2;
  try {
    InstallSignalHandlers();
    LaunchOptions opts = ParseArgs(args);
    if (opts.help) {
      std::fputs(HelpText().c_str(), stdout);
      return 0;
    }
    code = Launch(opts);
  } catch (const zerorun::Error& e) {
    std::fprintf(stderr, "zerorun: error: %s\n", e.what());
    code = 2;
  }
  int strays = KillStrayChildren();
  if (strays > 0) std::fprintf(stderr, "zerorun: killed %d leftover process(es) of the job\n", strays);
  return code;
}
