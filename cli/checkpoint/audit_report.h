// audit_report.h: the report `audit --json` writes, assembled from its tensors' entries (index, table line,
// JSON record) in tensor order: by audit itself on one process or MPI ranks, and by `merge` from shards.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

namespace qmx::cli {

// head ("checkpoint", "source", "generator") with "tensors": each entry's "tensor" in order; each entry's
// table "line" is printed unless quiet.
nlohmann::ordered_json AuditReport(nlohmann::ordered_json head, const std::vector<nlohmann::ordered_json>& entries,
                                   bool quiet);

}  // namespace qmx::cli
