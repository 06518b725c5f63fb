// run_doctor (jobs/doctor.h): each check measures on every rank, then agree() picks the worst
// rank's row so that every rank returns the same table. Cross-rank exchanges use the world
// communicator's broadcast and all-reduce only (strings travel as a length, then bytes).
#include "jobs/doctor.h"

#include <fcntl.h>
#include <omp.h>
#include <sched.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <system_error>

#include "core/error.h"
#include "core/host.h"
#include "core/memory.h"
#include "data/blend.h"
#include "model/machine.h"
#include "model/backend.h"
#include "parallel/data_parallel.h"
#include "train/run_plan.h"

namespace llamatrain::train {

namespace fs = std::filesystem;

namespace {

int world_size(parallel::Communicator* w) { return w ? w->size() : 1; }
int world_rank(parallel::Communicator* w) { return w ? w->rank() : 0; }

// root's string on every rank (s itself without a world).
std::string broadcast_string(parallel::Communicator* w, std::string s, int root) {
  return w ? w->broadcast_string(std::move(s), root) : s;
}

// Every rank's string, in rank order, on every rank.
std::vector<std::string> gather_strings(parallel::Communicator* w, const std::string& mine) {
  return w ? w->gather_strings(mine) : std::vector<std::string>{mine};
}

// The sum over the ranks of a count.
double sum_over_ranks(parallel::Communicator* w, double x) {
  if (w && w->size() > 1) w->all_reduce(&x, 1);
  return x;
}

// Every rank's row for one check -> the worst one (the lowest rank among equals), on every rank.
DoctorRow agree(parallel::Communicator* w, DoctorRow mine) {
  mine.rank = world_rank(w);
  const int n = world_size(w);
  if (n == 1) return mine;
  std::vector<double> status(size_t(n), 0.0);
  status[size_t(mine.rank)] = double(int(mine.status));
  w->all_reduce(status.data(), status.size());
  int worst = 0;
  for (int r = 1; r < n; r++)
    if (status[size_t(r)] > status[size_t(worst)]) worst = r;
  DoctorRow out = mine;
  out.status = CheckStatus(int(status[size_t(worst)]));
  out.rank = worst;
  out.detail = broadcast_string(w, mine.detail, worst);
  return out;
}

// ---- this machine ----

std::map<std::string, std::string> cpuinfo_first_cpu() {
  std::map<std::string, std::string> out;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) break;  // the first processor's block only
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.erase(0, 1);
    out[key] = value;
  }
  return out;
}

DoctorRow check_cpu() {
  const auto info = cpuinfo_first_cpu();
  std::set<std::string> flags;
  std::istringstream in(info.count("flags") ? info.at("flags") : "");
  for (std::string f; in >> f;) flags.insert(f);
  std::string have;
  for (const char* f : {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"})
    if (flags.count(f)) have += std::string(have.empty() ? "" : " ") + f;
  const std::string cpu_model = info.count("model name") ? info.at("model name") : "unknown CPU";
  DoctorRow row{"cpu", CheckStatus::pass,
                fmt::format("{}; {}", cpu_model, have.empty() ? "no vector extensions" : have)};
  try {
    row.detail += fmt::format("; kernels {}", model::cpu_kernels_variant());
  } catch (const Error& e) {  // LLAMATRAIN_CPU_KERNELS names a variant this CPU or build lacks
    row.status = CheckStatus::fail;
    row.detail += fmt::format("; {}", e.what());
  }
  if (!flags.count("avx2") && info.count("flags")) {
    row.status = CheckStatus::warn;
    row.detail += "; no AVX2: the matmul kernels run far below this machine's peak";
  }
  return row;
}

DoctorRow check_matmul(const TrainConfig* config, bool has_amx) {
  const double f32 = model::matmul_gflops(model::Precision::fp32, 512, 512, 512, 0.05);
  const double b16 = model::matmul_gflops(model::Precision::bf16_mixed, 512, 512, 512, 0.05);
  const bool bf16_kernel = model::bf16_matmul_available();
  DoctorRow row{"matmul", CheckStatus::pass,
                fmt::format("oneDNN 512^3: fp32 {:.0f} GFLOP/s, bf16 {:.0f} GFLOP/s ({})", f32, b16,
                            bf16_kernel ? (has_amx ? "bf16 kernel on AMX" : "bf16 kernel on AVX-512")
                                        : "no bf16 kernel: bf16 runs on the fp32 kernel")};
  if (config && config->trainer.precision != model::Precision::fp32 && !bf16_kernel) {
    row.status = CheckStatus::warn;
    row.detail += fmt::format("; trainer.precision={} computes at fp32 speed on this CPU (AVX-512 bf16 or AMX "
                              "has the bf16 kernel)",
                              model::precision_name(config->trainer.precision));
  }
  return row;
}

// kB values of /proc/meminfo.
std::map<std::string, double> meminfo() {
  std::map<std::string, double> out;
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (!key.empty() && key.back() == ':') key.pop_back();
    out[key] = kb * 1024.0;
  }
  return out;
}

// What train and plan count as available (core::available_memory_bytes: MemAvailable, or less under a
// cgroup limit such as `sbatch --mem`'s), in their unit (GB).
DoctorRow check_memory(int ranks_here) {
  const auto m = meminfo();
  const double avail = double(std::max<int64_t>(0, available_memory_bytes()));
  const double total = m.count("MemTotal") ? m.at("MemTotal") : 0;
  DoctorRow row{"memory", CheckStatus::pass,
                fmt::format("{:.1f} GB available of {:.1f} GB on this node ({} rank{} here)", avail / 1e9, total / 1e9,
                            ranks_here, ranks_here == 1 ? "" : "s")};
  if (const char* slurm_mb = std::getenv("SLURM_MEM_PER_NODE"))
    row.detail += fmt::format("; SLURM limit {} MiB", slurm_mb);
  if (avail < 0.5e9) {
    row.status = CheckStatus::fail;
    row.detail += "; under 0.5 GB free: a model and its optimizer state will not fit";
  } else if (avail < 2e9) {
    row.status = CheckStatus::warn;
    row.detail += "; under 2 GB free";
  }
  return row;
}

// The folder itself, or its nearest existing ancestor.
fs::path existing_ancestor(fs::path p) {
  std::error_code ec;
  p = fs::absolute(p, ec);
  while (!p.empty() && !fs::exists(p, ec) && p != p.root_path()) p = p.parent_path();
  return p;
}

DoctorRow check_disk(const std::string& run_dir) {
  const fs::path at = existing_ancestor(run_dir);
  struct statvfs s {};
  if (::statvfs(at.c_str(), &s) != 0)
    return {"disk", CheckStatus::fail, fmt::format("cannot read the free space of {}", at.string())};
  const double free_b = double(s.f_bavail) * double(s.f_frsize), total = double(s.f_blocks) * double(s.f_frsize);
  DoctorRow row{"disk", CheckStatus::pass,
                fmt::format("{:.1f} GB free of {:.1f} GB at {}", free_b / 1e9, total / 1e9, at.string())};
  if (free_b < 0.25e9) {
    row.status = CheckStatus::fail;
    row.detail += "; under 0.25 GB: checkpoints cannot be saved";
  } else if (free_b < 4e9) {
    row.status = CheckStatus::warn;
    row.detail += "; under 4 GB: a large model's checkpoints need more";
  }
  return row;
}

int cpus_usable() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return int(::sysconf(_SC_NPROCESSORS_ONLN));
}

DoctorRow check_threads(int ranks_here) {
  const int threads = omp_get_max_threads(), cpus = cpus_usable();
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  DoctorRow row{"threads", CheckStatus::pass,
                fmt::format("{} thread{} per rank x {} rank{} on this node, {} CPUs usable by this rank ({} online)",
                            threads, threads == 1 ? "" : "s", ranks_here, ranks_here == 1 ? "" : "s", cpus, online)};
  const long want = std::max<long>(1, online / std::max(1, ranks_here));
  if (long(threads) * ranks_here > online) {
    row.status = CheckStatus::warn;
    row.detail += fmt::format("; more threads than CPUs: set OMP_NUM_THREADS={}", want);
  } else if (threads > cpus) {
    row.status = CheckStatus::warn;
    row.detail +=
        fmt::format("; more threads than this rank's CPUs: set OMP_NUM_THREADS={} (or --cpus-per-task)", cpus);
  } else if (long(threads) * ranks_here * 2 <= online && online > 1) {
    row.status = CheckStatus::warn;
    row.detail += fmt::format("; half the CPUs or more idle: set OMP_NUM_THREADS={}", want);
  }
  return row;
}

// ---- the ranks together ----

DoctorRow check_ranks(parallel::Communicator* w, const std::vector<std::string>& hosts, const TrainConfig* config) {
  if (!w) return {"ranks", CheckStatus::pass, "this process only (--all-ranks under mpirun or srun checks every rank)"};
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> by_host;
  for (int r = 0; r < int(hosts.size()); r++) {
    if (!by_host.count(hosts[size_t(r)])) order.push_back(hosts[size_t(r)]);
    by_host[hosts[size_t(r)]].push_back(r);
  }
  std::string where;
  size_t least = hosts.size(), most = 0;
  for (const auto& h : order) {
    const auto& rs = by_host[h];
    least = std::min(least, rs.size());
    most = std::max(most, rs.size());
    const std::string ranks = rs.size() == 1 ? fmt::format("rank {}", rs[0])
                              : rs.back() - rs.front() + 1 == int(rs.size())
                                  ? fmt::format("ranks {}-{}", rs.front(), rs.back())
                                  : fmt::format("{} ranks", rs.size());
    if (where.size() < 200) where += fmt::format("{}{} ({})", where.empty() ? "" : ", ", h, ranks);
  }
  DoctorRow row{"ranks", CheckStatus::pass,
                fmt::format("{} rank{} answered on {} node{}: {}", hosts.size(), hosts.size() == 1 ? "" : "s",
                            order.size(), order.size() == 1 ? "" : "s", where)};
  if (const char* job = std::getenv("SLURM_JOB_ID")) row.detail += fmt::format("; SLURM job {}", job);
  if (least != most) {
    row.status = CheckStatus::warn;
    row.detail += fmt::format("; {} to {} ranks per node, expected the same on every node", least, most);
  }
  if (config && config->world_size() != int(hosts.size())) {
    row.status = CheckStatus::fail;
    row.detail += fmt::format("; trainer.devices x trainer.num_nodes = {} x {} = {}, expected the job's {} ranks",
                              config->trainer.devices, config->trainer.num_nodes, config->world_size(), hosts.size());
  }
  return row;
}

DoctorRow check_allreduce(parallel::Communicator* w, double mib) {
  const int n = world_size(w);
  if (n == 1) return {"allreduce", CheckStatus::pass, "one rank: nothing to exchange"};
  const size_t count = std::max<size_t>(1024, size_t(mib * 1024 * 1024 / sizeof(float)));
  const int rank = w->rank();
  // Each rank's values are small integers, so the float sum is exact in any order.
  std::vector<float> buf(count);
  for (size_t i = 0; i < count; i++) buf[i] = float((rank + 1) * int(i % 61 + 1));
  w->all_reduce(buf.data(), buf.size());
  const double factor = double(n) * (n + 1) / 2;
  size_t wrong = 0, first_wrong = 0;
  for (size_t i = 0; i < count; i++)
    if (double(buf[i]) != factor * double(i % 61 + 1)) {
      if (wrong == 0) first_wrong = i;
      wrong++;
    }
  const double wrong_total = sum_over_ranks(w, double(wrong));
  // Timed: the best of a few, after the check above warmed the connections.
  double best = 1e30;
  for (int iter = 0; iter < 4; iter++) {
    std::fill(buf.begin(), buf.end(), 1.0f);
    w->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    w->all_reduce(buf.data(), buf.size());
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    w->all_reduce(&s, 1);  // the job is as slow as its slowest rank: the mean of the ranks' times
    best = std::min(best, s / n);
  }
  const double bytes = double(count) * sizeof(float);
  const double bus = 2.0 * (n - 1) / n * bytes / best / 1e9;
  DoctorRow row{"allreduce", CheckStatus::pass,
                fmt::format("sum of {} ranks exact; {:.0f} MiB per rank in {:.1f} ms: {:.2f} GB/s bus bandwidth", n,
                            bytes / (1024 * 1024), best * 1e3, bus)};
  if (wrong > 0) {
    row.status = CheckStatus::fail;
    row.detail =
        fmt::format("all-reduce gave wrong sums: {} of {} values here, first at index {} ({} instead of {}); "
                    "{:.0f} wrong over all ranks: the interconnect or MPI library corrupts data",
                    wrong, count, first_wrong, buf[first_wrong], factor * double(first_wrong % 61 + 1), wrong_total);
  }
  return row;
}

// ---- the GPU ----

bool wants_gpu(const TrainConfig* config) {
  return config && (config->trainer.accelerator == "gpu" || config->trainer.accelerator == "cuda");
}

// This rank's GPU: which one, its memory and the CUDA versions; a FAIL where the config asks for a GPU
// and none is usable, a WARN where the node's ranks outnumber its GPUs or another process holds memory.
DoctorRow check_gpu(const TrainConfig* config, int ranks_here) {
  const model::GpuInfo g = model::gpu_info();
  if (!g.usable) {
    if (wants_gpu(config))
      return {"gpu", CheckStatus::fail,
              fmt::format("trainer.accelerator={} but no usable GPU: {}; hint: check nvidia-smi on this node, or "
                          "train with trainer.accelerator=cpu",
                          config->trainer.accelerator, g.why_not)};
    return {"gpu", CheckStatus::pass, fmt::format("none ({}): training runs on the cpu", g.why_not)};
  }
  DoctorRow row{"gpu", CheckStatus::pass,
                fmt::format("cuda:{} {} of {} visible; {:.1f} of {:.1f} GB free{}; {} rank{} on this node", g.index,
                            g.name, g.count, double(g.free_bytes) / 1e9, double(g.total_bytes) / 1e9,
                            g.driver.empty() ? "" : fmt::format("; driver CUDA {}, runtime {}", g.driver, g.runtime),
                            ranks_here, ranks_here == 1 ? "" : "s")};
  if (ranks_here > g.count) {
    row.status = CheckStatus::warn;
    row.detail += fmt::format("; {} ranks share {} GPU{}: set one rank per GPU (trainer.devices={})", ranks_here,
                              g.count, g.count == 1 ? "" : "s", g.count);
  } else if (double(g.free_bytes) < 0.9 * double(g.total_bytes)) {
    row.status = CheckStatus::warn;
    row.detail += fmt::format("; {:.1f} GB held by other processes (nvidia-smi names them)",
                              double(g.total_bytes - g.free_bytes) / 1e9);
  }
  return row;
}

// The mean over the ranks of arrays in GPU memory, by the calls data-parallel training makes: NCCL's
// where the build has it, else the host-staged all-reduce over MPI; checked exactly.
DoctorRow check_gpu_allreduce(parallel::Communicator* w, double mib) {
  const int n = world_size(w);
  auto k = model::make_kernels(model::Device::cuda, model::Precision::fp32);
  std::string why_not;
  std::unique_ptr<model::GpuCollectives> nccl = model::make_gpu_collectives(*w, &why_not);
  const size_t count = std::max<size_t>(1024, size_t(mib * 1024 * 1024 / sizeof(float)));
  model::Buffer<float> dev(k.get());
  dev.assign_zero(int64_t(count));
  std::vector<float> buf(count);
  const int rank = world_rank(w);
  double best = 1e30;
  size_t wrong = 0;
  for (int iter = 0; iter < 3; iter++) {
    for (size_t i = 0; i < count; i++) buf[i] = float((rank + 1) * int(i % 61 + 1));
    k->copy_from_host(dev.data(), buf.data(), count * sizeof(float));
    w->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (nccl)
      nccl->mean(dev.data(), int64_t(count));
    else
      parallel::all_reduce_gradients(*w, model::staged_arena(*k, dev.data(), count), count);
    k->synchronize();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    w->all_reduce(&s, 1);
    best = std::min(best, s / n);
  }
  k->copy_to_host(buf.data(), dev.data(), count * sizeof(float));
  // (the sum of small integers is exact in any order; its mean is the sum's one rounding times 1/n)
  const float factor = float(n * (n + 1) / 2);
  for (size_t i = 0; i < count; i++) wrong += buf[i] != factor * float(i % 61 + 1) * (1.0f / float(n));
  DoctorRow row{"gpu allreduce", CheckStatus::pass,
                fmt::format("{}: mean of {} ranks' GPU memory exact; {:.0f} MiB per rank in {:.1f} ms",
                            nccl ? nccl->describe() : "host-staged through MPI" + why_not, n,
                            double(count * sizeof(float)) / (1024 * 1024), best * 1e3)};
  if (wrong > 0) {
    row.status = CheckStatus::fail;
    row.detail = fmt::format("the mean of {} ranks' GPU memory came back wrong in {} of {} values: {} corrupts data", n,
                             wrong, count, nccl ? nccl->describe() : "the GPU copies or MPI");
  }
  return row;
}

// Every rank writes a probe file into the run folder; rank 0 must see them all. Probes, and the
// folder when it was made for this, are removed afterwards.
DoctorRow check_run_dir(parallel::Communicator* w, const std::string& run_dir, const std::vector<std::string>& hosts) {
  const int rank = world_rank(w), n = world_size(w);
  std::error_code ec;
  // Rank 0 makes the folder; the highest folder it made is removed at the end.
  fs::path made;
  std::string problem;
  if (rank == 0) {
    const fs::path ancestor = existing_ancestor(run_dir);
    if (fs::exists(run_dir, ec) && !fs::is_directory(run_dir, ec)) {
      problem = fmt::format("{} is a file, expected a folder", run_dir);
    } else if (!fs::exists(run_dir, ec)) {
      fs::path p = fs::absolute(run_dir, ec);
      while (p.parent_path() != ancestor && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
      made = p;
      fs::create_directories(run_dir, ec);
      if (ec) problem = fmt::format("cannot make {}: {}", run_dir, ec.message());
    }
  }
  problem = broadcast_string(w, problem, 0);
  if (!problem.empty()) {
    return {"run folder", CheckStatus::fail,
            problem + "; hint: choose a folder every node can write (exp_manager.exp_dir or explicit_log_dir on a "
                      "shared filesystem)"};
  }
  const std::string tag = broadcast_string(w, std::to_string(::getpid()), 0);
  const auto probe = [&](int r) { return (fs::path(run_dir) / fmt::format(".doctor-{}-rank{}", tag, r)).string(); };
  std::string mine_problem;
  {
    std::ofstream f(probe(rank), std::ios::binary);
    f << hosts[size_t(rank)];
    f.close();
    if (!f) mine_problem = fmt::format("rank {} on {} cannot write {}", rank, hosts[size_t(rank)], probe(rank));
  }
  if (w) w->barrier();
  std::vector<int> unseen;
  if (rank == 0) {
    for (int r = 0; r < n; r++) {
      std::ifstream f(probe(r), std::ios::binary);
      std::string got((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (!f.good() && !f.eof()) got.clear();
      if (got != hosts[size_t(r)]) unseen.push_back(r);
    }
  }
  if (w) w->barrier();
  fs::remove(probe(rank), ec);
  if (w) w->barrier();
  if (rank == 0 && !made.empty()) fs::remove_all(made, ec);

  DoctorRow row{"run folder", CheckStatus::pass,
                fmt::format("{}: written by {} and seen by rank 0", run_dir,
                            n == 1 ? "this rank" : fmt::format("all {} ranks", n))};
  if (!mine_problem.empty()) {
    row.status = CheckStatus::fail;
    row.detail = mine_problem + "; hint: the run folder must be writable from every node";
  } else if (!unseen.empty()) {
    std::string which;
    std::set<std::string> nodes;
    for (int r : unseen) {
      if (which.size() < 80) which += fmt::format("{}{}", which.empty() ? "" : ",", r);
      nodes.insert(hosts[size_t(r)]);
    }
    std::string node_list;
    for (const auto& h : nodes) node_list += (node_list.empty() ? "" : ",") + h;
    row.status = CheckStatus::fail;
    row.detail = fmt::format("{}: rank 0 does not see the files of ranks {} (on {}): the folder is not shared between "
                             "the nodes; hint: put the run folder on a shared filesystem (NFS, Lustre, FSx)",
                             run_dir, which, node_list);
  }
  return row;
}

// ---- the config's files ----

bool readable_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  char c;
  const bool ok = ::read(fd, &c, 1) >= 0;
  ::close(fd);
  return ok;
}

DoctorRow check_config_files(const TrainConfig& c) {
  std::vector<std::string> bad;
  size_t checked = 0;
  const auto need = [&](const std::string& key, const std::string& path) {
    checked++;
    if (!readable_file(path)) bad.push_back(fmt::format("{}: cannot read {}", key, path));
  };
  const DataConfig& dc = c.model.data;
  if (!dc.fine_tuning) {
    for (const auto* items : {&dc.data_prefix.train, &dc.data_prefix.validation, &dc.data_prefix.test})
      if (!items->empty())
        for (const auto& prefix : data::parse_data_prefix(*items).prefixes)
          for (const char* ext : {".bin", ".idx"}) need("model.data.data_prefix", prefix + ext);
  } else {
    for (const auto* ds : {&c.model.data.train_ds, &c.model.data.validation_ds, &c.model.data.test_ds})
      for (const auto& f : ds->file_names) need("model.data.*_ds.file_names", f);
  }
  const std::string tok = c.model.tokenizer_model_path();
  const bool tok_from_init = c.model.init_from && (tok == (fs::path(*c.model.init_from) / "tokenizer.model").string() ||
                                                   tok == (fs::path(*c.model.init_from) / "tokenizer.json").string());
  if (!tok.empty() && !(tok_from_init && !fs::exists(tok))) need("model.tokenizer", tok);
  if (c.model.init_from) need("model.init_from", (fs::path(*c.model.init_from) / "config.json").string());
  if (c.model.resume_from_checkpoint) {
    checked++;
    std::error_code ec;
    if (!fs::exists(*c.model.resume_from_checkpoint, ec))
      bad.push_back(fmt::format("model.resume_from_checkpoint: {} does not exist", *c.model.resume_from_checkpoint));
  }
  if (bad.empty())
    return {"config files", CheckStatus::pass, fmt::format("{} file{} readable", checked, checked == 1 ? "" : "s")};
  std::string detail;
  for (const auto& b : bad) detail += (detail.empty() ? "" : "; ") + b;
  return {"config files", CheckStatus::fail,
          detail + "; hint: every node must see the same paths (a shared filesystem)"};
}

}  // namespace

std::vector<DoctorRow> run_doctor(const DoctorOptions& o, parallel::Communicator* w) {
  const std::vector<std::string> hosts = gather_strings(w, host_name());
  const int ranks_here = int(std::count(hosts.begin(), hosts.end(), hosts[size_t(world_rank(w))]));
  const bool has_amx = cpuinfo_first_cpu()["flags"].find("amx_bf16") != std::string::npos;
  std::string run_dir = o.run_dir;
  if (run_dir.empty()) run_dir = o.config ? resolve_log_dir(*o.config) : fs::current_path().string();
  std::error_code ec;
  if (const fs::path abs = fs::absolute(run_dir, ec); !ec) run_dir = abs.lexically_normal().string();
  run_dir = broadcast_string(w, run_dir, 0);  // a name made from the time: rank 0's

  std::vector<DoctorRow> rows;
  rows.push_back(agree(w, check_cpu()));
  rows.push_back(agree(w, check_matmul(o.config, has_amx)));
  rows.push_back(agree(w, check_threads(ranks_here)));
  rows.push_back(agree(w, check_memory(ranks_here)));
  rows.push_back(agree(w, check_disk(run_dir)));
  rows.push_back(agree(w, check_ranks(w, hosts, o.config)));
  rows.push_back(agree(w, check_allreduce(w, o.allreduce_mib)));
  rows.push_back(agree(w, check_gpu(o.config, ranks_here)));
  // (every rank takes part, or none: whether this rank's GPU is usable is agreed first)
  if (w && w->size() > 1) {
    double usable = model::device_usable(model::Device::cuda) ? 1.0 : 0.0;
    w->all_reduce(&usable, 1);
    if (usable == double(w->size())) rows.push_back(agree(w, check_gpu_allreduce(w, o.allreduce_mib)));
  }
  rows.push_back(agree(w, check_run_dir(w, run_dir, hosts)));
  if (o.config) rows.push_back(agree(w, check_config_files(*o.config)));
  if (!o.config_error.empty()) {
    std::string one_line = o.config_error;
    std::replace(one_line.begin(), one_line.end(), '\n', ' ');
    rows.push_back(agree(w, {"config", CheckStatus::fail, one_line}));
  }
  return rows;
}

std::string doctor_table(const std::vector<DoctorRow>& rows) {
  size_t width = 5;
  for (const auto& r : rows) width = std::max(width, r.check.size());
  std::string out;
  for (const auto& r : rows) {
    const std::string where = r.status == CheckStatus::pass ? "" : fmt::format(" [rank {}]", r.rank);
    out += fmt::format("{}  {:<{}}  {}{}\n", check_status_name(r.status), r.check, width, r.detail, where);
  }
  return out;
}

}  // namespace llamatrain::train
