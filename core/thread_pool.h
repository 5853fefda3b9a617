// A thread pool for CPU kernels. ParallelFor splits a range into chunks that the pool's workers and
// the calling thread take in turn; it returns when every chunk is done and rethrows the first
// exception a chunk threw. Several threads may call ParallelFor on one pool at once (the `local`
// backend runs ranks as threads); a ParallelFor issued from inside a chunk runs inline. Idle threads
// poll briefly before sleeping (ZERORUN_POOL_SPIN_US, thread_pool.cc).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace zerorun {

class ThreadPool {
 public:
  // `num_threads` is the total parallelism including the caller (>= 1): num_threads - 1 workers.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(chunk_begin, chunk_end) over [begin, end) in chunks of at least `grain` elements.
  void ParallelFor(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool, sized by DefaultThreadCount() on first use.
  static ThreadPool& Default();
  // Replaces the default pool (not while another thread is using it).
  static void SetDefaultThreads(int num_threads);
  // ZERORUN_NUM_THREADS, else OMP_NUM_THREADS, else the number of CPUs this process may run on.
  static int DefaultThreadCount();

 private:
  struct Job;
  void WorkerLoop();
  static void RunChunks(Job& job);
  template <class Pred>
  static bool SpinUntil(const Pred& done, int64_t ns);

  int num_threads_;
  int64_t spin_ns_;  // how long idle threads poll before sleeping (thread_pool.cc)
  std::atomic<uint64_t> posted_{0};  // jobs queued so far: what spinning workers watch
  int sleepers_ = 0;                 // workers waiting on cv_ (under mu_)
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
};

// ThreadPool::Default().ParallelFor(...)
void ParallelFor(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace zerorun
