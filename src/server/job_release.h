// A checkpointable job pre-empted while it ran (model::PendingRelease): Pending, but left out of
// scheduling until the nodes it ran on have stopped it and stored the checkpoint they took as it
// stopped. Without the wait, a node with room elsewhere could start it again at once, from its
// previous checkpoint, while the first copy still runs and is being dumped.
//
// A node releases the job through POST /v1/jobs/{id}/release (release_api.cpp) once its agent has
// stopped it and uploaded its checkpoint, or found it could not; a node that is lost or deleted
// releases it by going; and a job not released within the server's --release-timeout is let go
// anyway (the node's agent died, or restarted and lost track of it), with an event that says so.
#pragma once

#include <map>
#include <string>

#include "model/model.h"
#include "server/object_cache.h"
#include "store/store.h"

namespace cnlab::server {

// Marks a job being taken off its placement (still set: call before clearing it) as waiting for
// those nodes to release it.
void await_release(model::Job& job, Time now);

// Pending and waiting for a release: the scheduler leaves it out.
bool awaits_release(const model::Job& job);

// Its waiting reason meanwhile: "waiting for node gpu-1 to stop it and store its checkpoint
// (pre-empted 12s ago)".
std::string release_wait_reason(const model::PendingRelease& pending, Time now);

// `node` no longer holds the job; `how` says so in a clause of its own ("node gpu-1 stopped it and
// stored its checkpoint", "node gpu-1 was lost"), kept until the last node has released it. Once
// no node is left it may start again, and a Released event says how each node let it go and from
// where it starts.
// Returns whether the job changed (false: it did not wait for `node`).
bool release_from(model::Job& job, const std::string& node, Time now, const std::string& how);

// Per node, how many pre-empted jobs it has not released yet (still stopping there), from the
// cache `c` (inside ObjectCache::read). Nodes that owe none are left out.
std::map<std::string, int64_t> releases_owed(const ObjectCache& c);

// One pass over the jobs waiting for a release: those whose node is Lost or gone, or that have
// waited longer than `timeout`, are released. Returns how many jobs changed.
size_t release_stalled(store::Store& store, ObjectCache& cache, Time now, Duration timeout);

}  // namespace cnlab::server
