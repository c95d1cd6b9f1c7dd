// `cnlab run`: uploads the working directory, submits a job (retried with one idempotency key),
// follows it to its end (job_attach.h), downloads its artifacts, and exits with the job's code.
//
// The argument rule: the first word that is not one of cnlab's flags is SCRIPT_OR_COMMAND; cnlab's
// flags may come before it or after it (`cnlab run train.py --gpu h100-25 --epochs 3`), and every
// other word after it is the job's. A `--` ends cnlab's flags: what follows is the job's even where
// it looks like one of cnlab's (`cnlab run train.py --gpu h100-25 -- --name resnet`).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "cli/artifact_download.h"
#include "cli/cli.h"
#include "cli/client_config.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/job_attach.h"
#include "cli/run_options.h"
#include "cli/workspace_upload.h"

namespace cnlab::cli {
namespace {

using namespace std::chrono_literals;

std::atomic<int> g_interrupts{0};

// First Ctrl-C: noted (the attach loop cancels the job). Second: leave at once.
extern "C" void on_interrupt(int) {
  if (g_interrupts.fetch_add(1) + 1 >= 2) {
    static const char message[] = "\ncnlab: interrupted again; leaving now (the job was asked to stop)\n";
    (void)!::write(STDERR_FILENO, message, sizeof(message) - 1);
    ::_exit(kExitInterrupted);
  }
}

void install_interrupt_handler() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, nullptr);
}

// 16 random bytes as hex: one key per `cnlab run`, reused by its retries.
std::string idempotency_key() {
  unsigned char bytes[16];
  bool filled = false;
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    filled = ::read(fd, bytes, sizeof(bytes)) == static_cast<ssize_t>(sizeof(bytes));
    ::close(fd);
  }
  if (!filled) {
    std::random_device device;
    for (auto& b : bytes) b = static_cast<unsigned char>(device());
  }
  static const char* hex = "0123456789abcdef";
  std::string key;
  for (unsigned char b : bytes) {
    key += hex[b >> 4];
    key += hex[b & 15];
  }
  return key;
}

Time system_now() { return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()); }

// The exit code of an error that kept the job from running: a mistake in the request keeps its
// documented code (2 bad input, 3 not found, 4 credentials, 6 refused by admission); anything else
// (unreachable, a workspace too large, a server failure) is 125.
int never_ran(const Error& error) {
  int code = report(error);
  if (error.code == ErrorCode::kTooLarge && error.field == "dir") return kExitRunError;
  if (code == kExitUnreachable || code == kExitFailed) return kExitRunError;
  return code;
}

// For an error about spec.gpu: the models this cluster has, and the grammar.
void explain_gpu_error(net::Client& api) {
  std::map<std::string, std::pair<int, std::set<std::string>>> models;  // model -> GPUs, nodes
  auto nodes = api.request("GET", "/v1/nodes");
  if (nodes && nodes->status == 200) {
    Json listed = Json::parse(nodes->body, nullptr, false);
    if (listed.is_object()) {
      for (const auto& node : listed.value("items", Json::array())) {
        std::string name = node["metadata"].value("name", "");
        for (const auto& gpu : node["status"].value("gpus", Json::array())) {
          auto& entry = models[gpu.value("model", "?")];
          ++entry.first;
          entry.second.insert(name);
        }
      }
    }
  }
  std::string have;
  for (const auto& [model, entry] : models) {
    have += (have.empty() ? "" : ", ") + model + " (" + std::to_string(entry.first) + " GPU" +
            (entry.first == 1 ? "" : "s") + " on " + std::to_string(entry.second.size()) + " node" +
            (entry.second.size() == 1 ? "" : "s") + ")";
  }
  std::fprintf(stderr, "cnlab: this cluster has %s\n", have.empty() ? "no GPUs (no node has registered any)" : have.c_str());
  std::fprintf(stderr,
               "cnlab: --gpu takes MODEL-BLOCKS (h100-25: 25 blocks, 25%% of one GPU), MODEL (one whole GPU),\n"
               "       MODELxN (N whole GPUs), MODEL:PROFILE (a MIG instance, h100:3g.40gb), any-BLOCKS,\n"
               "       MODEL|MODEL-BLOCKS (either model), or none (no GPU)\n");
}

Result<Json> submit(net::Client& api, const Json& body, const std::string& key) {
  const std::string text = body.dump();
  auto delay = 500ms;
  for (int attempt = 0;; ++attempt) {
    auto answer = api.request("POST", "/v1/jobs", text, {{"content-type", "application/json"}, {"idempotency-key", key}});
    bool retry = !answer || answer->status >= 500;
    if (!retry) {
      if (answer->status != 200 && answer->status != 201) return net::error_from_response(answer->status, answer->body, "");
      Json job = Json::parse(answer->body, nullptr, false);
      if (!job.is_object()) return Error::internal("the server answered the submission with something that is not a job");
      return job;
    }
    if (attempt >= 3) {
      return answer ? net::error_from_response(answer->status, answer->body, "submitting the job") : answer.error();
    }
    std::fprintf(stderr, "cnlab: submitting failed (%s); retrying in %.1fs with the same idempotency key\n",
                 answer ? ("HTTP " + std::to_string(answer->status)).c_str() : answer.error().to_string().c_str(),
                 std::chrono::duration<double>(delay).count());
    std::this_thread::sleep_for(delay);
    delay *= 2;
  }
}

struct RunOptions {
  RunFlags job;
  std::vector<std::string> words;  // what CLI11 left over: the command
  std::string artifacts_dir;
  std::string max_workspace = "1Gi";
  bool detach = false;
};

int run(const ClientFlags& flags, RunOptions& options) {
  options.job.command = options.words;
  if (options.job.command.empty()) {
    return report(Error::invalid_argument("SCRIPT_OR_COMMAND", "",
                                          "what should the job run? e.g. cnlab run --gpu h100-25 train.py --epochs 3"));
  }
  auto max_workspace = parse_byte_size(options.max_workspace, "--max-workspace");
  if (!max_workspace) return report(max_workspace.error());
  // Checked before anything is uploaded: a bad flag costs nothing.
  if (auto checked = job_body(options.job, nullptr, system_now()); !checked) return report(checked.error());

  install_interrupt_handler();
  auto client_options = resolve_client(flags);
  if (!client_options) return report(client_options.error());
  auto connected = net::Client::connect(*client_options);
  if (!connected) return never_ran(connected.error());
  net::Client& api = **connected;

  std::error_code ec;
  std::string cwd = std::filesystem::current_path(ec).string();
  if (ec) return never_ran(Error::internal("cannot read the working directory: " + ec.message()));
  auto workspace = upload_workspace(api, cwd, options.job.project, *max_workspace);
  if (!workspace) return never_ran(workspace.error());
  std::string short_digest = workspace->ref.digest.substr(0, 7 + 12);
  std::fprintf(stderr, "cnlab: workspace %s: %lld files, %s%s\n", short_digest.c_str(),
               static_cast<long long>(workspace->file_count), format_bytes(workspace->content_bytes).c_str(),
               workspace->uploaded ? ", uploaded" : "; unchanged, not uploaded again");
  if (workspace->skipped > 0) {
    std::fprintf(stderr, "cnlab: %zu paths left out (symbolic links leaving the directory, sockets, fifos)\n",
                 workspace->skipped);
  }
  if (g_interrupts.load() > 0) return kExitInterrupted;  // Ctrl-C before anything was submitted

  auto body = job_body(options.job, &workspace->ref, system_now());
  if (!body) return report(body.error());
  auto submitted = submit(api, *body, idempotency_key());
  if (!submitted) {
    int code = never_ran(submitted.error());
    if (submitted.error().field.rfind("spec.gpu", 0) == 0) explain_gpu_error(api);
    return code;
  }
  const std::string id = (*submitted)["metadata"].value("name", "");
  if (options.detach) {
    std::fprintf(stderr, "cnlab: job %s submitted; follow it with: cnlab logs -f %s\n", id.c_str(), id.c_str());
    std::printf("%s\n", id.c_str());
    return kExitOk;
  }
  std::fprintf(stderr, "cnlab: job %s submitted\n", id.c_str());

  Console console;
  AttachOptions attach;
  attach.interrupts = &g_interrupts;
  auto ended = attach_job(api, *client_options, id, console, attach);
  if (!ended) {
    report(ended.error());
    std::fprintf(stderr, "cnlab: job %s goes on; follow it with: cnlab logs -f %s\n", id.c_str(), id.c_str());
    return exit_code_for(ended.error().code);
  }
  const Json& job = ended->job;

  std::string artifacts_text;
  std::string dir = options.artifacts_dir.empty() ? "./cnlab-artifacts/" + id + "/" : options.artifacts_dir;
  auto artifacts = download_artifacts(api, id, dir);
  if (!artifacts) {
    std::fprintf(stderr, "cnlab: artifacts not downloaded: %s\n", artifacts.error().to_string().c_str());
  } else {
    for (const auto& problem : artifacts->problems) std::fprintf(stderr, "cnlab: artifact not downloaded: %s\n", problem.c_str());
    if (artifacts->files > 0 && options.artifacts_dir.empty()) {
      // Downloads are never part of the next run's workspace (nor of a git commit).
      std::ofstream ignore("./cnlab-artifacts/.gitignore", std::ios::app);
      if (ignore && ignore.tellp() == 0) ignore << "# written by cnlab run: downloaded artifacts\n*\n";
    }
    if (artifacts->files > 0) {
      artifacts_text = "; artifacts in " + dir + " (" + std::to_string(artifacts->files) + " file" +
                       (artifacts->files == 1 ? "" : "s") + ", " + format_bytes(artifacts->bytes) + ")";
    }
  }

  std::map<std::string, Json> nodes;
  auto model_of = [&](const std::string& node, int index) -> std::string {
    if (!nodes.count(node)) {
      auto got = api.request("GET", "/v1/nodes/" + node);
      nodes[node] = got && got->status == 200 ? Json::parse(got->body, nullptr, false) : Json();
    }
    const Json& n = nodes[node];
    if (!n.is_object()) return "";
    for (const auto& gpu : n["status"].value("gpus", Json::array())) {
      if (gpu.value("index", -1) == index) return gpu.value("model", "");
    }
    return "";
  };
  std::string summary = summary_line(job, model_of) + artifacts_text;
  const std::string phase = job["status"].value("phase", "");
  const char* colour = phase == "Succeeded" ? "\x1b[32m" : "\x1b[31m";
  std::fprintf(stderr, "%s\n", console.paint(summary, colour).c_str());
  return exit_code_for_job(job["status"], ended->cancelled_here);
}

}  // namespace

void add_run_command(CLI::App& app, std::shared_ptr<ClientFlags> flags) {
  auto options = std::make_shared<RunOptions>();
  auto* run_app = app.add_subcommand("run", "Run a script or command on the cluster's GPUs and follow it to its end");
  RunFlags& job = options->job;
  run_app->add_option("--gpu", job.gpu, "GPUs the job needs: h100-25 (25% of one), h100, h100x2, any-10, none (required)");
  run_app->add_option("--project", job.project, "Project to run in (else the token's default project)");
  run_app->add_option("--class", job.priority_class, "Priority class")
      ->check(CLI::IsMember({"inference", "production", "dev", "opportunistic"}));
  run_app->add_option("--deadline", job.deadline, "Wanted completion: a duration from now (2h) or a time (2026-12-01T18:00Z)");
  run_app->add_option("--estimate", job.estimate, "How long the job runs once started (45m); helps the scheduler plan");
  run_app->add_option("--cpu", job.cpu, "Host CPU the job needs: cores (4, 0.5) or millicores (500m)");
  run_app->add_option("--memory", job.memory, "Host memory the job needs (16Gi, 512Mi); its limit too");
  run_app->add_option("--env", job.env, "Environment variable for the job, NAME=VALUE (repeatable)")
      ->allow_extra_args(false);
  run_app->add_option("--name", job.name, "Job name (else the script's name); the id adds a random suffix");
  run_app->add_flag("--detach,-d", options->detach, "Submit, print the job id and return");
  run_app->add_option("--artifacts", options->artifacts_dir, "Where to download the job's artifacts (else ./cnlab-artifacts/<job>/)");
  run_app->add_flag("--checkpointable", job.checkpointable, "The job can be stopped and resumed from its latest checkpoint");
  run_app->add_option("--max-workspace", options->max_workspace, "Refuse to upload a working directory over this size")
      ->capture_default_str();
  // SCRIPT_OR_COMMAND and its arguments: shown in the help, but never filled by CLI11 (the check
  // refuses every value), so the first such word and everything after it stay in remaining(),
  // in order, flags included (prefix_command). The positional also lets `--` work here.
  auto command_help = std::make_shared<std::string>();
  run_app->add_option("SCRIPT_OR_COMMAND", *command_help,
                      "What the job runs (a .py runs with python3), then its arguments; cnlab's flags may come before or after it")
      ->check(CLI::Validator([](std::string&) { return std::string("the job's command"); }, "", ""));
  run_app->validate_positionals();
  run_app->prefix_command();
  // The command's words are the job's, never a parent command's.
  run_app->preparse_callback([run_app](size_t) { run_app->fallthrough(false); });
  run_app->footer(
      "cnlab's flags may come before or after SCRIPT_OR_COMMAND; other words after it are the job's,\n"
      "and so is everything after --.\n"
      "Example: cnlab run train.py --gpu h100-25 --epochs 3\n"
      "         cnlab run train.py --gpu h100-25 -- --name resnet   (--name is the job's here)\n"
      "Exit code: the job's own (128+N for signal N), 125 if it never ran, 130 after Ctrl-C.");
  run_app->callback([flags, options, run_app] {
    // cnlab's flags that follow SCRIPT_OR_COMMAND are taken back from the job's words.
    RunFlags& job = options->job;
    std::map<std::string, std::function<void(const std::string&)>> values = {
        {"--gpu", [&](const std::string& v) { job.gpu = v; }},
        {"--project", [&](const std::string& v) { job.project = v; }},
        {"--class", [&](const std::string& v) { job.priority_class = v; }},
        {"--deadline", [&](const std::string& v) { job.deadline = v; }},
        {"--estimate", [&](const std::string& v) { job.estimate = v; }},
        {"--env", [&](const std::string& v) { job.env.push_back(v); }},
        {"--cpu", [&](const std::string& v) { job.cpu = v; }},
        {"--memory", [&](const std::string& v) { job.memory = v; }},
        {"--name", [&](const std::string& v) { job.name = v; }},
        {"--artifacts", [&](const std::string& v) { options->artifacts_dir = v; }},
        {"--max-workspace", [&](const std::string& v) { options->max_workspace = v; }},
        {"--server", [&](const std::string& v) { flags->server = v; }},
        {"--token", [&](const std::string& v) { flags->token = v; }},
        {"--ca", [&](const std::string& v) { flags->ca = v; }},
    };
    std::map<std::string, std::function<void()>> switches = {
        {"--detach", [&] { options->detach = true; }},
        {"-d", [&] { options->detach = true; }},
        {"--checkpointable", [&] { job.checkpointable = true; }},
    };
    auto words = take_trailing_flags(run_app->remaining(), values, switches);
    if (!words) std::exit(report(words.error()));
    options->words = std::move(*words);
    if (job.gpu.empty()) {
      std::exit(report(Error::invalid_argument(
          "--gpu", "", "required: what the job needs, e.g. --gpu h100-25 (25% of one H100), h100, h100x2, any-10 or none")));
    }
    if (!job.priority_class.empty() &&
        std::set<std::string>{"inference", "production", "dev", "opportunistic"}.count(job.priority_class) == 0) {
      std::exit(report(Error::invalid_argument("--class", job.priority_class,
                                               "known classes: inference, production, dev, opportunistic")));
    }
    std::exit(run(*flags, *options));
  });
}

}  // namespace cnlab::cli
