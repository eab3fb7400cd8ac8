#include "serve/model_worker.h"

#include <algorithm>

namespace kiln::serve {

namespace {

int images_of(const Job& job) { return job.request.kind == JobKind::kImage ? job.request.image.batch : 1; }

}  // namespace

ModelWorker::ModelWorker(std::string model, size_t capacity, JobRunner run, BatchPolicy batching)
    : model_(std::move(model)),
      capacity_(capacity),
      run_(std::move(run)),
      batching_(std::move(batching)),
      thread_([this] { loop(); }) {}

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
  for (const auto& r : running_)
    if (r.get() == &job && !job_state_final(job.snapshot().state)) {
      job.cancel_requested = true;
      return true;
    }
  return false;
}

void ModelWorker::cancel_all() {
  std::deque<std::shared_ptr<Job>> dropped;
  {
    std::lock_guard lock(mutex_);
    dropped.swap(queue_);
    figures_.cancelled += int64_t(dropped.size());
    for (const auto& r : running_) r->cancel_requested = true;
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
  if (!running_.empty()) {
    const JobSnapshot s = running_[0]->snapshot();
    steps += std::max(0, s.steps - s.step);
  }
  return steps * per_step;
}

bool ModelWorker::idle() const {
  std::lock_guard lock(mutex_);
  return queue_.empty() && running_.empty();
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
  f.running = !running_.empty();
  return f;
}

std::vector<std::shared_ptr<Job>> ModelWorker::running() const {
  std::lock_guard lock(mutex_);
  return running_;
}

void ModelWorker::loop() {
  for (;;) {
    std::vector<Job*> batch;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return !queue_.empty() || closed_; });
      if (queue_.empty()) return;  // closed and drained
      running_ = {std::move(queue_.front())};
      queue_.pop_front();
      const std::string key = batching_.max_images > 1 && batching_.key ? batching_.key(*running_[0]) : "";
      int images = images_of(*running_[0]);
      for (auto it = queue_.begin(); !key.empty() && it != queue_.end();) {
        if (images + images_of(**it) <= batching_.max_images && batching_.key(**it) == key) {
          images += images_of(**it);
          running_.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      for (const auto& job : running_) batch.push_back(job.get());
    }
    for (Job* job : batch) job->start();
    const bool all_cancelled = std::all_of(batch.begin(), batch.end(), [](Job* j) { return j->cancel_requested.load(); });
    std::vector<JobResult> results = all_cancelled ? std::vector<JobResult>() : run_(batch);
    for (size_t i = 0; i < batch.size(); ++i)  // finish() keeps a job's first ending: a cancel during the batch
      batch[i]->finish(i < results.size() ? std::move(results[i]) : JobResult(Status(StatusCode::kCancelled, "cancelled")));
    std::lock_guard lock(mutex_);
    running_.clear();
    ++figures_.runs;
    for (Job* job : batch) {
      const JobSnapshot s = job->snapshot();
      figures_.busy_seconds += s.seconds / double(batch.size());
      const int timed = std::max(0, s.step - 1);  // the first step's interval is not a step's time (job.h)
      if (job == batch[0]) figures_.steps_timed += timed, figures_.step_seconds += s.step_seconds * timed;
      if (s.state == JobState::kDone) ++figures_.done, figures_.outputs += int64_t(s.outputs);
      else if (s.state == JobState::kFailed) ++figures_.failed;
      else ++figures_.cancelled;
    }
  }
}

}  // namespace kiln::serve
