#include "serve/model_worker.h"

#include <algorithm>

namespace kiln::serve {

namespace {

int images_of(const Job& job) { return job.request.kind == JobKind::kImage ? job.request.image.batch : 1; }

}  // namespace

ModelWorker::ModelWorker(std::string model, JobRunner run, WorkerOptions options)
    : model_(std::move(model)), run_(std::move(run)), options_(std::move(options)), thread_([this] { loop(); }) {
  if (options_.overlap_encoding) encoder_ = std::thread([this] { encode_loop(); });
}

ModelWorker::~ModelWorker() {
  close();
  join();
}

Status ModelWorker::submit(const std::shared_ptr<Job>& job) {
  std::lock_guard lock(mutex_);
  if (closed_) return unsupported("the server is shutting down");
  if (queue_.size() >= options_.capacity) return resource_exhausted("the queue of {} is full", options_.capacity);
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
  return queue_.empty() && running_.empty() && encoding_.empty() && !encoding_busy_;
}

void ModelWorker::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  wake_.notify_all();
}

void ModelWorker::join() {
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard lock(mutex_);
    runs_over_ = true;
    encode_wake_.notify_all();
  }
  if (encoder_.joinable()) encoder_.join();
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
    Encoding run;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return !queue_.empty() || closed_; });
      if (queue_.empty()) return;  // closed and drained
      running_ = {std::move(queue_.front())};
      queue_.pop_front();
      const std::string key = options_.batch_images > 1 && options_.batch_key ? options_.batch_key(*running_[0]) : "";
      int images = images_of(*running_[0]);
      for (auto it = queue_.begin(); !key.empty() && it != queue_.end();) {
        if (images + images_of(**it) <= options_.batch_images && options_.batch_key(**it) == key) {
          images += images_of(**it);
          running_.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      run.jobs = running_;
    }
    std::vector<Job*> batch;
    for (const auto& job : run.jobs) batch.push_back(job.get()), job->start();
    if (!std::all_of(batch.begin(), batch.end(), [](Job* j) { return j->cancel_requested.load(); }))
      run.results = run_(batch);
    std::unique_lock lock(mutex_);
    running_.clear();
    if (options_.overlap_encoding) {
      encoding_.push_back(std::move(run));
      encode_wake_.notify_all();
    } else {
      lock.unlock();
      finish(std::move(run));
    }
  }
}

void ModelWorker::encode_loop() {
  for (;;) {
    Encoding run;
    {
      std::unique_lock lock(mutex_);
      encode_wake_.wait(lock, [&] { return !encoding_.empty() || runs_over_; });
      if (encoding_.empty()) return;
      run = std::move(encoding_.front());
      encoding_.pop_front();
      encoding_busy_ = true;
    }
    finish(std::move(run));
    std::lock_guard lock(mutex_);
    encoding_busy_ = false;
  }
}

void ModelWorker::finish(Encoding run) {
  std::vector<JobResult> results;
  for (size_t i = 0; i < run.jobs.size(); ++i)
    results.push_back(i < run.results.size() && run.results[i]
                          ? run.results[i]()
                          : JobResult(Status(StatusCode::kCancelled, "cancelled")));
  // Counted before the jobs end, so a client that has seen its job end sees it in /metrics too.
  {
    std::lock_guard lock(mutex_);
    ++figures_.runs;
    for (size_t i = 0; i < run.jobs.size(); ++i) {
      const JobSnapshot s = run.jobs[i]->snapshot();
      figures_.busy_seconds += s.seconds / double(run.jobs.size());
      const int timed = std::max(0, s.step - 1);  // the first step's interval is not a step's time (job.h)
      if (i == 0) figures_.steps_timed += timed, figures_.step_seconds += s.step_seconds * timed;
      // A job cancelled inside its batch has ended already; the others end with their result.
      const bool ended = job_state_final(s.state);
      if (ended ? s.state == JobState::kDone : results[i].ok()) {
        ++figures_.done;
        figures_.outputs += int64_t(ended ? s.outputs : results[i]->size());
      } else if (ended ? s.state == JobState::kFailed : results[i].status().code() != StatusCode::kCancelled) {
        ++figures_.failed;
      } else {
        ++figures_.cancelled;
      }
    }
  }
  for (size_t i = 0; i < run.jobs.size(); ++i) run.jobs[i]->finish(std::move(results[i]));  // the first ending counts
}

}  // namespace kiln::serve
