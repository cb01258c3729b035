// The models by name: the built-in tables, and those registered at run time (tests).
#include "models/model.h"

#include <pthread.h>
#include <string.h>

static const mo_model_ops *builtin[] = {&mo_gpt_model, &mo_mlp_model, &mo_resnet_model};
#define NBUILTIN ((int)(sizeof builtin / sizeof builtin[0]))

static const mo_model_ops *extra[MO_MODELS_MAX];
static int n_extra;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

int mo_model_count(void) {
    pthread_mutex_lock(&lock);
    int n = NBUILTIN + n_extra;
    pthread_mutex_unlock(&lock);
    return n;
}

const mo_model_ops *mo_model_at(int i) {
    if (i < 0) return NULL;
    if (i < NBUILTIN) return builtin[i];
    pthread_mutex_lock(&lock);
    const mo_model_ops *m = i - NBUILTIN < n_extra ? extra[i - NBUILTIN] : NULL;
    pthread_mutex_unlock(&lock);
    return m;
}

const mo_model_ops *mo_model_find(const char *name) {
    for (int i = 0, n = mo_model_count(); i < n; i++) {
        const mo_model_ops *m = mo_model_at(i);
        if (m && !strcmp(m->name, name)) return m;
    }
    return NULL;
}

const mo_model_ops *mo_model_default(void) { return builtin[0]; }

mo_status mo_model_register(const mo_model_ops *ops) {
    if (!ops || !ops->name || !ops->name[0] || !ops->validate || !ops->create || !ops->step || !ops->n_presets)
        return MO_FAIL(MO_ERR_INVALID, "mo_model_register: a table needs a name, a preset, validate, create and step");
    if (strlen(ops->name) >= sizeof(((mo_run_config *)0)->model))
        return MO_FAIL(MO_ERR_INVALID, "mo_model_register: name '%s' is too long", ops->name);
    if (ops->workspace_mib != 0 && (ops->workspace_mib < 32 || ops->workspace_mib > MO_WORKSPACE_MIB_MAX))
        return MO_FAIL(MO_ERR_INVALID, "mo_model_register: '%s' workspace_mib %d: expected 0 or 32 to %d", ops->name,
                       ops->workspace_mib, MO_WORKSPACE_MIB_MAX);
    if (mo_model_find(ops->name)) return MO_FAIL(MO_ERR_INVALID, "mo_model_register: model '%s' exists", ops->name);
    pthread_mutex_lock(&lock);
    mo_status st = MO_OK;
    if (NBUILTIN + n_extra >= MO_MODELS_MAX) st = MO_FAIL(MO_ERR_INVALID, "mo_model_register: at most %d models", MO_MODELS_MAX);
    else extra[n_extra++] = ops;
    pthread_mutex_unlock(&lock);
    return st;
}

const char *mo_model_names(char *buf, size_t n) {
    if (n) buf[0] = '\0';
    for (int i = 0, k = mo_model_count(); i < k; i++) {
        if (i) strncat(buf, ", ", n - strlen(buf) - 1);
        strncat(buf, mo_model_at(i)->name, n - strlen(buf) - 1);
    }
    return buf;
}

mo_status mo_model_of(const mo_run_config *rc, const mo_model_ops **out) {
    *out = mo_model_find(rc->model);
    if (*out) return MO_OK;
    char names[256];
    return MO_FAIL(MO_ERR_INVALID, "--model: unknown value '%s' (accepted: %s)", rc->model, mo_model_names(names, sizeof names));
}

const mo_preset *mo_model_preset(const mo_model_ops *ops, const char *name) {
    for (int i = 0; i < ops->n_presets; i++)
        if (!strcmp(ops->presets[i].name, name)) return &ops->presets[i];
    return NULL;
}

size_t mo_model_workspace_bytes(const mo_model_ops *ops) {
    return ops && ops->workspace_mib > 0 ? (size_t)ops->workspace_mib << 20 : MO_GEMM_WORKSPACE_BYTES;
}
