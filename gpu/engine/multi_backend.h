// Several devices behind one context: a Backend over one backend per device (all CUDA, or all CPU
// as the test twin), created by vs_context_create when its options name more than one device.
// A dataset is replicated (every device holds all rows; a call's queries are split over the
// devices, or a small call goes to one device in turn) or sharded (each device holds the rows whose
// id hashes to it; every query visits every shard and the per-shard answers are merged exactly:
// top k by (distance, id), range matches by id).  Placement is decided at the dataset's first add
// (engine.h, vs_placement).  IVF-PQ objects live whole on one device each, the one with the least
// memory in use.  A call's first device runs on the calling thread and the others on threads of
// their own, so the devices work in parallel and a one-device call costs no hand-off; backends and
// their objects are created and deleted on their device's thread.  The caller's cancel callback is
// only ever called from the calling thread.
#ifndef VSEARCH_ENGINE_MULTI_BACKEND_H
#define VSEARCH_ENGINE_MULTI_BACKEND_H

#include "engine/backend.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace vs {

// Creates the backend of one device; null with *err on failure.
using BackendFactory =
    std::function<std::unique_ptr<Backend>(const BackendConfig &config, std::string *err)>;

struct MultiConfig
{
    std::vector<int> devices;        // device ordinals, one backend each (repeats allowed)
    vs_placement placement = VS_PLACEMENT_AUTO;
    size_t shard_min_bytes = 0;      // AUTO shards a dataset at least this large
};

class MultiBackend : public Backend
{
public:
    // Per-device information and the test aid that marks a device lost.
    virtual int device_count() const noexcept = 0;
    virtual int live_devices() const noexcept = 0;
    virtual Status device_info(int i, vs_device_info *out) noexcept = 0;
    virtual void fail_device(int i, const std::string &why) noexcept = 0;
    virtual vs_placement placement(const Dataset *ds) const noexcept = 0;
};

// Null with *err when no device starts; devices that fail to start are reported by
// device_info() as lost and left out.
std::unique_ptr<MultiBackend> make_multi_backend(const BackendConfig &base, const MultiConfig &mc,
                                                 const BackendFactory &factory, std::string *err);

} // namespace vs

#endif
