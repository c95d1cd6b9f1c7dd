#include "sim/sim_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "sim/alloc_experiment.h"
#include "sim/alloc_leftovers.h"
#include "sim/alloc_report.h"
#include "sim/cli_flags.h"
#include "sim/openb_trace.h"
#include "sim/progress_bar.h"
#include "sim/replay_command.h"
#include "sim/svg_chart.h"

namespace cnlab::sim {
namespace {

constexpr int kBadInput = 2;
constexpr int kInternalFailure = 1;
constexpr size_t kMaxSeeds = 10'000;
constexpr int kMaxThreads = 256;

// Every flag is collected as text, repeats included, and checked by run_alloc, so that each
// mistake gets CNLab's message and exit code 2 rather than CLI11's own.
struct AllocFlags {
  std::vector<std::string> nodes, pods, policies, seeds, threads, out, reference;
  bool migrations = false;
};

[[noreturn]] void fail(int code, const Error& error) {
  std::fprintf(stderr, "cnlab sim alloc: %s\n", error.to_string().c_str());
  throw CLI::RuntimeError(code);
}

std::string workload_name(const std::string& path) {
  std::filesystem::path p(path);
  std::string name = p.filename().string();
  if (name.size() > 4 && name.ends_with(".csv")) name.resize(name.size() - 4);
  return name;
}

Result<int> parse_threads(const std::string& text) {
  if (text.empty()) return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto value = parse_int(trim(text), "--threads");
  if (!value || *value < 1 || *value > kMaxThreads) {
    return Error::invalid_argument("--threads", text, fmt::format("must be a whole number 1..{}", kMaxThreads));
  }
  return static_cast<int>(*value);
}

Result<std::vector<std::string>> parse_policies(const std::string& text, const PolicyRegistry& registry) {
  if (trim(text).empty()) return registry.keys();
  std::vector<std::string> keys;
  for (std::string_view part : split(text, ',')) {
    std::string key = to_lower(trim(part));
    if (!registry.contains(key)) {
      return Error::invalid_argument("--policies", std::string(trim(part)),
                                     fmt::format("unknown policy; valid: {}", join(registry.keys(), ",")));
    }
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  return keys;
}

// The value of a flag that may be given once; `fallback` when absent.
std::string single(const char* flag, const std::vector<std::string>& values, std::string fallback = "") {
  if (values.size() > 1) {
    fail(kBadInput, Error::invalid_argument(flag, join(values, " "), "may be given once"));
  }
  return values.empty() ? fallback : values[0];
}

void run_alloc(const AllocFlags& given, const PolicyRegistry& registry, const std::vector<std::string>& extras) {
  if (!extras.empty()) {
    fail(kBadInput, Error::invalid_argument("argument", extras[0],
                                            "unknown; allowed: --nodes, --pods, --policies, --seeds, --threads, "
                                            "--reference, --out, --migrations (see cnlab sim alloc --help)"));
  }
  struct {
    std::string nodes, policies, seeds, threads, out, reference;
    std::vector<std::string> pods;
  } flags{single("--nodes", given.nodes),
          single("--policies", given.policies),
          single("--seeds", given.seeds, "42-51"),
          single("--threads", given.threads),
          single("--out", given.out),
          single("--reference", given.reference),
          given.pods};
  if (flags.nodes.empty()) fail(kBadInput, Error::invalid_argument("--nodes", "", "required: the node list CSV"));
  if (flags.pods.empty()) fail(kBadInput, Error::invalid_argument("--pods", "", "required: one or more pod list CSVs"));
  if (flags.out.empty()) fail(kBadInput, Error::invalid_argument("--out", "", "required: the output directory"));
  auto seeds = parse_seed_list(flags.seeds, "--seeds");
  if (!seeds) fail(kBadInput, seeds.error());
  auto threads = parse_threads(flags.threads);
  if (!threads) fail(kBadInput, threads.error());
  auto policies = parse_policies(flags.policies, registry);
  if (!policies) fail(kBadInput, policies.error());

  auto nodes = load_openb_nodes(flags.nodes);
  if (!nodes) fail(kBadInput, nodes.error());
  auto cluster = AllocCluster::build(*nodes);
  if (!cluster) fail(kBadInput, cluster.error());
  if (cluster->gpu_capacity_total() == 0) {
    fail(kBadInput, Error::invalid_argument("--nodes", flags.nodes, "the node list has no GPUs"));
  }

  ExperimentSpec spec;
  std::string reference_path = flags.reference;
  for (const std::string& path : flags.pods) {
    if (path.empty()) fail(kBadInput, Error::invalid_argument("--pods", path, "must name a pod list CSV"));
    auto pods = load_openb_pods(path);
    if (!pods) fail(kBadInput, pods.error());
    std::string name = workload_name(path);
    for (const Workload& w : spec.workloads) {
      if (w.name == name) {
        fail(kBadInput, Error::invalid_argument(
                            "--pods", path, fmt::format("two pod files share the workload name {}; rename one", name)));
      }
    }
    auto workload = make_workload(name, *pods, *cluster);
    if (!workload) fail(kBadInput, workload.error());
    spec.workloads.push_back(std::move(*workload));
    if (reference_path.empty()) {
      auto beside = std::filesystem::path(path).parent_path() / kReferenceFileName;
      std::error_code ec;
      if (std::filesystem::is_regular_file(beside, ec)) reference_path = beside.string();
    }
  }
  std::optional<ReferenceCurves> reference;
  if (!reference_path.empty()) {
    auto loaded = load_reference_curves(reference_path);
    if (!loaded) fail(kBadInput, loaded.error());
    reference = std::move(*loaded);
  }

  std::error_code ec;
  std::filesystem::create_directories(flags.out, ec);
  if (ec || !std::filesystem::is_directory(flags.out, ec)) {
    fail(kBadInput, Error::invalid_argument("--out", flags.out,
                                            fmt::format("cannot create the output directory: {}", ec.message())));
  }

  spec.policies = *policies;
  spec.seeds = *seeds;
  spec.threads = *threads;
  if (given.migrations) spec.migrations = MigrationLimits{};
  ProgressBar bar(stderr);
  spec.progress = [&bar](size_t done, size_t total) { bar.update(done, total); };
  auto result = run_experiment(*cluster, spec, registry);
  bar.finish();
  if (!result) fail(result.error().code == ErrorCode::kInvalidArgument ? kBadInput : kInternalFailure, result.error());

  const std::filesystem::path out(flags.out);
  const std::string summary =
      summary_markdown(*result, reference ? &*reference : nullptr) + migrations_markdown(*result) +
      leftovers_markdown(*result);
  const std::pair<std::string, std::string> files[] = {
      {(out / "allocation_curves.csv").string(), curves_csv(*result)},
      {(out / "allocation.svg").string(), allocation_svg(*result)},
      {(out / "summary.md").string(), summary},
      {(out / "leftovers.csv").string(), leftovers_csv(*result)},
  };
  for (const auto& [path, text] : files) {
    if (auto written = write_text_file(path, text); !written) fail(kBadInput, written.error());
  }
  size_t runs = spec.workloads.size() * spec.policies.size() * spec.seeds.size();
  std::fputs(summary.c_str(), stdout);
  // Run times vary from machine to machine, so they go to the terminal, not into summary.md.
  std::printf("\nseconds per run (mean, max):");
  for (size_t p = 0; p < spec.policies.size(); ++p) {
    double sum = 0, max = 0;
    size_t count = 0;
    for (size_t i = p; i < result->curves.size(); i += spec.policies.size()) {
      for (const SeedRun& run : result->curves[i].runs) sum += run.seconds, max = std::max(max, run.seconds), ++count;
    }
    std::printf("%s %s %.3f, %.3f", p == 0 ? "" : ";", result->curves[p].policy.c_str(),
                sum / static_cast<double>(count), max);
  }
  std::printf("\n");
  std::printf("\n%zu runs in %.1f s on %d thread(s); wrote %s, %s, %s, %s\n", runs, result->wall_seconds, spec.threads,
              files[0].first.c_str(), files[1].first.c_str(), files[2].first.c_str(), files[3].first.c_str());
}

}  // namespace

Result<std::vector<uint64_t>> parse_seed_list(std::string_view text, std::string_view field) {
  auto bad = [&](std::string why) {
    return Error::invalid_argument(
        std::string(field), std::string(text),
        why + "; expected A-B (A <= B) or a comma list such as 42,43,50-51 of whole numbers >= 0");
  };
  std::vector<uint64_t> seeds;
  if (trim(text).empty()) return bad("no seeds");
  for (std::string_view part : split(text, ',')) {
    part = trim(part);
    size_t dash = part.find('-');
    std::string_view lo_text = dash == std::string_view::npos ? part : trim(part.substr(0, dash));
    std::string_view hi_text = dash == std::string_view::npos ? part : trim(part.substr(dash + 1));
    auto lo = parse_int(lo_text, field);
    auto hi = parse_int(hi_text, field);
    if (!lo || !hi || *lo < 0 || *hi < 0) return bad(fmt::format("\"{}\" is not a seed or a range of seeds", part));
    if (*lo > *hi) return bad(fmt::format("range \"{}\" runs backwards", part));
    if (static_cast<uint64_t>(*hi - *lo) >= kMaxSeeds) return bad(fmt::format("more than {} seeds", kMaxSeeds));
    for (int64_t s = *lo; s <= *hi; ++s) {
      if (std::find(seeds.begin(), seeds.end(), static_cast<uint64_t>(s)) == seeds.end())
        seeds.push_back(static_cast<uint64_t>(s));
      if (seeds.size() > kMaxSeeds) return bad(fmt::format("more than {} seeds", kMaxSeeds));
    }
  }
  return seeds;
}

void add_sim_commands(CLI::App& app, PolicyRegistry registry) {
  auto shared_registry = std::make_shared<const PolicyRegistry>(std::move(registry));
  CLI::App* sim = app.add_subcommand("sim", "Trace-driven simulator: experiments against recorded workloads");
  sim->allow_extras();

  CLI::App* alloc = sim->add_subcommand(
      "alloc",
      "The FGD-methodology allocation experiment: pods arrive until their GPU demand reaches 130% of "
      "capacity, never leave; GPU allocation is measured for each policy and seed");
  alloc->allow_extras();
  auto flags = std::make_shared<AllocFlags>();
  add_text_flag(alloc, "--nodes", flags->nodes, "Node list CSV (sn,cpu_milli,memory_mib,gpu,model)");
  add_text_flag(alloc, "--pods", flags->pods, "Pod list CSV; repeat for more workloads");
  add_text_flag(alloc, "--policies", flags->policies,
                "Comma list of policies (default: " + join(shared_registry->keys(), ",") + ")");
  add_text_flag(alloc, "--seeds", flags->seeds, "Seeds: A-B or a comma list (default 42-51)");
  add_text_flag(alloc, "--threads", flags->threads, "Worker threads (default: the machine's cores)");
  add_text_flag(alloc, "--reference", flags->reference,
                "Reference curves CSV (default: reference_allocation_curves.csv beside a pod file, if any)");
  add_text_flag(alloc, "--out", flags->out, "Output directory (created if needed)");
  alloc->add_flag("--migrations", flags->migrations,
                  "A GPU pod that fits nowhere may be placed by moving placed pods: a few into holes, or a "
                  "bounded re-pack of a few GPUs (every move counted)");
  alloc->callback([alloc, flags, shared_registry] { run_alloc(*flags, *shared_registry, alloc->remaining()); });

  // The replay experiment lives in replay_command.cpp.
  add_replay_command(*sim);

  sim->callback([sim] {
    if (!sim->remaining().empty()) {
      // Listed at run time so that commands added later (replay) show up.
      std::vector<std::string> names;
      for (const CLI::App* sub : sim->get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
      std::fprintf(stderr, "cnlab sim: unknown command \"%s\"; valid: %s\n", sim->remaining()[0].c_str(),
                   join(names, ", ").c_str());
      throw CLI::RuntimeError(kBadInput);
    }
    if (sim->get_subcommands().empty()) {
      std::fputs(sim->help().c_str(), stderr);
      throw CLI::RuntimeError(kBadInput);
    }
  });
}

}  // namespace cnlab::sim
