/* libFuzzer target: the strict safetensors parser must reject or accept any input without crashing, and every
 * accepted entry must convert (to float always, to int64 or a clean error). The same bytes written to a file and
 * opened (vt_st_open: its header in memory, the tensors read from the file) must be accepted or refused alike and
 * read the same values. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vitc/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Opens data written to a file of this process's into *f; the vt_st_open result (-2: the file could not be written). */
static int open_as_file(const uint8_t *data, size_t size, vt_st_file *f, vt_err *e) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/vitc_fuzz_st_%d.safetensors", (int)getpid());
    FILE *fp = fopen(path, "wb");
    if (!fp) return -2;
    const int ok = fwrite(data, 1, size, fp) == size;
    if (fclose(fp) != 0 || !ok) return -2;
    const int rc = vt_st_open(path, f, e);
    unlink(path); /* an open file keeps its data */
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vt_st_file f, ff;
    vt_err e = {0}, fe = {0};
    const int prc = vt_st_parse(data, size, &f, &e), frc = open_as_file(data, size, &ff, &fe);
    if (frc != -2 && (frc == 0) != (prc == 0)) abort(); /* the file and the bytes: one verdict */
    if (frc != 0) memset(&ff, 0, sizeof ff);
    if (prc != 0) {
        if (!e.msg[0]) abort(); /* every rejection must say why */
        return 0;
    }
    if (frc == 0 && ff.n != f.n) abort();
    for (int i = 0; i < f.n; i++) {
        const vt_st_entry *t = &f.entries[i];
        if (vt_st_find(&f, t->name) != t) abort();
        /* numel * dtype size == end - begin <= size, so these allocations stay small. */
        size_t n = (size_t)t->numel;
        float *x = malloc(n ? n * sizeof(float) : 1), *xf = malloc(n ? n * sizeof(float) : 1);
        int64_t *y = malloc(n ? n * sizeof(int64_t) : 1);
        if (x && vt_st_read_f32(t, x, t->numel, &e) != 0) abort();
        vt_clearerr(&e);
        if (x && xf && frc == 0 && (vt_st_read_f32(&ff.entries[i], xf, t->numel, &e) != 0 ||
                                    memcmp(x, xf, n * sizeof(float)) != 0))
            abort(); /* (NaN payloads compare as bytes) */
        vt_clearerr(&e);
        if (y) (void)vt_st_read_i64(t, y, t->numel, &e);
        vt_clearerr(&e);
        free(x);
        free(xf);
        free(y);
    }
    for (int i = 0; i < f.n_meta; i++)
        if (!vt_st_meta(&f, f.meta_keys[i])) abort();
    vt_st_close(&f);
    vt_st_close(&ff);
    return 0;
}
