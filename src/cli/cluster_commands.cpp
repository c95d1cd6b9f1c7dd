// `cnlab nodes` and `cnlab gpus`: the cluster's machines and who holds each GPU's blocks. Holdings
// come from the Scheduled and Running jobs the caller can see (a cluster admin sees all; anyone
// else sees their projects' jobs); what other projects hold comes from the node listing's
// `allocated_blocks` and shows as '#', so a GPU is never shown freer than it is.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <tuple>

#include "cli/arguments.h"
#include "cli/block_bar.h"
#include "cli/commands.h"
#include "cli/job_listing.h"
#include "cli/output.h"

namespace cnlab::cli {
namespace {

// The holder standing for every job of a project the caller has no role in.
const std::string kOtherProjects = "(other projects)";

struct ClusterArgs {
  std::string node;
  std::string output;
};

struct Cluster {
  Json nodes;                  // GET /v1/nodes items
  std::vector<Json> jobs;      // Scheduled and Running jobs the caller sees
  BlockMap blocks;
  bool partial = false;        // the caller is not a cluster admin: other projects' jobs are hidden
};

Cluster read_cluster(const ClientFlags& flags, const std::string& only_node) {
  auto client = connect(flags);
  if (!client) fail(client.error());
  auto nodes = get_json(**client, "/v1/nodes");
  if (!nodes) fail(nodes.error());
  Cluster cluster;
  cluster.nodes = Json::array();
  for (Json& node : (*nodes)["items"]) {
    if (only_node.empty() || field(node, "metadata", "name") == only_node) cluster.nodes.push_back(std::move(node));
  }
  if (!only_node.empty() && cluster.nodes.empty()) {
    fail(Error::not_found("--node", only_node, "no such node (see cnlab nodes)"));
  }
  auto me = whoami(**client);
  if (!me) fail(me.error());
  cluster.partial = !me->admin();
  std::vector<Holding> holdings;
  for (const char* phase : {"Running", "Scheduled"}) {
    JobQuery query;
    query.phase = phase;
    auto jobs = list_jobs(**client, *me, query);
    if (!jobs) fail(jobs.error());
    for (Json& job : *jobs) cluster.jobs.push_back(std::move(job));
  }
  // Legend letters in the order people read the bars: by node, GPU, then job id.
  std::map<std::pair<std::string, int>, int> visible;  // blocks the caller's jobs hold per GPU
  for (const Json& job : cluster.jobs) {
    for (Holding& h : holdings_of(job)) {
      visible[{h.node, h.gpu}] += h.blocks;
      holdings.push_back(std::move(h));
    }
  }
  std::sort(holdings.begin(), holdings.end(), [](const Holding& a, const Holding& b) {
    return std::tie(a.node, a.gpu, a.mig_start, a.job) < std::tie(b.node, b.gpu, b.mig_start, b.job);
  });
  // The rest of what the server says is allocated belongs to jobs the caller cannot see; it goes
  // last on each GPU, after the caller's own.
  for (const Json& node : cluster.nodes) {
    std::string name(field(node, "metadata", "name"));
    for (const Json& gpu : node["status"].value("gpus", Json::array())) {
      int index = gpu.value("index", 0);
      int hidden = gpu.value("allocated_blocks", 0) - visible[{name, index}];
      if (hidden > 0) holdings.push_back({kOtherProjects, name, index, hidden, -1});
    }
  }
  cluster.blocks = build_block_map(holdings);
  return cluster;
}

// The bar's letter of job `index` in `blocks`: '#' for other projects' jobs.
char letter_of(const BlockMap& blocks, int index) {
  return index >= 0 && blocks.jobs[index] == kOtherProjects ? '#' : job_letter(index);
}

const char* node_phase_colour(std::string_view phase) {
  if (phase == "Ready") return kGreen;
  if (phase == "Lost") return kRed;
  return kYellow;  // NotReady, Cordoned, Draining
}

void print_partial_note(const Cluster& cluster) {
  if (cluster.partial) {
    std::fprintf(stderr, "note: blocks held by jobs of projects you have no role in show as '#'\n");
  }
}

void run_nodes(const ClientFlags& flags, const ClusterArgs& args) {
  auto format = parse_output_format(args.output);
  if (!format) fail(format.error());
  if (*format != OutputFormat::kTable) {
    // No jobs needed: the server's node list is the answer.
    auto client = connect(flags);
    if (!client) fail(client.error());
    auto nodes = get_json(**client, "/v1/nodes");
    if (!nodes) fail(nodes.error());
    if (*format == OutputFormat::kJson) print_json_and_exit(Json{{"items", (*nodes)["items"]}});
    for (const Json& node : (*nodes)["items"]) std::printf("%s\n", std::string(field(node, "metadata", "name")).c_str());
    std::exit(0);
  }
  Cluster cluster = read_cluster(flags, args.node);
  const Time now = now_seconds();
  Table table({{"NAME"}, {"PHASE"}, {"GPUS (free/total blocks)", Table::Align::kLeft, true}, {"CPU", Table::Align::kRight},
               {"MEMORY", Table::Align::kRight}, {"HEARTBEAT", Table::Align::kRight}, {"NOTES"}});
  for (const Json& node : cluster.nodes) {
    std::string name(field(node, "metadata", "name"));
    const Json& status = node.contains("status") ? node["status"] : Json::object();
    // Per model, in the order the GPUs come: count, free and total blocks.
    struct Tally { std::string model; int count = 0, free = 0, total = 0; };
    std::vector<Tally> tallies;
    int unhealthy = 0;
    int mig = 0;
    for (const Json& gpu : status.value("gpus", Json::array())) {
      std::string model = gpu.value("model", "?");
      auto it = std::find_if(tallies.begin(), tallies.end(), [&](const Tally& t) { return t.model == model; });
      if (it == tallies.end()) it = tallies.insert(tallies.end(), Tally{model});
      const GpuBlocks* held = cluster.blocks.find(name, gpu.value("index", 0));
      it->count += 1;
      it->total += model::kBlocksPerGpu;
      it->free += model::kBlocksPerGpu - (held ? held->held : 0);
      if (!gpu.value("healthy", true)) ++unhealthy;
      if (gpu.value("mig_enabled", false)) ++mig;
    }
    std::string gpus;
    for (const Tally& t : tallies) {
      if (!gpus.empty()) gpus += ", ";
      gpus += t.model + "x" + std::to_string(t.count) + " " + std::to_string(t.free) + "/" + std::to_string(t.total);
    }
    if (gpus.empty()) gpus = "-";
    std::vector<std::string> notes;
    if (status.value("simulated", false)) notes.push_back("simulated");
    const std::string phase(field(node, "status", "phase"));
    if (phase == "Draining") {
      // What the drain still waits for: jobs that move, those that run to their end here, and those
      // requeued that are still stopping here.
      const int64_t left = drain_jobs_left(status);
      notes.push_back(left == 0 ? std::string("drained: no jobs left") : "draining: " + count_of(left, "job") + " left");
    } else if (node.contains("spec") && node["spec"].value("unschedulable", false)) {
      notes.push_back("cordoned");
    }
    if (unhealthy) notes.push_back(std::to_string(unhealthy) + " GPU" + (unhealthy > 1 ? "s" : "") + " unhealthy");
    if (mig) notes.push_back("MIG on " + std::to_string(mig));
    // What `cnlab migrate --to` (and the scheduler's moves) cannot bring here.
    if (status.value("peer_address", "").empty()) {
      notes.push_back("takes no live migrations");
    } else if (!tallies.empty() && !status.value("gpu_checkpoint", false)) {
      notes.push_back("GPU jobs do not migrate");
    }
    Time heartbeat = time_field(node, "status", "last_heartbeat");
    if (status.value("power_down_candidate", false)) {
      const Time idle_since = time_field(node, "status", "idle_since");
      notes.push_back("power-down candidate" + (idle_since == Time{} ? "" : " (idle " + format_age(now - idle_since) + ")"));
    }
    table.row();
    table.cell(name);
    table.cell(phase, node_phase_colour(phase));
    table.cell(gpus);
    table.cell(std::to_string(status.value("cpu_milli", int64_t{0}) / 1000));
    table.cell(format_bytes(status.value("memory_mib", int64_t{0}) * 1024 * 1024));
    table.cell(heartbeat == Time{} ? "never" : format_age(now - heartbeat) + " ago");
    std::string joined;
    for (const auto& n : notes) joined += (joined.empty() ? "" : ", ") + n;
    table.cell(joined.empty() ? "-" : joined, unhealthy ? kRed : nullptr);
  }
  if (table.rows() == 0) {
    std::fprintf(stderr, "no nodes have joined yet (an agent joins with cnlab agent --join-token ...)\n");
    std::exit(0);
  }
  table.print(stdout);
  print_partial_note(cluster);
  std::exit(0);
}

const char* job_colour(int index) {
  static const char* const kPalette[] = {kCyan, kMagenta, kBlue, kGreen, kYellow, kRed};
  return kPalette[index % 6];
}

// The bar, each letter in its job's colour when `colour`.
std::string painted_bar(const BlockMap& blocks, const std::vector<int>& cells, bool colour) {
  std::string out = "[";
  for (int job : cells) {
    std::string letter(1, letter_of(blocks, job));
    if (!colour) out += letter;
    else if (job < 0 || letter == "#") out += colourise(letter, kDim);
    else out += colourise(letter, job_colour(job));
  }
  return out + "]";
}

std::string mig_text(const Json& gpu) {
  if (!gpu.value("mig_enabled", false)) return "-";
  std::string out;
  for (const Json& m : gpu.value("mig_instances", Json::array())) {
    if (!out.empty()) out += ",";
    out += m.value("profile", "?") + "@" + std::to_string(m.value("start", 0));
  }
  return out.empty() ? "on, none" : out;
}

void run_gpus(const ClientFlags& flags, const ClusterArgs& args) {
  auto format = parse_output_format(args.output, /*allow_name=*/false);
  if (!format) fail(format.error());
  Cluster cluster = read_cluster(flags, args.node);
  std::map<std::string, const Json*> job_by_id;
  for (const Json& job : cluster.jobs) job_by_id[std::string(field(job, "metadata", "name"))] = &job;

  if (*format == OutputFormat::kJson) {
    Json items = Json::array();
    for (const Json& node : cluster.nodes) {
      std::string name(field(node, "metadata", "name"));
      for (const Json& gpu : node["status"].value("gpus", Json::array())) {
        int index = gpu.value("index", 0);
        Json holders = Json::array();
        for (const Json& job : cluster.jobs) {
          for (const Holding& h : holdings_of(job)) {
            if (h.node != name || h.gpu != index) continue;
            Json holder = {{"job", h.job}, {"project", field(job, "spec", "project")}, {"user", field(job, "spec", "user")},
                           {"blocks", h.blocks}};
            if (h.mig_start >= 0) holder["mig_start"] = h.mig_start;
            holders.push_back(std::move(holder));
          }
        }
        const GpuBlocks* held = cluster.blocks.find(name, index);
        int others = 0;
        if (held) {
          for (int16_t owner : held->owners) others += owner >= 0 && cluster.blocks.jobs[owner] == kOtherProjects;
        }
        items.push_back({{"node", name},
                         {"index", index},
                         {"model", gpu.value("model", "")},
                         {"simulated", gpu.value("simulated", false)},
                         {"healthy", gpu.value("healthy", true)},
                         {"mig_enabled", gpu.value("mig_enabled", false)},
                         {"mig_instances", gpu.value("mig_instances", Json::array())},
                         {"free_blocks", model::kBlocksPerGpu - (held ? held->held : 0)},
                         {"holders", std::move(holders)},
                         {"other_projects_blocks", others}});
      }
    }
    print_json_and_exit(Json{{"items", std::move(items)}, {"partial", cluster.partial}});
  }

  const bool colour = colour_enabled(stdout);
  Table table({{"NODE"}, {"GPU", Table::Align::kRight}, {"MODEL"}, {"MIG"}, {"USED", Table::Align::kRight},
               {"BLOCKS (each letter 5%)"}, {"NOTES"}});
  for (const Json& node : cluster.nodes) {
    std::string name(field(node, "metadata", "name"));
    for (const Json& gpu : node["status"].value("gpus", Json::array())) {
      int index = gpu.value("index", 0);
      const GpuBlocks* held = cluster.blocks.find(name, index);
      std::string bar = free_bar();
      if (held) {
        bar = painted_bar(cluster.blocks, bar_cells(*held), colour);
      }
      int used = held ? held->held : 0;
      std::string notes;
      if (gpu.value("simulated", false)) notes = "simulated";
      if (!gpu.value("healthy", true)) notes += std::string(notes.empty() ? "" : ", ") + "unhealthy";
      table.row();
      table.cell(name);
      table.cell(std::to_string(index));
      table.cell(gpu.value("model", "?"));
      table.cell(mig_text(gpu));
      table.cell(std::to_string(used) + "%", used == 100 ? kRed : used > 0 ? kYellow : kGreen);
      table.cell(bar);
      table.cell(notes.empty() ? "-" : notes, gpu.value("healthy", true) ? nullptr : kRed);
    }
  }
  if (table.rows() == 0) {
    std::fprintf(stderr, "no GPUs: no nodes have joined yet\n");
    std::exit(0);
  }
  table.print(stdout);

  // The legend: the letter of every job in the bars, what it is and what it holds.
  Table legend({{""}, {"JOB"}, {"PROJECT"}, {"USER"}, {"PHASE"}, {"HOLDS", Table::Align::kLeft, true}});
  int hidden_blocks = 0;
  std::string hidden_holds;
  for (const GpuBlocks& gpu : cluster.blocks.gpus) {
    int here = 0;
    for (int16_t owner : gpu.owners) here += owner >= 0 && cluster.blocks.jobs[owner] == kOtherProjects;
    if (here == 0) continue;
    hidden_blocks += here;
    hidden_holds += (hidden_holds.empty() ? "" : ", ") + gpu.node + ":" + std::to_string(gpu.gpu) + "=" + std::to_string(here);
  }
  for (size_t i = 0; i < cluster.blocks.jobs.size(); ++i) {
    const std::string& id = cluster.blocks.jobs[i];
    if (id == kOtherProjects) continue;
    auto it = job_by_id.find(id);
    if (it == job_by_id.end()) continue;
    const Json& job = *it->second;
    std::string holds;
    for (const Holding& h : holdings_of(job)) {
      if (!holds.empty()) holds += ", ";
      holds += h.node + ":" + std::to_string(h.gpu) + "=" + std::to_string(h.blocks);
    }
    legend.row();
    std::string letter(1, job_letter(static_cast<int>(i)));
    legend.cell(letter, job_colour(static_cast<int>(i)));
    legend.cell(id);
    legend.cell(std::string(field(job, "spec", "project")));
    legend.cell(std::string(field(job, "spec", "user")));
    legend.cell(std::string(field(job, "status", "phase")));
    legend.cell(holds);
  }
  if (hidden_blocks > 0) {
    legend.row();
    legend.cell("#", kDim);
    legend.cell("(other projects)");
    legend.cell("-");
    legend.cell("-");
    legend.cell("-");
    legend.cell(hidden_holds);
  }
  if (legend.rows() > 0) {
    std::printf("\n");
    legend.print(stdout);
  }
  print_partial_note(cluster);
  std::exit(0);
}

}  // namespace

void add_cluster_commands(CLI::App& app, std::shared_ptr<ClientFlags> flags) {
  auto nodes_args = std::make_shared<ClusterArgs>();
  auto* nodes = app.add_subcommand("nodes", "List the nodes: phase, GPUs with free/total blocks, last heartbeat");
  nodes->add_option("--node", nodes_args->node, "Only this node")->check(node_name());
  add_output_option(*nodes, nodes_args->output);
  nodes->footer("Example:\n  cnlab nodes\n  cnlab nodes -o json | jq '.items[].status.phase'");
  nodes->callback([flags, nodes_args] { run_nodes(*flags, *nodes_args); });

  auto gpus_args = std::make_shared<ClusterArgs>();
  auto* gpus = app.add_subcommand("gpus", "Show every GPU and which jobs hold its 1% blocks");
  gpus->add_option("--node", gpus_args->node, "Only this node's GPUs")->check(node_name());
  add_output_option(*gpus, gpus_args->output, /*allow_name=*/false);
  gpus->footer(
      "Example:\n"
      "  cnlab gpus --node gpu-1\n"
      "  NODE   GPU  MODEL  MIG  USED  BLOCKS (each letter 5%)  NOTES\n"
      "  gpu-1    0  h100   -     75%  [AAAAAAAAAAbbbbb.....]   simulated\n"
      "\n"
      "     JOB             PROJECT  USER   PHASE    HOLDS\n"
      "  A  train-6f3ae726  vision   alice  Running  gpu-1:0=50\n"
      "  b  eval-98bbdd25   vision   bob    Running  gpu-1:0=25");
  gpus->callback([flags, gpus_args] { run_gpus(*flags, *gpus_args); });
}

}  // namespace cnlab::cli
