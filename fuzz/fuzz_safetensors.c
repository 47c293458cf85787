/* libFuzzer target: the strict safetensors parser must reject or accept any input without crashing,
 * and every accepted entry must convert (to float always, to int64 or a clean error). */
#include <stdint.h>
#include <stdlib.h>

#include "vitc/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vt_st_file f;
    vt_err e = {0};
    if (vt_st_parse(data, size, &f, &e) != 0) {
        if (!e.msg[0]) abort(); /* every rejection must say why */
        return 0;
    }
    for (int i = 0; i < f.n; i++) {
        const vt_st_entry *t = &f.entries[i];
        if (vt_st_find(&f, t->name) != t) abort();
        /* numel * dtype size == end - begin <= size, so these allocations stay small. */
        size_t n = (size_t)t->numel;
        float *x = malloc(n ? n * sizeof(float) : 1);
        int64_t *y = malloc(n ? n * sizeof(int64_t) : 1);
        if (x && vt_st_read_f32(t, x, t->numel, &e) != 0) abort();
        vt_clearerr(&e);
        if (y) (void)vt_st_read_i64(t, y, t->numel, &e);
        vt_clearerr(&e);
        free(x);
        free(y);
    }
    for (int i = 0; i < f.n_meta; i++)
        if (!vt_st_meta(&f, f.meta_keys[i])) abort();
    vt_st_close(&f);
    return 0;
}
