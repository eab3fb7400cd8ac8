// parallel_shares (kernels/cpu/parallel.h): every task runs once; each
// thread walks its own share from the front and others take from its back;
// a delayed thread's share is finished by the rest; a nested region's one
// thread runs everything.
#include "kernels/cpu/parallel.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln {
namespace {

// Sets the team size for one test, restoring it after.
class Threads {
 public:
  explicit Threads(int n) : saved_(omp_get_max_threads()), levels_(omp_get_max_active_levels()) {
    omp_set_num_threads(n);
  }
  ~Threads() {
    omp_set_num_threads(saved_);
    omp_set_max_active_levels(levels_);
  }

 private:
  int saved_, levels_;
};

struct TaskRun {
  int64_t task;
  int thread;
};

// Which thread ran each task, in the order each ran them.
std::vector<TaskRun> run_all(int64_t tasks, const std::function<void(int64_t)>& work = {}) {
  std::vector<TaskRun> runs;
  std::mutex lock;
  parallel_shares(tasks, true, [&](int64_t t) {
    if (work) work(t);
    const std::lock_guard<std::mutex> hold(lock);
    runs.push_back({t, omp_get_thread_num()});
  });
  return runs;
}

TEST(Parallel, SharesRunEveryTaskOnceOwnersFromTheFront) {
  for (const int team : {2, 3}) {
    const Threads threads(team);
    for (const int64_t tasks : {0, 1, 2, 3, 7, 100, 1001}) {
      SCOPED_TRACE("team " + std::to_string(team) + ", tasks " + std::to_string(tasks));
      const std::vector<TaskRun> runs = run_all(tasks);
      std::vector<int> count(size_t(tasks), 0);
      for (const TaskRun& r : runs) ++count[size_t(r.task)];
      for (int64_t t = 0; t < tasks; ++t) ASSERT_EQ(count[size_t(t)], 1) << "task " << t;
      if (tasks < 2) continue;
      // The tasks of share i that thread i ran: a prefix of the share, in order.
      for (int i = 0; i < team; ++i) {
        const int64_t first = tasks * i / team, end = tasks * (i + 1) / team;
        int64_t next = first;
        for (const TaskRun& r : runs) {
          if (r.thread == i && r.task >= first && r.task < end) {
            ASSERT_EQ(r.task, next++);
          }
        }
        for (const TaskRun& r : runs) {
          if (r.thread != i && r.task >= first && r.task < end) {
            EXPECT_GE(r.task, next) << "taken from the front";
          }
        }
      }
    }
  }
}

TEST(Parallel, SharesOfADelayedThreadAreTakenByTheOthers) {
  const Threads threads(2);
  constexpr int64_t kTasks = 20;
  const std::vector<TaskRun> runs = run_all(kTasks, [](int64_t t) {
    if (t == kTasks / 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // share 1's first
  });
  int64_t taken = 0;
  for (const TaskRun& r : runs) taken += r.task >= kTasks / 2 && r.thread == 0;
  EXPECT_GT(taken, 0) << "thread 0 waited for the delayed thread's share";
}

TEST(Parallel, SharesInANestedRegionRunOnItsOneThread) {
  const Threads threads(2);
  omp_set_max_active_levels(1);
  std::vector<TaskRun> inner[2];
#pragma omp parallel num_threads(2)
  inner[omp_get_thread_num()] = run_all(9);
  for (const std::vector<TaskRun>& runs : inner) {
    ASSERT_EQ(runs.size(), 9u);
    std::vector<int> count(9, 0);
    for (const TaskRun& r : runs) {
      EXPECT_EQ(r.thread, 0);
      ++count[size_t(r.task)];
    }
    for (const int c : count) EXPECT_EQ(c, 1);
  }
}

}  // namespace
}  // namespace kiln
