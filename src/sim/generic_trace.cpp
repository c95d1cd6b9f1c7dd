#include "sim/generic_trace.h"

#include <fmt/format.h>

#include "sim/csv_reader.h"

namespace cnlab::sim {
namespace {

enum Column : size_t { kSubmit, kDuration, kNumGpus, kShare, kModel, kProject, kClass, kDeadline };

}  // namespace

Result<std::vector<GenericJob>> parse_generic_jobs(std::string_view text, std::string file_label) {
  CsvReader csv(text, std::move(file_label));
  auto header = csv.read_header({{"submit_time"},
                                 {"duration"},
                                 {"num_gpus"},
                                 {"gpu_share", false},
                                 {"model", false},
                                 {"project", false},
                                 {"class", false},
                                 {"deadline", false}});
  if (!header) return header.error();
  std::vector<GenericJob> jobs;
  while (csv.next_row()) {
    if (auto width = csv.check_width(); !width) return width.error();
    GenericJob job;
    job.line = csv.line();
    auto submit = csv.number(kSubmit);
    if (!submit || *submit < 0) return csv.bad(kSubmit, "submit_time must be a number of seconds >= 0");
    auto duration = csv.number(kDuration);
    if (!duration || *duration <= 0) return csv.bad(kDuration, "duration must be a number of seconds > 0");
    auto gpus = csv.integer(kNumGpus, 0, kMaxGenericJobGpus);
    if (!gpus) return gpus.error();
    job.submit_time = *submit;
    job.duration = *duration;
    job.num_gpus = static_cast<int>(*gpus);
    if (!csv.cell(kShare).empty()) {
      auto share = csv.number(kShare);
      if (!share || !(*share > 0.0 && *share <= 1.0)) {
        return csv.bad(kShare, "gpu_share must be a fraction of one GPU, 0 < gpu_share <= 1");
      }
      if (*share < 1.0 && job.num_gpus != 1) {
        return csv.bad(kShare, fmt::format("gpu_share < 1 needs num_gpus == 1 (this row asks for {} GPUs); "
                                           "leave it empty for whole GPUs",
                                           job.num_gpus));
      }
      job.gpu_share = *share;
    }
    job.model = std::string(csv.cell(kModel));
    job.project = std::string(csv.cell(kProject));
    job.job_class = std::string(csv.cell(kClass));
    if (!csv.cell(kDeadline).empty()) {
      auto deadline = csv.number(kDeadline);
      if (!deadline || *deadline < job.submit_time) {
        return csv.bad(kDeadline, "deadline must be an absolute time in seconds >= submit_time");
      }
      job.deadline = *deadline;
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Result<std::vector<GenericJob>> load_generic_jobs(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return parse_generic_jobs(*text, path);
}

}  // namespace cnlab::sim
