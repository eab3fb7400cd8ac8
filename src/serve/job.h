// One request's life on the server: queued, running (step i of N, then
// decoding), and done, failed or cancelled; its outputs; and the events
// that tell it, in order, for the server-sent-event stream and the status
// endpoints. Every member is safe to call from any thread: the worker
// writes, HTTP threads read and wait.
//
//   auto job = std::make_shared<Job>(new_job_id(), "shapes", std::move(request));
//   job->start();  job->step(0, 20);  ...  job->finish(outputs_or_error);
//   for (size_t seen = 0;;) { auto events = job->events_after(seen, 15s); ... }
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "serve/api_request.h"

namespace kiln::serve {

enum class JobState { kQueued, kRunning, kDone, kFailed, kCancelled };
const char* job_state_name(JobState state);  // "queued", "running", "done", "failed", "cancelled"
inline bool job_state_final(JobState s) {
  return s == JobState::kDone || s == JobState::kFailed || s == JobState::kCancelled;
}

struct JobOutput {
  std::string content_type;  // image/png, video/mp4
  std::vector<uint8_t> bytes;
  uint64_t seed = 0;
};

struct JobEvent {
  std::string type;  // queued, started, step, decoding, done, failed, cancelled
  nlohmann::json data;
};

// What the status endpoints show, read at one instant.
struct JobSnapshot {
  JobState state = JobState::kQueued;
  std::string stage;        // "", encoding, denoising, decoding
  int step = 0, steps = 0;  // steps done, of how many
  std::string error;
  StatusCode error_code = StatusCode::kOk;
  size_t outputs = 0;
  double seconds = 0;       // running time so far, or in all
  double step_seconds = 0;  // the mean time of a denoise step (0 until two steps)
};

class Job {
 public:
  Job(std::string id, std::string model, JobRequest request);

  const std::string id, model;
  const JobRequest request;
  const int64_t created;  // unix seconds
  std::atomic<bool> cancel_requested{false};

  // The worker's side. After the job has ended, step() and decoding() do nothing.
  void queued(size_t position);
  void start();
  void step(int index, int steps);  // after denoise step `index`
  void decoding(int64_t done, int64_t total);
  void finish(Result<std::vector<JobOutput>> outputs);  // the first ending counts; later ones are ignored

  // The readers' side.
  JobSnapshot snapshot() const;
  // The events after the first `seen`, waiting up to `timeout` for one when there are none yet.
  std::vector<JobEvent> events_after(size_t seen, std::chrono::milliseconds timeout) const;
  // Waits until the job has ended (or the timeout passed); true when it has.
  bool wait_final(std::chrono::milliseconds timeout) const;
  // Output `index` (a copy; empty bytes when there is none).
  JobOutput output(size_t index) const;
  std::vector<JobOutput> outputs() const;
  // Seconds since the job ended; negative while it has not.
  double seconds_since_final() const;

 private:
  void publish(std::string type, nlohmann::json data);  // with mutex_ held

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  JobSnapshot state_;
  std::vector<JobEvent> events_;
  std::vector<JobOutput> outputs_;
  std::chrono::steady_clock::time_point started_, last_step_, ended_;
  double step_seconds_sum_ = 0;
  int steps_timed_ = 0;
};

// "job-" and 16 random hex digits.
std::string new_job_id();

}  // namespace kiln::serve
