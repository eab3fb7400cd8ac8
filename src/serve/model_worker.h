// One loaded model's executor: a bounded FIFO of jobs and the one thread
// that runs them in order, so a model's plans and caches are only ever
// touched by that thread. Full queue: submit() says so (the server answers
// 429); cancel drops a queued job at once and stops a running one at its
// next denoise step. With batch_images > 1, queued jobs of the front job's
// shape run with it as one batch.
//
//   ModelWorker worker("shapes", [&](const std::vector<Job*>& jobs) { return run_image_jobs(generator, jobs); },
//                      {.capacity = 16});
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

// Runs jobs (more than one only under a BatchPolicy), reporting progress on
// each job and asking job.cancel_requested between steps; returns, a job
// each in order, what still turns its result into bytes (PNG encoding): the
// worker calls it, or with overlap its encoder thread, beside the next run.
using JobResult = Result<std::vector<JobOutput>>;
using PendingResult = std::function<JobResult()>;
using JobRunner = std::function<std::vector<PendingResult>(const std::vector<Job*>&)>;

struct WorkerOptions {
  size_t capacity = 16;  // jobs that may wait
  // Which queued jobs may run with the one at the front: those with its key
  // (empty: none), taken in queue order while their images fit batch_images.
  int batch_images = 1;  // 1: every job alone
  std::function<std::string(const Job&)> batch_key;
  // Encode a run's outputs on a second thread while the next run starts.
  bool overlap_encoding = false;
};

// What /metrics shows of a worker.
struct WorkerFigures {
  size_t queued = 0;
  bool running = false;
  int64_t done = 0, failed = 0, cancelled = 0;
  int64_t steps_timed = 0;  // denoise steps with a measured time
  double step_seconds = 0;  // their total time
  int64_t outputs = 0;      // images and videos made
  int64_t runs = 0;         // batches run (a lone job is a batch of one)
  double busy_seconds = 0;  // time spent running jobs
};

class ModelWorker {
 public:
  ModelWorker(std::string model, JobRunner run, WorkerOptions options = {});
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
  void join();   // after close(): waits for the queue to empty and the threads to end

  const std::string& model() const { return model_; }
  WorkerFigures figures() const;
  // The jobs running now (a batch may hold several).
  std::vector<std::shared_ptr<Job>> running() const;

 private:
  // A run whose outputs are still to be encoded.
  struct Encoding {
    std::vector<std::shared_ptr<Job>> jobs;
    std::vector<PendingResult> results;
  };
  void loop();
  void encode_loop();
  void finish(Encoding run);  // encodes, ends the jobs, counts them

  const std::string model_;
  const JobRunner run_;
  const WorkerOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, encode_wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::shared_ptr<Job>> running_;
  std::deque<Encoding> encoding_;  // overlap: runs waiting for the encoder thread
  bool encoding_busy_ = false;     // overlap: the encoder thread holds a run
  bool closed_ = false, runs_over_ = false;
  WorkerFigures figures_;
  std::thread thread_, encoder_;
};

}  // namespace kiln::serve
