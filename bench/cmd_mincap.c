// memopt mincap: the smallest memory cap, to 1% of device memory, at which a configuration still
// trains. As the seed article advises for torch.cuda.set_per_process_memory_fraction, start at
// 80% of device memory and tighten step by step while it still trains: 80, 70, ..., 10% (10
// points a probe), then 5, 2, 1%. (When 80% already fails: loosen to 90, 100%.) Then bisect
// between the last cap that trained and the first that failed, down to one percent. Every probe
// is a full run (warm-up + steps) through the engine with --on-oom fail, so "trains" means what
// memopt run means by it; on the dry backend each probe is exact and instant.
#include <stdio.h>
#include <string.h>
#include "bench/cli.h"
#include "bench/fallback.h"
#include "bench/sweep.h"

typedef struct prober {
    const mo_run_config *cfg;
    const mo_run_env *env;
    mo_csv_writer *w;
    FILE *out;
    uint64_t device;
    mo_mincap_result *res;
} prober;

// floor(device * percent / 100) without overflow.
static uint64_t percent_of(uint64_t device, int percent) {
    return device / 100 * (uint64_t)percent + device % 100 * (uint64_t)percent / 100;
}
static uint64_t cap_of(const prober *p, int percent) { return percent_of(p->device, percent); }

// Runs the configuration under percent% of device memory (0: no cap); *trains = status ok.
static mo_status probe(prober *p, int percent, int *trains, mo_csv_row *row_out) {
    mo_run_config rc = *p->cfg;
    rc.on_oom = MO_ON_OOM_FAIL;
    if (percent > 0) {
        rc.cap.kind = 2;
        rc.cap.bytes = cap_of(p, percent);
        snprintf(rc.cap_text, sizeof rc.cap_text, "%d%%", percent);
    } else {
        memset(&rc.cap, 0, sizeof rc.cap);
        snprintf(rc.cap_text, sizeof rc.cap_text, "none");
    }
    mo_csv_row row;
    MO_TRY(mo_fallback_execute(&rc, p->env, &row, NULL));
    if (p->w) MO_TRY(mo_csv_append(p->w, &row));
    *trains = !strcmp(row.status, "ok");
    if (percent > 0) {
        p->res->probes++;
        if (p->out) {
            char b[32];
            fprintf(p->out, "  probe %3d%% (%s): %s\n", percent, mo_format_bytes(rc.cap.bytes, b, sizeof b),
                    *trains ? "trains" : row.status);
        }
    }
    if (row_out) *row_out = row;
    return MO_OK;
}

mo_status mo_mincap_search(const mo_run_config *cfg, const mo_run_env *env, mo_csv_writer *w, FILE *out,
                           mo_mincap_result *res) {
    memset(res, 0, sizeof *res);
    if (cfg->cap.kind != 0) return MO_FAIL(MO_ERR_INVALID, "--cap: memopt mincap finds the cap itself; leave --cap out");
    if (cfg->on_oom == MO_ON_OOM_SHRINK)
        return MO_FAIL(MO_ERR_INVALID, "--on-oom shrink: memopt mincap measures the configuration as given (use fail)");
    prober p = {cfg, env, w, out, env->have_device ? env->dev.total_mem_bytes : cfg->device_mem_bytes, res};
    res->device_bytes = p.device;
    if (p.device < 100) return MO_FAIL(MO_ERR_INVALID, "--device-mem: %llu bytes is too small to take percents of",
                                       (unsigned long long)p.device);

    int trains = 0;
    MO_TRY(probe(&p, 0, &trains, &res->unconstrained));
    if (!trains)
        return MO_FAIL(!strcmp(res->unconstrained.status, "invalid") ? MO_ERR_INVALID : MO_ERR_OOM,
                       "the configuration does not train even without a cap: %s: %s", res->unconstrained.status,
                       res->unconstrained.detail);
    if (out) {
        char b1[32], b2[32];
        fprintf(out, "  no cap: peak allocated %s, peak reserved %s\n",
                mo_format_bytes((uint64_t)res->unconstrained.peak_allocated_bytes, b1, 32),
                mo_format_bytes((uint64_t)res->unconstrained.peak_reserved_bytes, b2, 32));
    }

    // Tighten from 80% while it trains; ok = smallest percent that trained, bad = largest that failed.
    static const int down[] = {80, 70, 60, 50, 40, 30, 20, 10, 5, 2, 1};
    int ok = 0, bad = 0;
    for (size_t i = 0; i < sizeof down / sizeof down[0]; i++) {
        MO_TRY(probe(&p, down[i], &trains, NULL));
        if (!trains) {
            bad = down[i];
            break;
        }
        ok = down[i];
    }
    if (ok == 0) { // 80% failed: loosen
        static const int up[] = {90, 100};
        for (size_t i = 0; i < sizeof up / sizeof up[0] && !ok; i++) {
            MO_TRY(probe(&p, up[i], &trains, NULL));
            if (trains) ok = up[i];
            else bad = up[i];
        }
        if (!ok) {
            res->failed_percent = 100;
            return MO_OK; // percent 0: does not fit this device at all
        }
    }
    while (ok - bad > 1) { // bisect (bad, ok]; bad 0 when even 1% trained
        int mid = bad + (ok - bad) / 2;
        MO_TRY(probe(&p, mid, &trains, NULL));
        if (trains) ok = mid;
        else bad = mid;
    }
    res->percent = ok;
    res->cap_bytes = cap_of(&p, ok);
    res->failed_percent = bad;
    return MO_OK;
}

mo_status mo_cmd_mincap(const mo_run_config *cfg) {
    mo_run_env env;
    MO_TRY(mo_run_env_init(&env, cfg));
    mo_csv_writer *w = NULL;
    if (cfg->csv[0]) MO_TRY(mo_csv_open(cfg->csv, &w));
    char name[256], b1[32], b2[32], b3[32];
    mo_config_name(cfg, name, sizeof name);
    uint64_t device = env.have_device ? env.dev.total_mem_bytes : cfg->device_mem_bytes;
    printf("memopt mincap: %s, device memory %s (%s)\n", name, mo_format_bytes(device, b1, 32),
           env.have_device ? env.dev.name : "--device-mem");
    mo_mincap_result res;
    mo_status st = mo_mincap_search(cfg, &env, w, stdout, &res);
    mo_csv_close(w);
    MO_TRY(st);
    if (cfg->csv[0]) printf("  %d rows appended to %s (the no-cap run and every probe)\n", res.probes + 1, cfg->csv);
    if (res.percent == 0)
        return MO_FAIL(MO_ERR_OOM, "does not train under any cap on this device: it fails at 100%% (%s); it needs a larger device",
                       mo_format_bytes(device, b1, 32));
    const mo_csv_row *u = &res.unconstrained;
    printf("smallest cap that trains: %d%% of device memory = %s", res.percent, mo_format_bytes(res.cap_bytes, b1, 32));
    if (res.failed_percent > 0)
        printf(" (%d%% = %s does not)\n", res.failed_percent,
               mo_format_bytes(percent_of(device, res.failed_percent), b2, 32));
    else
        printf(" (1%% is the resolution: it may train under less)\n");
    printf("unconstrained peak: allocated %s, reserved %s; the cap is %.2fx the reserved peak (%d probes)\n",
           mo_format_bytes((uint64_t)u->peak_allocated_bytes, b2, 32), mo_format_bytes((uint64_t)u->peak_reserved_bytes, b3, 32),
           (double)res.cap_bytes / (double)u->peak_reserved_bytes, res.probes);
    return MO_OK;
}
