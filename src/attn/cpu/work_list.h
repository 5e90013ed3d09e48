// Balanced threading for the CPU attention: a list of independent tasks (a tile of one sequence and
// head), sorted longest first and claimed through one atomic counter, so a few very long sequences
// start early and the short ones fill the gaps. Every output element belongs to exactly one task,
// so results do not depend on the schedule or the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace varpack::cpu {

struct Task {
  int64_t seq = 0;    // sequence index b
  int head = 0;       // query head (forward, dq) or kv head (dk, dv)
  int64_t begin = 0;  // first row of the tile, relative to the sequence
  int64_t end = 0;
  int64_t cost = 0;   // estimated work, in score elements
};

// Stable: equal costs keep their order, so the list is the same on every run.
void sort_longest_first(std::vector<Task>& tasks);

// Runs fn(task) for every task on up to num_threads threads (0 = all hardware threads). An
// exception in any task is rethrown here after all threads have stopped.
void run_tasks(const std::vector<Task>& tasks, int num_threads, const std::function<void(const Task&)>& fn);

}  // namespace varpack::cpu
