#include "serve/job.h"

#include <fmt/format.h>

#include <random>

namespace kiln::serve {

namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

const char* job_state_name(JobState state) {
  switch (state) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kDone: return "done";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "unknown";
}

std::string new_job_id() {
  static std::mutex mutex;
  static std::mt19937_64 random{std::random_device{}()};
  std::lock_guard lock(mutex);
  return fmt::format("job-{:016x}", random());
}

Job::Job(std::string id_, std::string model_, JobRequest request_)
    : id(std::move(id_)),
      model(std::move(model_)),
      request(std::move(request_)),
      created(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count()) {}

void Job::publish(std::string type, nlohmann::json data) {
  events_.push_back({std::move(type), std::move(data)});
  changed_.notify_all();
}

void Job::queued(size_t position) {
  std::lock_guard lock(mutex_);
  publish("queued", {{"position", position}});
}

void Job::start() {
  std::lock_guard lock(mutex_);
  state_.state = JobState::kRunning;
  state_.stage = "encoding";
  started_ = last_step_ = std::chrono::steady_clock::now();
  publish("started", nlohmann::json::object());
}

void Job::step(int index, int steps) {
  std::lock_guard lock(mutex_);
  if (job_state_final(state_.state)) return;  // cancelled inside a batch that runs on
  const auto now = std::chrono::steady_clock::now();
  // The first step's interval holds the text encoder and compiling: not a step's time.
  if (state_.step > 0) step_seconds_sum_ += seconds_between(last_step_, now), ++steps_timed_;
  last_step_ = now;
  state_.stage = "denoising";
  state_.step = index + 1;
  state_.steps = steps;
  publish("step", {{"step", index + 1}, {"steps", steps}});
}

void Job::decoding(int64_t done, int64_t total) {
  std::lock_guard lock(mutex_);
  if (job_state_final(state_.state)) return;
  state_.stage = "decoding";
  publish("decoding", {{"done", done}, {"total", total}});
}

void Job::finish(Result<std::vector<JobOutput>> outputs) {
  std::lock_guard lock(mutex_);
  if (job_state_final(state_.state)) return;  // a job cancelled inside a batch has ended already
  ended_ = std::chrono::steady_clock::now();
  state_.seconds = started_.time_since_epoch().count() ? seconds_between(started_, ended_) : 0;
  state_.stage.clear();
  if (outputs.ok()) {
    outputs_ = std::move(*outputs);
    state_.state = JobState::kDone;
    state_.outputs = outputs_.size();
    nlohmann::json seeds = nlohmann::json::array();
    for (const JobOutput& o : outputs_) seeds.push_back(o.seed);
    publish("done", {{"outputs", outputs_.size()}, {"seeds", seeds}, {"seconds", state_.seconds}});
  } else if (outputs.status().code() == StatusCode::kCancelled) {
    state_.state = JobState::kCancelled;
    publish("cancelled", {{"message", outputs.status().message()}});
  } else {
    state_.state = JobState::kFailed;
    state_.error = outputs.status().message();
    state_.error_code = outputs.status().code();
    publish("failed", {{"message", state_.error}});
  }
}

JobSnapshot Job::snapshot() const {
  std::lock_guard lock(mutex_);
  JobSnapshot s = state_;
  if (s.state == JobState::kRunning) s.seconds = seconds_between(started_, std::chrono::steady_clock::now());
  s.step_seconds = steps_timed_ ? step_seconds_sum_ / steps_timed_ : 0;
  return s;
}

std::vector<JobEvent> Job::events_after(size_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return events_.size() > seen; });
  if (events_.size() <= seen) return {};
  return {events_.begin() + std::ptrdiff_t(seen), events_.end()};
}

bool Job::wait_final(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return job_state_final(state_.state); });
}

JobOutput Job::output(size_t index) const {
  std::lock_guard lock(mutex_);
  return index < outputs_.size() ? outputs_[index] : JobOutput{};
}

std::vector<JobOutput> Job::outputs() const {
  std::lock_guard lock(mutex_);
  return outputs_;
}

double Job::seconds_since_final() const {
  std::lock_guard lock(mutex_);
  if (!job_state_final(state_.state)) return -1;
  return seconds_between(ended_, std::chrono::steady_clock::now());
}

}  // namespace kiln::serve
