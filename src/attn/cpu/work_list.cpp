// Dynamic work stealing over a cost-sorted task list (see work_list.h).
#include "work_list.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

namespace varpack::cpu {

void sort_longest_first(std::vector<Task>& tasks) {
  std::stable_sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) { return a.cost > b.cost; });
}

void run_tasks(const std::vector<Task>& tasks, int num_threads, const std::function<void(const Task&)>& fn) {
  if (tasks.empty()) return;
  int64_t threads = num_threads > 0 ? num_threads : static_cast<int64_t>(std::thread::hardware_concurrency());
  threads = std::clamp<int64_t>(threads, 1, static_cast<int64_t>(tasks.size()));
  if (threads <= 1) {
    for (const Task& t : tasks) fn(t);
    return;
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (size_t i = next.fetch_add(1); i < tasks.size() && !failed.load(); i = next.fetch_add(1)) {
      try {
        fn(tasks[i]);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();  // the calling thread works too
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace varpack::cpu
