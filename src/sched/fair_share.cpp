#include "sched/fair_share.h"

#include <algorithm>

namespace cnlab::sched {

FairShareQueue::FairShareQueue(std::vector<double> project_usage, std::vector<double> project_share,
                               std::vector<double> user_usage, std::vector<double> user_share, double held_weight,
                               const std::vector<std::string>& project_names)
    : project_usage_(std::move(project_usage)),
      project_share_(std::move(project_share)),
      user_usage_(std::move(user_usage)),
      user_share_(std::move(user_share)),
      held_weight_(held_weight),
      project_names_(project_names),
      queue_of_project_(project_usage_.size(), UINT32_MAX) {}

void FairShareQueue::push(const JobInfo& job, double rank) {
  uint32_t& q = queue_of_project_[job.project];
  if (q == UINT32_MAX) {
    q = static_cast<uint32_t>(queues_.size());
    queues_.push_back({job.project, {}});
    heap_.push_back(q);
  }
  auto& users = queues_[q].users;
  auto it = std::find_if(users.begin(), users.end(), [&](const UserQueue& u) { return u.user == job.user; });
  if (it == users.end()) {
    users.push_back({job.user, {}});
    it = users.end() - 1;
  }
  it->jobs.emplace_back(rank, job.submitted, job.index);
  built_ = false;
}

bool FairShareQueue::project_after(uint32_t a, uint32_t b) const {
  uint32_t pa = queues_[a].project, pb = queues_[b].project;
  double ka = project_key(pa), kb = project_key(pb);
  return ka != kb ? ka > kb : project_names_[pa] > project_names_[pb];
}

bool FairShareQueue::user_after(const UserQueue& a, const UserQueue& b) const {
  double ka = user_key(a.user), kb = user_key(b.user);
  return ka != kb ? ka > kb : a.user > b.user;
}

void FairShareQueue::build() {
  auto user_after = [this](const UserQueue& a, const UserQueue& b) { return this->user_after(a, b); };
  auto project_after = [this](uint32_t a, uint32_t b) { return this->project_after(a, b); };
  for (ProjectQueue& q : queues_) {
    for (UserQueue& u : q.users) std::sort(u.jobs.begin(), u.jobs.end(), std::greater<>());
    std::make_heap(q.users.begin(), q.users.end(), user_after);
  }
  std::make_heap(heap_.begin(), heap_.end(), project_after);
  built_ = true;
}

JobIndex FairShareQueue::top() {
  if (!built_) build();
  return std::get<JobIndex>(queues_[heap_.front()].users.front().jobs.back());
}

void FairShareQueue::charge(const JobInfo& job, int blocks) {
  project_usage_[job.project] += blocks * held_weight_;
  user_usage_[job.user] += blocks * held_weight_;
}

void FairShareQueue::pop() {
  if (!built_) build();
  auto user_after = [this](const UserQueue& a, const UserQueue& b) { return this->user_after(a, b); };
  auto project_after = [this](uint32_t a, uint32_t b) { return this->project_after(a, b); };
  // Keys may have changed by charge() for the top project and user only; re-seat both.
  std::pop_heap(heap_.begin(), heap_.end(), project_after);
  uint32_t q = heap_.back();
  heap_.pop_back();
  auto& users = queues_[q].users;
  std::pop_heap(users.begin(), users.end(), user_after);
  users.back().jobs.pop_back();
  if (users.back().jobs.empty()) users.pop_back();
  else std::push_heap(users.begin(), users.end(), user_after);
  if (!users.empty()) {
    heap_.push_back(q);
    std::push_heap(heap_.begin(), heap_.end(), project_after);
  }
}

}  // namespace cnlab::sched
