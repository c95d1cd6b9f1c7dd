// `cnlab describe JOB`: everything about one job a person asks when it waits, runs or ended:
// what it asked for, where it runs, why it waits, its checkpoint and a move under way, how it
// ended, and its events.
#include <signal.h>

#include <cstdio>
#include <memory>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/job_listing.h"
#include "cli/output.h"

namespace cnlab::cli {
namespace {

struct DescribeArgs {
  std::string job;
  std::string output;
};

std::string join_command(const Json& command) {
  std::string out;
  if (!command.is_array()) return out;
  for (const Json& arg : command) {
    if (!arg.is_string()) continue;
    const std::string& a = arg.get_ref<const std::string&>();
    if (!out.empty()) out += ' ';
    bool plain = !a.empty() && a.find_first_of(" \t\n'\"$`\\|&;<>(){}*?") == std::string::npos;
    out += plain ? a : "'" + a + "'";
  }
  return out;
}

// "14:05 (3m12s ago)"
std::string when(Time time, Time now) {
  if (time == Time{}) return "-";
  return format_time(time, now) + " (" + format_age(now - time) + " ago)";
}

void line(const char* label, const std::string& value, const char* sgr = nullptr, bool colour = false) {
  std::printf("%-12s %s\n", label, colour ? colourise(value, sgr).c_str() : value.c_str());
}

// "process (GPU state, real GPUs), 12.3 MiB, taken 14:05 (3m12s ago), sha256:1f2e3d4c5b6a; 2 older
// kept; another asked 5s ago": the checkpoint the job resumes from (what a process one holds of its
// GPUs decides where it can resume), and one asked for and not yet taken. "" for none.
std::string checkpoint_text(const Json& status, Time now) {
  std::string text;
  if (status.contains("checkpoint") && status["checkpoint"].is_object()) {
    const Json& c = status["checkpoint"];
    const std::string digest = c.value("digest", "");
    std::string kind = c.value("kind", "files");
    if (c.contains("gpus") && c["gpus"].is_string()) {
      kind += std::string(" (") + (c.value("gpu_state", false) ? "GPU state, " : "") + c["gpus"].get<std::string>() + " GPUs)";
    }
    text = kind + ", " + format_bytes(c.value("size_bytes", int64_t{0})) + ", taken " +
           when(time_field(status, "checkpoint", "taken_at"), now) + ", " + digest.substr(0, 19);
    const size_t older = status.value("older_checkpoints", Json::array()).size();
    if (older > 0) text += "; " + std::to_string(older) + " older kept";
  }
  auto time_of = [&](const char* key) {
    auto time = parse_rfc3339(status.value(key, ""), key);
    return time ? *time : Time{};
  };
  const Time asked = time_of("checkpoint_requested_at"), last = time_of("last_checkpoint_at");
  // Only a running job's ask is still to be answered (a new run starts without one); its agent may
  // have said it could not (a CheckpointFailed event since).
  if (asked != Time{} && asked > last && status.value("phase", "") == "Running") {
    std::string answer = "not taken yet";
    for (const Json& e : status.value("events", Json::array())) {
      auto at = parse_rfc3339(e.value("time", ""), "time");
      if (e.value("type", "") == "CheckpointFailed" && at && *at >= asked) answer = e.value("reason", "not taken");
    }
    text += std::string(text.empty() ? "" : "; ") + (text.empty() ? "asked " : "another asked ") +
            format_age(now - asked) + " ago, " + answer;
  }
  return text;
}

// "node-a -> node-b (post-copy), asked 14:05 (12s ago); restoring on node-b (2s ago)": a move under
// way, where it stands by the latest word of the node doing the work. "" for none.
std::string migration_text(const Json& status, Time now) {
  if (!status.contains("migration") || !status["migration"].is_object()) return "";
  const Json& m = status["migration"];
  const std::string to = m.value("to", "");
  const std::string from = m.value("from", "");
  std::string text = (from.empty() ? "" : from + " -> ") + (to.empty() ? "any node with room" : to);
  if (!m.value("pages_from", "").empty()) text += " (post-copy)";
  text += ", asked " + when(time_field(status, "migration", "requested_at"), now);
  const std::string progress = m.value("progress", "");
  if (!progress.empty()) {
    text += "; " + progress;
    if (Time said = time_field(status, "migration", "progress_at"); said != Time{}) {
      text += " (" + format_age(now - said) + " ago)";
    }
  }
  return text;
}

void run_describe(const ClientFlags& flags, const DescribeArgs& args) {
  auto format = parse_output_format(args.output, /*allow_name=*/false);
  if (!format) fail(format.error());
  auto client = connect(flags);
  if (!client) fail(client.error());
  auto job = get_json(**client, "/v1/jobs/" + url_encode(args.job));
  if (!job) fail(job.error());
  if (*format == OutputFormat::kJson) print_json_and_exit(*job);

  const Json& j = *job;
  const Json& spec = j.contains("spec") ? j["spec"] : Json::object();
  const Json& status = j.contains("status") ? j["status"] : Json::object();
  const bool colour = colour_enabled(stdout);
  const Time now = now_seconds();
  std::string phase(field(j, "status", "phase"));

  line("Job:", std::string(field(j, "metadata", "name")), kBold, colour);
  line("Project:", spec.value("project", ""));
  line("User:", spec.value("user", ""));
  const char* phase_sgr = phase == "Running" ? kGreen : phase == "Failed" ? kRed : phase == "Pending" ? kYellow : nullptr;
  std::string phase_text = phase;
  if (status.value("cancel_requested", false) && (phase == "Running" || phase == "Scheduled")) phase_text += " (cancelling)";
  line("Phase:", phase_text, phase_sgr, colour);
  std::string gpu = spec.value("gpu", "");
  if (spec.contains("vram") && spec["vram"].is_string()) gpu += "  vram " + spec["vram"].get<std::string>();
  line("GPU:", gpu);
  std::string host = std::to_string(spec.value("cpu_milli", 0)) + "m CPU, " +
                     format_bytes(spec.value("memory_mib", int64_t{0}) * 1024 * 1024) + " memory";
  // What its agent last measured its processes to hold (what a move copies), while it runs.
  if (const int64_t used = status.value("memory_used_mib", int64_t{0}); used > 0 && phase == "Running") {
    host += " (its processes hold " + format_bytes(used * 1024 * 1024) + ")";
  }
  line("Host:", host);
  line("Priority:", spec.value("priority_class", ""));
  line("Command:", join_command(spec.contains("command") ? spec["command"] : Json()));
  if (spec.contains("deadline")) line("Deadline:", spec.value("deadline", ""));
  if (j.contains("metadata") && j["metadata"].contains("labels") && j["metadata"]["labels"].is_object()) {
    std::string labels;
    for (const auto& [k, v] : j["metadata"]["labels"].items()) {
      if (!labels.empty()) labels += ", ";
      labels += k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
    }
    if (!labels.empty()) line("Labels:", labels);
  }
  line("Submitted:", when(time_field(j, "status", "submitted_at"), now));
  Time started = time_field(j, "status", "started_at");
  Time finished = time_field(j, "status", "finished_at");
  if (started != Time{}) {
    line("Started:", when(started, now));
    line("Runtime:", format_age((finished == Time{} ? now : finished) - started));
  }
  if (finished != Time{}) line("Finished:", when(finished, now));
  if (int attempts = status.value("attempts", 0); attempts > 1) line("Attempts:", std::to_string(attempts));
  if (std::string text = checkpoint_text(status, now); !text.empty()) line("Checkpoint:", text);
  if (std::string text = migration_text(status, now); !text.empty()) line("Migration:", text, kYellow, colour);

  // Where it runs: one line per node, each GPU with its blocks and memory.
  if (status.contains("placement") && status["placement"].is_array() && !status["placement"].empty()) {
    bool first = true;
    for (const Json& node : status["placement"]) {
      const Json gpus = node.value("gpus", Json::array());
      std::string text = node.value("node", "") + (gpus.empty() ? " (no GPUs)" : ":");
      for (const Json& g : gpus) {
        int blocks = g.value("blocks", 0);
        text += " gpu" + std::to_string(g.value("index", 0)) + "=" +
                (blocks == 100 ? std::string("whole") : std::to_string(blocks) + " blocks");
        if (g.contains("mig_start")) text += " (MIG slot " + std::to_string(g.value("mig_start", 0)) + ")";
        text += ", " + format_bytes(g.value("vram_mib", int64_t{0}) * 1024 * 1024) + " VRAM;";
      }
      if (!text.empty() && text.back() == ';') text.pop_back();
      line(first ? "Placement:" : "", text);
      first = false;
    }
  } else if (phase == "Pending") {
    line("Placement:", "none yet");
  }

  // Why it waits.
  std::string waiting = status.value("waiting_reason", "");
  if (!waiting.empty()) line("Waiting:", waiting, kYellow, colour);
  if (status.contains("queue_position") && status["queue_position"].is_number_integer()) {
    line("Queue:", "position " + std::to_string(status["queue_position"].get<int64_t>()));
  }

  // How it ended.
  if (status.contains("signal") && status["signal"].is_number_integer()) {
    int sig = status["signal"].get<int>();
    const char* name = sigabbrev_np(sig);
    line("Exit:", "killed by signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : ""), kRed, colour);
  } else if (status.contains("exit_code") && status["exit_code"].is_number_integer()) {
    int code = status["exit_code"].get<int>();
    line("Exit:", "code " + std::to_string(code), code == 0 ? kGreen : kRed, colour);
  }
  std::string message = status.value("message", "");
  if (!message.empty()) line("Message:", message);

  std::printf("\nEvents:\n");
  Table events({{"TIME"}, {"AGE", Table::Align::kRight}, {"TYPE"}, {"REASON", Table::Align::kLeft, true}});
  if (status.contains("events") && status["events"].is_array()) {
    for (const Json& e : status["events"]) {
      Time at = Time{};
      if (auto t = parse_rfc3339(e.value("time", ""), "time")) at = *t;
      events.row();
      events.cell(format_time(at, now));
      events.cell(at == Time{} ? "-" : format_age(now - at));
      std::string type = e.value("type", "");
      events.cell(type, type == "Failed" ? kRed : type == "Preempted" ? kYellow : nullptr);
      events.cell(e.value("reason", ""));
    }
  }
  if (events.rows() == 0) {
    std::printf("  (none)\n");
  } else {
    int width = terminal_width(stdout);
    std::string text = events.render(colour, width > 2 ? width - 2 : 0);
    // Indented two spaces under the heading.
    std::string indented = "  ";
    for (char c : text) {
      indented += c;
      if (c == '\n') indented += "  ";
    }
    indented.resize(indented.size() - 2);
    std::fwrite(indented.data(), 1, indented.size(), stdout);
  }
  std::exit(0);
}

}  // namespace

void add_describe_command(CLI::App& app, std::shared_ptr<ClientFlags> flags) {
  auto args = std::make_shared<DescribeArgs>();
  auto* describe = app.add_subcommand("describe", "Show one job: placement, why it waits, how it ended, its events");
  describe->add_option("JOB", args->job, "The job id (see cnlab ps)")->required()->check(job_id());
  add_output_option(*describe, args->output, /*allow_name=*/false);
  describe->footer("Example:\n  cnlab describe train-6f3ae726\n  cnlab describe train-6f3ae726 -o json | jq .status.placement");
  describe->callback([flags, args] { run_describe(*flags, *args); });
}

}  // namespace cnlab::cli
