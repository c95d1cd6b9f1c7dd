#include "cli/run_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "common/strings.h"

namespace cnlab::cli {
namespace {

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string base_name(std::string_view path) {
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace

Result<int64_t> parse_byte_size(std::string_view text, std::string_view field) {
  auto bad = [&] {
    return Error::invalid_argument(std::string(field), std::string(text),
                                   "expected a size such as 1Gi, 512Mi, 64Ki, 2G, 100M or a number of bytes");
  };
  std::string lower = to_lower(trim(text));
  size_t digits = 0;
  while (digits < lower.size() && std::isdigit(static_cast<unsigned char>(lower[digits]))) ++digits;
  if (digits == 0 || digits > 15) return bad();
  int64_t amount = std::stoll(lower.substr(0, digits));
  std::string unit = lower.substr(digits);
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  int64_t scale = 0;
  if (unit.empty()) scale = 1;
  else if (unit == "ki") scale = int64_t{1} << 10;
  else if (unit == "mi") scale = int64_t{1} << 20;
  else if (unit == "gi") scale = int64_t{1} << 30;
  else if (unit == "ti") scale = int64_t{1} << 40;
  else if (unit == "k") scale = 1000;
  else if (unit == "m") scale = 1000 * 1000;
  else if (unit == "g") scale = 1000 * 1000 * 1000;
  else if (unit == "t") scale = int64_t{1000} * 1000 * 1000 * 1000;
  else return bad();
  if (amount <= 0) return Error::invalid_argument(std::string(field), std::string(text), "must be more than 0");
  if (amount > INT64_MAX / scale) return bad();
  return amount * scale;
}

Result<std::vector<std::string>> take_trailing_flags(
    const std::vector<std::string>& words, const std::map<std::string, std::function<void(const std::string&)>>& values,
    const std::map<std::string, std::function<void()>>& switches) {
  std::vector<std::string> command;
  // `cnlab run --gpu none -- ls -la`: a `--` before the command makes all of it the job's.
  const bool leading_dash_dash = !words.empty() && words[0] == "--";
  size_t i = leading_dash_dash ? 1 : 0;
  bool flags_end = leading_dash_dash;
  for (; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (flags_end || command.empty()) {  // SCRIPT_OR_COMMAND itself is never a flag of cnlab's
      command.push_back(word);
      continue;
    }
    if (word == "--") {
      flags_end = true;
      continue;
    }
    if (auto s = switches.find(word); s != switches.end()) {
      s->second();
      continue;
    }
    const size_t equals = word.find('=');
    if (auto v = values.find(word.substr(0, equals)); v != values.end()) {
      if (equals != std::string::npos) {
        v->second(word.substr(equals + 1));
      } else if (i + 1 < words.size()) {
        v->second(words[++i]);
      } else {
        return Error::invalid_argument(word, "", "needs a value (to pass it to the job instead, put it after --)");
      }
      continue;
    }
    command.push_back(word);
  }
  return command;
}

Result<int64_t> parse_cpu_milli(std::string_view text, std::string_view field) {
  auto bad = [&](const char* why) { return Error::invalid_argument(std::string(field), std::string(text), why); };
  const char* kExpected = "expected cores (4, 0.5) or millicores (500m)";
  const std::string value = to_lower(trim(text));
  auto all_digits = [](std::string_view s) {
    return !s.empty() && s.size() <= 12 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  int64_t milli = 0;
  if (!value.empty() && value.back() == 'm') {
    const std::string digits = value.substr(0, value.size() - 1);
    if (!all_digits(digits)) return bad(kExpected);
    milli = std::stoll(digits);
  } else {
    const size_t dot = value.find('.');
    const std::string whole = value.substr(0, dot);
    std::string fraction = dot == std::string::npos ? "" : value.substr(dot + 1);
    if (!all_digits(whole) || (dot != std::string::npos && !all_digits(fraction))) return bad(kExpected);
    if (fraction.size() > 3) return bad("finer than a millicore (0.001)");
    fraction.resize(3, '0');
    milli = std::stoll(whole) * 1000 + std::stoll(fraction);
  }
  if (milli <= 0) return bad("must be more than 0");
  return milli;
}

Result<Time> parse_deadline(std::string_view text, Time now) {
  const std::string field = "--deadline";
  Time at;
  if (text.size() >= 10 && std::isdigit(static_cast<unsigned char>(text[0])) && text[4] == '-') {
    std::string full(text);
    // "2026-12-01T18:00Z": seconds left out.
    if (full.size() >= 17 && full[13] == ':' && (full.size() == 16 || full[16] != ':')) full.insert(16, ":00");
    auto parsed = parse_rfc3339(full, field);
    if (!parsed) {
      return Error::invalid_argument(field, std::string(text),
                                     "expected a duration from now (2h, 1d12h) or a time such as 2026-12-01T18:00Z");
    }
    at = *parsed;
  } else {
    auto duration = parse_duration(text, field);
    if (!duration) {
      return Error::invalid_argument(field, std::string(text),
                                     "expected a duration from now (2h, 1d12h) or a time such as 2026-12-01T18:00Z");
    }
    at = now + *duration;
  }
  if (at <= now) {
    return Error::invalid_argument(field, std::string(text), "the deadline has passed (now " + format_rfc3339(now) + ")");
  }
  return at;
}

std::vector<std::string> job_command(const std::vector<std::string>& words) {
  if (words.empty()) return words;
  std::vector<std::string> argv;
  if (ends_with(words[0], ".py")) argv.push_back("python3");
  argv.insert(argv.end(), words.begin(), words.end());
  return argv;
}

std::string job_name(const RunFlags& flags) {
  if (!flags.name.empty()) return flags.name;
  if (flags.command.empty()) return "";
  std::string base = base_name(flags.command[0]);
  if (auto dot = base.rfind('.'); dot != std::string::npos && dot > 0) base.resize(dot);
  std::string name;
  for (char c : to_lower(base)) {
    bool alnum = std::isalnum(static_cast<unsigned char>(c)) && static_cast<unsigned char>(c) < 128;
    if (alnum) {
      name += c;
    } else if (!name.empty() && name.back() != '-') {
      name += '-';
    }
  }
  while (!name.empty() && name.back() == '-') name.pop_back();
  if (name.size() > 54) name.resize(54);
  while (!name.empty() && !std::isalnum(static_cast<unsigned char>(name.back()))) name.pop_back();
  return name;
}

Result<Json> job_body(const RunFlags& flags, const WorkspaceRef* workspace, Time now) {
  if (flags.command.empty()) {
    return Error::invalid_argument("SCRIPT_OR_COMMAND", "", "what should the job run? e.g. cnlab run --gpu h100-25 train.py");
  }
  if (flags.gpu.empty()) {
    return Error::invalid_argument("--gpu", "", "required: what the job asks of the GPUs, e.g. h100-25, h100, h100x2, any-10 or none");
  }
  Json spec = {{"gpu", flags.gpu}, {"command", job_command(flags.command)}};
  if (!flags.project.empty()) spec["project"] = flags.project;
  if (!flags.priority_class.empty()) spec["priority_class"] = flags.priority_class;
  if (!flags.deadline.empty()) {
    auto deadline = parse_deadline(flags.deadline, now);
    if (!deadline) return deadline.error();
    spec["deadline"] = format_rfc3339(*deadline);
  }
  if (!flags.estimate.empty()) {
    auto estimate = parse_duration(flags.estimate, "--estimate");
    if (!estimate) return estimate.error();
    if (estimate->count() <= 0) return Error::invalid_argument("--estimate", flags.estimate, "must be more than 0");
    spec["estimated_duration"] = format_duration(*estimate);
  }
  if (!flags.env.empty()) {
    Json env = Json::object();
    for (const auto& pair : flags.env) {
      auto eq = pair.find('=');
      if (eq == std::string::npos || eq == 0) {
        return Error::invalid_argument("--env", pair, "expected NAME=VALUE");
      }
      env[pair.substr(0, eq)] = pair.substr(eq + 1);
    }
    spec["env"] = env;
  }
  if (flags.checkpointable) spec["checkpointable"] = true;
  if (!flags.cpu.empty()) {
    auto milli = parse_cpu_milli(flags.cpu, "--cpu");
    if (!milli) return milli.error();
    spec["cpu_milli"] = *milli;
  }
  if (!flags.memory.empty()) {
    auto bytes = parse_byte_size(flags.memory, "--memory");
    if (!bytes) return bytes.error();
    spec["memory_mib"] = (*bytes + (int64_t{1} << 20) - 1) >> 20;  // a part of a MiB asks for the whole MiB
  }
  if (workspace) spec["workspace"] = {{"digest", workspace->digest}, {"size_bytes", workspace->size_bytes}};
  Json body = {{"spec", spec}};
  if (std::string name = job_name(flags); !name.empty()) body["metadata"] = {{"name", name}};
  return body;
}

int exit_code_for_job(const Json& status, bool cancelled_here) {
  const std::string phase = status.value("phase", "");
  if (phase == "Cancelled" && cancelled_here) return 130;
  if (status.contains("signal") && status["signal"].is_number_integer()) {
    return 128 + status["signal"].get<int>();
  }
  if (status.contains("exit_code") && status["exit_code"].is_number_integer()) {
    int code = status["exit_code"].get<int>();
    if (phase == "Succeeded" || code != 0) return code;
  }
  if (phase == "Succeeded") return 0;
  // Ended without a process exit code: it never started, or ended with no code to pass on.
  if (status.value("attempts", 0) == 0) return 125;
  return 1;
}

double wall_seconds(const Json& status) {
  if (!status.contains("started_at") || !status.contains("finished_at")) return 0;
  auto started = parse_rfc3339(status["started_at"].get<std::string>(), "started_at");
  auto finished = parse_rfc3339(status["finished_at"].get<std::string>(), "finished_at");
  if (!started || !finished || *finished < *started) return 0;
  return static_cast<double>((*finished - *started).count());
}

double gpu_seconds(const Json& status, double wall) {
  double blocks = 0;
  if (status.contains("placement") && status["placement"].is_array()) {
    for (const auto& binding : status["placement"]) {
      if (!binding.contains("gpus")) continue;
      for (const auto& gpu : binding["gpus"]) blocks += gpu.value("blocks", 0);
    }
  }
  return blocks / 100.0 * wall;
}

std::string format_seconds(double seconds) {
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  auto whole = static_cast<int64_t>(std::llround(seconds));
  if (whole < 3600) return fmt::format("{}m{:02}s", whole / 60, whole % 60);
  return fmt::format("{}h{:02}m", whole / 3600, (whole % 3600) / 60);
}

std::string summary_line(const Json& job, const std::function<std::string(const std::string&, int)>& model_of) {
  const Json& status = job["status"];
  const std::string id = job["metadata"].value("name", "");
  const std::string phase = status.value("phase", "");
  double wall = wall_seconds(status);
  std::string line = fmt::format("job {} {}", id, phase);
  std::string code_text;
  if (status.contains("signal")) code_text = fmt::format("signal {}", status["signal"].get<int>());
  else if (status.contains("exit_code") && phase != "Succeeded") code_text = fmt::format("exit code {}", status["exit_code"].get<int>());
  if (!code_text.empty()) line += " (" + code_text + ")";
  if (status.contains("placement") && status["placement"].is_array() && !status["placement"].empty() &&
      status.value("attempts", 0) > 0) {
    line += " in " + format_seconds(wall);
    std::string where;
    int64_t total_blocks = 0;
    for (const auto& binding : status["placement"]) {
      const std::string node = binding.value("node", "");
      std::string gpus;
      for (const auto& gpu : binding.value("gpus", Json::array())) {
        int index = gpu.value("index", 0);
        int blocks = gpu.value("blocks", 0);
        total_blocks += blocks;
        std::string model = model_of ? model_of(node, index) : "";
        gpus += fmt::format("{}{}{}gpu{}, {} blocks", gpus.empty() ? "" : "; ", model, model.empty() ? "" : " ", index,
                            blocks);
      }
      where += fmt::format("{}node {}{}", where.empty() ? "" : " and ", node, gpus.empty() ? "" : " (" + gpus + ")");
    }
    line += " on " + where;
    if (total_blocks > 0) {
      line += fmt::format(" — GPU time {} ({} blocks × {})", format_seconds(gpu_seconds(status, wall)), total_blocks,
                          format_seconds(wall));
    }
  }
  if (std::string message = status.value("message", ""); phase != "Succeeded" && !message.empty() && message != code_text) {
    line += "; " + message;
  }
  return line;
}

}  // namespace cnlab::cli
