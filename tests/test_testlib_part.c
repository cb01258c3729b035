// MEMOPT_TEST_PART=i/n (tests/testlib.h): the n parts of a test together run every case exactly once,
// part i the cases k with k % n == i - 1, and a bad value exits 2 naming the variable. The test runs
// itself as a child under each setting (MEMOPT_TEST_PART_CHILD=1: take 7 cases, print which).
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/testlib.h"

enum { CASES = 7 };

static int child(void) {
    char mask[CASES + 1];
    for (int k = 0; k < CASES; k++) mask[k] = test_part_take("a case") ? '1' : '0';
    mask[CASES] = '\0';
    printf("taken %s\n", mask);
    return test_finish(); // says how many cases the part ran
}

// Runs this program with MEMOPT_TEST_PART=part (NULL: unset); its output in out, its exit status returned.
static int run(const char *self, const char *part, char *out, size_t n) {
    char cmd[1200];
    if (part)
        snprintf(cmd, sizeof cmd, "MEMOPT_TEST_PART='%s' MEMOPT_TEST_PART_CHILD=1 '%s' 2>&1", part, self);
    else
        snprintf(cmd, sizeof cmd, "env -u MEMOPT_TEST_PART MEMOPT_TEST_PART_CHILD=1 '%s' 2>&1", self);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// The "taken ..." mask of a child's output, or NULL.
static const char *mask_of(const char *out) {
    const char *m = strstr(out, "taken ");
    return m ? m + 6 : NULL;
}

int main(void) {
    if (getenv("MEMOPT_TEST_PART_CHILD")) return child();
    char self[1024];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    if (!CHECK_MSG(l > 0, "readlink /proc/self/exe failed")) return test_finish();
    self[l] = '\0';
    char out[4096];

    // unset: every case
    int rc = run(self, NULL, out, sizeof out);
    const char *m = mask_of(out);
    CHECK_MSG(rc == 0 && m && !strncmp(m, "1111111", CASES), "unset: rc %d, output %s", rc, out);
    CHECK_MSG(rc == 0 && run(self, "1/1", out, sizeof out) == 0 && (m = mask_of(out)) && !strncmp(m, "1111111", CASES),
              "1/1: output %s", out);

    // 1/3, 2/3, 3/3: k % 3 == i - 1, together every case once
    int count[CASES] = {0};
    for (int i = 1; i <= 3; i++) {
        char part[16];
        snprintf(part, sizeof part, "%d/3", i);
        rc = run(self, part, out, sizeof out);
        m = mask_of(out);
        if (!CHECK_MSG(rc == 0 && m, "%s: rc %d, output %s", part, rc, out)) continue;
        for (int k = 0; k < CASES; k++) {
            const int want = k % 3 == i - 1;
            CHECK_MSG((m[k] == '1') == want, "%s: case %d taken %c, want %d", part, k, m[k], want);
            count[k] += m[k] == '1';
        }
        char said[64];
        snprintf(said, sizeof said, "MEMOPT_TEST_PART=%s: %d of the %d cases run here", part, i == 1 ? 3 : 2, CASES);
        CHECK_MSG(strstr(out, said) != NULL, "%s: no line \"%s\" in %s", part, said, out);
        snprintf(said, sizeof said, "MEMOPT_TEST_PART=%s: case %d (a case) runs here", part, i + 2);
        // then when it began: ", N.N s in" (a run cut for time shows how long each case took)
        const char *at = strstr(out, said);
        double sec = -1;
        char n[2];
        CHECK_MSG(at && sscanf(at + strlen(said), ", %lf s i%1[n]", &sec, n) == 2 && sec >= 0 && sec < 60,
                  "%s: no line \"%s, N.N s in\" in %s", part, said, out);
    }
    for (int k = 0; k < CASES; k++) CHECK_MSG(count[k] == 1, "case %d run by %d of the 3 parts", k, count[k]);

    // bad values: exit 2, one line naming the variable and the accepted form
    const char *bad[] = {"0/3", "4/3", "x", "1/0", "2", "1/65", "1/3x", "-1/3", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = run(self, bad[i], out, sizeof out);
        if (!*bad[i]) { // empty: as unset
            CHECK_MSG(rc == 0 && (m = mask_of(out)) && !strncmp(m, "1111111", CASES), "empty: rc %d, output %s", rc, out);
            continue;
        }
        CHECK_MSG(rc == 2 && strstr(out, "MEMOPT_TEST_PART=") && strstr(out, "accepted i/n"),
                  "MEMOPT_TEST_PART=%s: rc %d, output %s", bad[i], rc, out);
    }
    return test_finish();
}
