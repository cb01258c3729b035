// The models' host random numbers: splitmix64 and uniforms from it, a fixed stream per seed that is the
// same on every machine (parameter initialization and synthetic batches).
#pragma once
#include <stdint.h>

static inline uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Uniform in (0, 1): the top 53 bits, centred, never 0 (Box-Muller takes its log).
static inline double uniform01(uint64_t *s) { return ((splitmix(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
