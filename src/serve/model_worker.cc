#include "serve/model_worker.h"

#include <algorithm>

namespace kiln::serve {

ModelWorker::ModelWorker(std::string model, size_t capacity, JobRunner run)
    : model_(std::move(model)), capacity_(capacity), run_(std::move(run)), thread_([this] { loop(); }) {}

ModelWorker::~ModelWorker() {
  close();
  join();
}

Status ModelWorker::submit(const std::shared_ptr<Job>& job) {
  std::lock_guard lock(mutex_);
  if (closed_) return unsupported("the server is shutting down");
  if (queue_.size() >= capacity_) return resource_exhausted("the queue of {} is full", capacity_);
  queue_.push_back(job);
  job->queued(queue_.size());
  wake_.notify_all();
  return ok_status();
}

bool ModelWorker::cancel(Job& job) {
  std::unique_lock lock(mutex_);
  auto it = std::find_if(queue_.begin(), queue_.end(), [&](const auto& j) { return j.get() == &job; });
  if (it != queue_.end()) {
    std::shared_ptr<Job> dropped = *it;
    queue_.erase(it);
    ++figures_.cancelled;
    lock.unlock();
    dropped->finish(Status(StatusCode::kCancelled, "cancelled while queued"));
    return true;
  }
  if (running_.get() != &job) return false;
  job.cancel_requested = true;
  return true;
}

void ModelWorker::cancel_all() {
  std::deque<std::shared_ptr<Job>> dropped;
  {
    std::lock_guard lock(mutex_);
    dropped.swap(queue_);
    figures_.cancelled += int64_t(dropped.size());
    if (running_) running_->cancel_requested = true;
  }
  for (const auto& job : dropped) job->finish(Status(StatusCode::kCancelled, "cancelled: the server is shutting down"));
}

size_t ModelWorker::position(const Job& job) const {
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < queue_.size(); ++i)
    if (queue_[i].get() == &job) return i + 1;
  return 0;
}

double ModelWorker::wait_estimate() const {
  std::lock_guard lock(mutex_);
  const double per_step = figures_.steps_timed ? figures_.step_seconds / double(figures_.steps_timed) : 1.0;
  double steps = 0;
  for (const auto& job : queue_)
    steps += job->request.kind == JobKind::kVideo ? job->request.video.steps : job->request.image.steps;
  if (running_) {
    const JobSnapshot s = running_->snapshot();
    steps += std::max(0, s.steps - s.step);
  }
  return steps * per_step;
}

bool ModelWorker::idle() const {
  std::lock_guard lock(mutex_);
  return queue_.empty() && !running_;
}

void ModelWorker::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  wake_.notify_all();
}

void ModelWorker::join() {
  if (thread_.joinable()) thread_.join();
}

WorkerFigures ModelWorker::figures() const {
  std::lock_guard lock(mutex_);
  WorkerFigures f = figures_;
  f.queued = queue_.size();
  f.running = running_ != nullptr;
  return f;
}

void ModelWorker::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return !queue_.empty() || closed_; });
      if (queue_.empty()) return;  // closed and drained
      job = std::move(queue_.front());
      queue_.pop_front();
      running_ = job;
    }
    job->start();
    job->finish(job->cancel_requested ? Result<std::vector<JobOutput>>(Status(StatusCode::kCancelled, "cancelled"))
                                      : run_(*job));
    const JobSnapshot s = job->snapshot();
    std::lock_guard lock(mutex_);
    running_.reset();
    figures_.busy_seconds += s.seconds;
    const int timed = std::max(0, s.step - 1);  // the first step's interval is not a step's time (job.h)
    figures_.steps_timed += timed;
    figures_.step_seconds += s.step_seconds * timed;
    if (s.state == JobState::kDone) ++figures_.done, figures_.outputs += int64_t(s.outputs);
    else if (s.state == JobState::kFailed) ++figures_.failed;
    else ++figures_.cancelled;
  }
}

}  // namespace kiln::serve
