// The one C++ file: C callbacks registered as Google Benchmark benchmarks. mo_gb_state is a
// benchmark::State and mo_gb_bench a benchmark::internal::Benchmark, passed through as opaque
// pointers. Nothing here throws into C: allocation failures in registration become statuses.
#include "bench/gbench_shim.h"

#include <benchmark/benchmark.h>

#include <new>
#include <sstream>
#include <vector>
#include <string>

namespace {
benchmark::State &S(mo_gb_state *st) { return *reinterpret_cast<benchmark::State *>(st); }
const benchmark::State &S(const mo_gb_state *st) { return *reinterpret_cast<const benchmark::State *>(st); }
benchmark::internal::Benchmark *B(mo_gb_bench *b) { return reinterpret_cast<benchmark::internal::Benchmark *>(b); }
} // namespace

extern "C" {

mo_status mo_gb_register(const char *name, mo_gb_fn fn, void *user, mo_gb_bench **out) {
    if (out) *out = nullptr;
    if (!name || !fn) return MO_FAIL(MO_ERR_INVALID, "mo_gb_register: a name and a function are required");
    try {
        benchmark::internal::Benchmark *b = benchmark::RegisterBenchmark(
            name, [fn, user](benchmark::State &st) { fn(reinterpret_cast<mo_gb_state *>(&st), user); });
        if (out) *out = reinterpret_cast<mo_gb_bench *>(b);
    } catch (const std::bad_alloc &) {
        return MO_FAIL(MO_ERR_INTERNAL, "mo_gb_register %s: out of host memory", name);
    }
    return MO_OK;
}

void mo_gb_use_manual_time(mo_gb_bench *b) { B(b)->UseManualTime(); }
void mo_gb_use_real_time(mo_gb_bench *b) { B(b)->UseRealTime(); }

void mo_gb_set_unit(mo_gb_bench *b, mo_gb_unit u) {
    static const benchmark::TimeUnit units[] = {benchmark::kNanosecond, benchmark::kMicrosecond,
                                                benchmark::kMillisecond, benchmark::kSecond};
    B(b)->Unit(units[(unsigned)u < 4 ? u : 0]);
}

void mo_gb_set_iterations(mo_gb_bench *b, int64_t n) {
    B(b)->Iterations(static_cast<benchmark::IterationCount>(n > 0 ? n : 1));
}

int mo_gb_keep_running(mo_gb_state *st) { return S(st).KeepRunning() ? 1 : 0; }
void mo_gb_set_iteration_time(mo_gb_state *st, double seconds) { S(st).SetIterationTime(seconds); }
void mo_gb_pause_timing(mo_gb_state *st) { S(st).PauseTiming(); }
void mo_gb_resume_timing(mo_gb_state *st) { S(st).ResumeTiming(); }
int64_t mo_gb_iterations(const mo_gb_state *st) { return static_cast<int64_t>(S(st).iterations()); }

void mo_gb_counter(mo_gb_state *st, const char *name, double value, int flags) {
    int f = benchmark::Counter::kDefaults;
    if (flags & MO_GB_COUNTER_RATE) f |= benchmark::Counter::kIsRate;
    if (flags & MO_GB_COUNTER_AVG_ITERATIONS) f |= benchmark::Counter::kAvgIterations;
    if (flags & MO_GB_COUNTER_AVG_THREADS) f |= benchmark::Counter::kAvgThreads;
    // Bytes in binary units (Mi, Gi), as the suite's own summaries print them.
    const benchmark::Counter::OneK k = (flags & MO_GB_COUNTER_BYTES) ? benchmark::Counter::kIs1024 : benchmark::Counter::kIs1000;
    try {
        S(st).counters[name] = benchmark::Counter(value, static_cast<benchmark::Counter::Flags>(f), k);
    } catch (const std::bad_alloc &) {
        S(st).SkipWithError("out of host memory for a counter");
    }
}

void mo_gb_set_items_processed(mo_gb_state *st, int64_t items) { S(st).SetItemsProcessed(items); }
void mo_gb_set_bytes_processed(mo_gb_state *st, int64_t bytes) { S(st).SetBytesProcessed(bytes); }
void mo_gb_set_label(mo_gb_state *st, const char *label) { S(st).SetLabel(label); }
void mo_gb_skip_with_error(mo_gb_state *st, const char *message) { S(st).SkipWithError(message); }

namespace {
// The library's display reporter (--benchmark_format), less one line: Debian's libbenchmark is built
// without NDEBUG, so every run prints "***WARNING*** Library was built as DEBUG. Timings may be
// affected." The suite's times are its own CUDA events around each step (manual time), which the
// library's build type does not touch; the warning only misleads. Everything else passes through.
class QuietDebugReporter : public benchmark::BenchmarkReporter {
  public:
    explicit QuietDebugReporter(benchmark::BenchmarkReporter *inner) : inner_(inner) {}
    ~QuietDebugReporter() override { delete inner_; }
    bool ReportContext(const Context &context) override {
        std::ostream *err = &inner_->GetErrorStream();
        std::ostringstream buf;
        inner_->SetErrorStream(&buf);
        const bool ok = inner_->ReportContext(context);
        inner_->SetErrorStream(err);
        std::istringstream lines(buf.str());
        for (std::string l; std::getline(lines, l);)
            if (l.find("Library was built as DEBUG") == std::string::npos) *err << l << '\n';
        return ok;
    }
    void ReportRuns(const std::vector<Run> &reports) override { inner_->ReportRuns(reports); }
    void Finalize() override { inner_->Finalize(); }

  private:
    benchmark::BenchmarkReporter *inner_;
};
} // namespace

mo_status mo_gb_run(int *argc, char **argv) {
    benchmark::Initialize(argc, argv);
    if (benchmark::ReportUnrecognizedArguments(*argc, argv)) {
        benchmark::Shutdown();
        return MO_FAIL(MO_ERR_INVALID, "unrecognized benchmark arguments (see --help)");
    }
    try {
        QuietDebugReporter display(benchmark::CreateDefaultDisplayReporter());
        benchmark::RunSpecifiedBenchmarks(&display);
    } catch (const std::bad_alloc &) {
        benchmark::Shutdown();
        return MO_FAIL(MO_ERR_OOM, "out of host memory in Google Benchmark");
    }
    benchmark::Shutdown();
    return MO_OK;
}

} // extern "C"
