// audit_report.h: the reports `audit --json` and `audit --convert --json` write, assembled from the tensors'
// entries (index, table line, JSON record) in tensor order: by audit itself on one process or MPI ranks, and
// by `merge` from shards.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

namespace qmx::cli {

// head ("checkpoint", "source", "generator") with "tensors": each entry's "tensor" in order; each entry's
// table "line" is printed unless quiet.
nlohmann::ordered_json AuditReport(nlohmann::ordered_json head, const std::vector<nlohmann::ordered_json>& entries,
                                   bool quiet);
// audit --convert's report: head ("checkpoint", "convert", "generator") with "tensors" (each FROM tensor's
// entry in order, its line printed unless quiet) and "exact" (every value kept); qmx::Error when no tensor
// is a FROM tensor.
nlohmann::ordered_json ConvertReport(nlohmann::ordered_json head, const std::vector<nlohmann::ordered_json>& entries,
                                     bool quiet);

}  // namespace qmx::cli
