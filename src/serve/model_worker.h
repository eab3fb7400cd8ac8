// One loaded model's executor: a bounded FIFO of jobs and the one thread
// that runs them in order, so a model's plans and caches are only ever
// touched by that thread. Full queue: submit() says so (the server answers
// 429); cancel drops a queued job at once and stops a running one at its
// next denoise step. Under a BatchPolicy, queued jobs of the front job's
// shape run with it as one batch.
//
//   ModelWorker worker("shapes", 16, [&](const std::vector<Job*>& jobs) { return run_image_jobs(generator, jobs); });
//   KILN_RETURN_IF_ERROR(worker.submit(job));   // ResourceExhausted: the queue is full
//   worker.cancel(*job);
//   worker.close(); worker.join();              // shutdown: no new jobs, the thread ends
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "serve/job.h"

namespace kiln::serve {

// Runs jobs to their outputs (one result a job, in order), reporting
// progress on each job and asking job.cancel_requested between steps. More
// than one job only under a BatchPolicy.
using JobResult = Result<std::vector<JobOutput>>;
using JobRunner = std::function<std::vector<JobResult>(const std::vector<Job*>&)>;

// Which queued jobs may run with the one at the front: those with its key
// (empty: none), taken in queue order while their images fit max_images.
struct BatchPolicy {
  int max_images = 1;  // 1: every job alone
  std::function<std::string(const Job&)> key;
};

// What /metrics shows of a worker.
struct WorkerFigures {
  size_t queued = 0;
  bool running = false;
  int64_t done = 0, failed = 0, cancelled = 0;
  int64_t steps_timed = 0;      // denoise steps with a measured time
  double step_seconds = 0;      // their total time
  int64_t outputs = 0;          // images and videos made
  int64_t runs = 0;             // batches run (a lone job is a batch of one)
  double busy_seconds = 0;      // time spent running jobs
};

class ModelWorker {
 public:
  ModelWorker(std::string model, size_t capacity, JobRunner run, BatchPolicy batching = {});
  ~ModelWorker();  // close() and join()

  // Queues the job (its "queued" event says where); ResourceExhausted when
  // the queue holds `capacity` jobs, Unsupported once closed.
  Status submit(const std::shared_ptr<Job>& job);
  // Queued: removed and marked cancelled now. Running: stops at the next
  // step. False when the job has already ended.
  bool cancel(Job& job);
  void cancel_all();
  // 1 for the next job to run; 0 when not queued.
  size_t position(const Job& job) const;
  // Seconds until a job queued now would start, from the measured step times (an estimate).
  double wait_estimate() const;
  bool idle() const;

  void close();  // refuse new jobs; the queued ones still run
  void join();   // after close(): waits for the queue to empty and the thread to end

  const std::string& model() const { return model_; }
  WorkerFigures figures() const;
  // The jobs running now (a batch may hold several).
  std::vector<std::shared_ptr<Job>> running() const;

 private:
  void loop();

  const std::string model_;
  const size_t capacity_;
  const JobRunner run_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  const BatchPolicy batching_;
  std::vector<std::shared_ptr<Job>> running_;
  bool closed_ = false;
  WorkerFigures figures_;
  std::thread thread_;
};

}  // namespace kiln::serve
