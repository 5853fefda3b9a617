// ThreadPool: a queue of jobs; each job hands out chunk indices through an atomic counter, and the
// caller takes chunks too, so a job finishes even when every worker is busy with other callers.
#include "zerorun/core/thread_pool.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>

#include "zerorun/core/error.h"
#include "zerorun/core/log.h"

namespace zerorun {

struct ThreadPool::Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t begin = 0;
  int64_t chunk = 1;
  int64_t end = 0;
  int64_t num_chunks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::condition_variable cv;
  std::exception_ptr error;
};

namespace {
thread_local bool t_in_pool_chunk = false;
std::mutex g_default_mu;
std::unique_ptr<ThreadPool> g_default;
}  // namespace

namespace {

// How long an idle worker (and a caller waiting for its last chunk) polls before sleeping on a
// futex. Waking a sleeping thread costs tens of microseconds on these VMs (the idle vCPU halts), and
// a training step issues a few hundred ParallelFor calls, most a few microseconds to milliseconds
// apart. Polling yields the CPU every few microseconds, and is off where the pools of the ranks on
// this host (LOCAL_SIZE from the launcher) outnumber its CPUs. ZERORUN_POOL_SPIN_US overrides it.
int64_t SpinNanos(int num_threads) {
  constexpr int64_t kDefaultSpinUs = 100;
  if (const char* e = std::getenv("ZERORUN_POOL_SPIN_US"); e != nullptr && *e != '\0') {
    char* end = nullptr;
    const long long us = std::strtoll(e, &end, 10);
    if (*end == '\0' && us >= 0) return static_cast<int64_t>(us) * 1000;
    ZR_WARN("ignoring ZERORUN_POOL_SPIN_US='{}' (expected microseconds >= 0); using {}", e, kDefaultSpinUs);
    return kDefaultSpinUs * 1000;
  }
  long ranks = 1;
  if (const char* l = std::getenv("LOCAL_SIZE"); l != nullptr && std::atol(l) > 0) ranks = std::atol(l);
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus > 0 && ranks * num_threads > cpus) return 0;
  return kDefaultSpinUs * 1000;
}

}  // namespace

// Polls done() for up to ns nanoseconds (pausing, and yielding the CPU every 64 polls); false if it
// never became true.
template <class Pred>
bool ThreadPool::SpinUntil(const Pred& done, int64_t ns) {
  if (done()) return true;
  if (ns <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  for (uint32_t i = 1;; ++i) {
    if (done()) return true;
    if (i % 64 == 0) {
      if (std::chrono::steady_clock::now() >= deadline) return done();
      sched_yield();
    } else {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)), spin_ns_(SpinNanos(num_threads_)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks(Job& job) {
  bool outer = t_in_pool_chunk;
  t_in_pool_chunk = true;
  for (;;) {
    int64_t c = job.next.fetch_add(1, std::memory_order_relaxed);
    if (c >= job.num_chunks) break;
    int64_t b = job.begin + c * job.chunk;
    int64_t e = std::min(job.end, b + job.chunk);
    try {
      (*job.fn)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.mu);
      if (!job.error) job.error = std::current_exception();
    }
    if (job.done.fetch_add(1, std::memory_order_acq_rel) + 1 == job.num_chunks) {
      std::lock_guard<std::mutex> lock(job.mu);
      job.cv.notify_all();
    }
  }
  t_in_pool_chunk = outer;
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        // Exhausted jobs at the front stay queued until their caller removes them; step over them.
        while (!queue_.empty() && queue_.front()->next.load(std::memory_order_relaxed) >= queue_.front()->num_chunks) {
          queue_.pop_front();
        }
        if (!queue_.empty()) {
          job = queue_.front();
          break;
        }
        if (stop_) return;
        const uint64_t seen = posted_.load(std::memory_order_relaxed);
        lock.unlock();
        const bool posted = SpinUntil([&] { return posted_.load(std::memory_order_acquire) != seen; }, spin_ns_);
        lock.lock();
        if (posted) continue;
        ++sleepers_;
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        --sleepers_;
      }
    }
    RunChunks(*job);
    std::lock_guard<std::mutex> lock(mu_);
    if (!queue_.empty() && queue_.front() == job) queue_.pop_front();
  }
}

void ThreadPool::ParallelFor(int64_t begin, int64_t end, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  int64_t n = end - begin;
  grain = std::max<int64_t>(1, grain);
  int64_t max_chunks = std::max<int64_t>(1, n / grain);
  int64_t chunks = std::min<int64_t>(max_chunks, static_cast<int64_t>(num_threads_) * 4);
  if (chunks <= 1 || num_threads_ == 1 || t_in_pool_chunk) {
    fn(begin, end);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->begin = begin;
  job->end = end;
  job->chunk = (n + chunks - 1) / chunks;
  job->num_chunks = (n + job->chunk - 1) / job->chunk;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(job);
    posted_.fetch_add(1, std::memory_order_release);
    wake = sleepers_ > 0;  // spinning workers see posted_; sleeping ones need the futex
  }
  if (wake) cv_.notify_all();
  RunChunks(*job);
  const auto finished = [&] { return job->done.load(std::memory_order_acquire) == job->num_chunks; };
  if (!SpinUntil(finished, spin_ns_)) {
    std::unique_lock<std::mutex> lock(job->mu);
    job->cv.wait(lock, finished);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(queue_.begin(), queue_.end(), job);
    if (it != queue_.end()) queue_.erase(it);
  }
  if (job->error) std::rethrow_exception(job->error);
}

int ThreadPool::DefaultThreadCount() {
  for (const char* name : {"ZERORUN_NUM_THREADS", "OMP_NUM_THREADS"}) {
    const char* env = std::getenv(name);
    if (env != nullptr && std::atoi(env) > 0) return std::atoi(env);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool& ThreadPool::Default() {
  std::lock_guard<std::mutex> lock(g_default_mu);
  if (!g_default) g_default = std::make_unique<ThreadPool>(DefaultThreadCount());
  return *g_default;
}

void ThreadPool::SetDefaultThreads(int num_threads) {
  std::lock_guard<std::mutex> lock(g_default_mu);
  g_default = std::make_unique<ThreadPool>(num_threads);
}

void ParallelFor(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::Default().ParallelFor(begin, end, grain, fn);
}

}  // namespace zerorun
