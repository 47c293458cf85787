/* Runs every unit-test suite (optionally only those named on the command line) and prints a summary. */
#include <stdio.h>
#include <string.h>

#include "test.h"

#define SUITE(name) void test_##name(vt_test *T);
#include "suites.h"
#undef SUITE

typedef struct {
    const char *name;
    void (*fn)(vt_test *);
} suite_entry;

static const suite_entry suites[] = {
#define SUITE(name) {#name, test_##name},
#include "suites.h"
#undef SUITE
    {NULL, NULL}};

int main(int argc, char **argv) {
    vt_test T = {0, 0, ""};
    for (int i = 1; i < argc; i++) { /* a misspelt suite must not pass as "0 passed, 0 failed" */
        const suite_entry *s = suites;
        while (s->name && strcmp(argv[i], s->name) != 0) s++;
        if (!s->name) {
            fprintf(stderr, "unit: unknown suite '%s'; suites:", argv[i]);
            for (s = suites; s->name; s++) fprintf(stderr, " %s", s->name);
            fprintf(stderr, "\n");
            return 2;
        }
    }
    for (const suite_entry *s = suites; s->name; s++) {
        int want = argc < 2;
        for (int i = 1; i < argc; i++) want |= strcmp(argv[i], s->name) == 0;
        if (!want) continue;
        int p0 = T.pass, f0 = T.fail;
        T.suite = s->name;
        s->fn(&T);
        printf("suite %-24s %5d passed, %d failed\n", s->name, T.pass - p0, T.fail - f0);
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", T.pass, T.fail);
    return T.fail ? 1 : 0;
}
