/* Strict safetensors reader/writer: round trip, every malformed case, conversions, atomic writes. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "vitc/fileio.h"
#include "vitc/safetensors.h"

/* Builds a file image: u64 LE strlen(header), header, then dlen bytes of data (0x11 if data NULL). */
static uint8_t *image(const char *header, const void *data, size_t dlen, size_t *len) {
    size_t hn = strlen(header);
    *len = 8 + hn + dlen;
    uint8_t *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    memcpy(b + 8, header, hn);
    if (data) memcpy(b + 8 + hn, data, dlen);
    else memset(b + 8 + hn, 0x11, dlen);
    return b;
}

/* Parses header+dlen bytes of data and checks the call fails with a message containing kw. */
static void expect_bad(vt_test *T, const char *header, size_t dlen, const char *kw) {
    size_t len;
    uint8_t *b = image(header, NULL, dlen, &len);
    vt_st_file f;
    vt_err e = {0};
    int rc = vt_st_parse(b, len, &f, &e);
    T_CHECK(T, rc == -1 && strstr(e.msg, kw) != NULL, "header %s: want error with '%s', got rc=%d msg '%s'", header, kw,
            rc, e.msg);
    T_CHECK(T, f.buf == NULL && f.entries == NULL && f.n == 0, "file not zeroed after error");
    vt_st_close(&f);
    free(b);
}

static void expect_bad_raw(vt_test *T, const uint8_t *b, size_t len, const char *kw, const char *what) {
    vt_st_file f;
    vt_err e = {0};
    int rc = vt_st_parse(b, len, &f, &e);
    T_CHECK(T, rc == -1 && strstr(e.msg, kw) != NULL, "%s: want error with '%s', got rc=%d msg '%s'", what, kw, rc,
            e.msg);
    vt_st_close(&f);
}

static int count_dir(const char *dir, const char *needle) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && (!needle || strstr(de->d_name, needle))) n++;
    closedir(d);
    return n;
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static int same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0; }

static void test_roundtrip(vt_test *T, const char *dir) {
    char path[300];
    snprintf(path, sizeof path, "%s/rt.safetensors", dir);
    float a[6] = {1.5f, -2.25f, 3.0f, 0.0f, -0.0f, 1e-30f};
    int64_t s = 123456789012345LL;
    int32_t c[4] = {-1, 0, 7, 2147483647};
    vt_st_out outs[4] = {
        {.name = "layer.weight", .dtype = VT_ST_F32, .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "scalar", .dtype = VT_ST_I64, .ndim = 0, .data = &s},
        {.name = "ids \"q\"\\", .dtype = VT_ST_I32, .ndim = 1, .shape = {4}, .data = c},
        {.name = "empty", .dtype = VT_ST_F32, .ndim = 2, .shape = {0, 3}, .data = NULL},
    };
    vt_err e = {0};
    int rc = vt_st_write(path, outs, 4, "{\"format\":\"pt\",\"note\":\"x\\\"y\"}", &e);
    T_CHECK(T, rc == 0, "write: %s", e.msg);
    T_CHECK(T, count_dir(dir, ".tmp.") == 0, "temp file left behind");

    FILE *fp = fopen(path, "rb");
    uint8_t hdr8[8] = {0};
    T_CHECK(T, fp && fread(hdr8, 1, 8, fp) == 8, "read prefix");
    if (fp) fclose(fp);
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--) hn = (hn << 8) | hdr8[i];
    T_CHECK(T, hn % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hn);

    vt_st_file f;
    rc = vt_st_open(path, &f, &e);
    T_CHECK(T, rc == 0, "open: %s", e.msg);
    if (rc != 0) return;
    T_CHECK(T, f.n == 4, "n=%d", f.n);
    T_CHECK(T, strcmp(f.entries[0].name, "layer.weight") == 0, "header order kept");
    const vt_st_entry *w = vt_st_find(&f, "layer.weight");
    T_CHECK(T, w && w->dtype == VT_ST_F32 && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 3 && w->numel == 6,
            "layer.weight entry");
    float got[6];
    T_CHECK(T, w && vt_st_read_f32(w, got, 6, &e) == 0, "read: %s", e.msg);
    int eq = 1;
    for (int i = 0; i < 6; i++) eq &= same_bits(got[i], a[i]);
    T_CHECK(T, eq, "F32 values differ");
    const vt_st_entry *sc = vt_st_find(&f, "scalar");
    int64_t sv = 0;
    T_CHECK(T, sc && sc->ndim == 0 && sc->numel == 1 && vt_st_read_i64(sc, &sv, 1, &e) == 0 && sv == s, "I64 scalar");
    const vt_st_entry *ids = vt_st_find(&f, "ids \"q\"\\");
    int64_t iv[4];
    float fv[4];
    T_CHECK(T, ids && ids->dtype == VT_ST_I32 && vt_st_read_i64(ids, iv, 4, &e) == 0 && iv[0] == -1 && iv[3] == 2147483647,
            "I32 escaped name");
    T_CHECK(T, ids && vt_st_read_f32(ids, fv, 4, &e) == 0 && fv[0] == -1.0f && fv[2] == 7.0f, "I32 -> f32");
    const vt_st_entry *em = vt_st_find(&f, "empty");
    T_CHECK(T, em && em->numel == 0 && em->begin == em->end && vt_st_read_f32(em, got, 0, &e) == 0, "empty tensor");
    T_CHECK(T, vt_st_find(&f, "nope") == NULL && vt_st_find(&f, "") == NULL, "find absent");
    T_CHECK(T, vt_st_meta(&f, "format") && strcmp(vt_st_meta(&f, "format"), "pt") == 0, "metadata format");
    T_CHECK(T, vt_st_meta(&f, "note") && strcmp(vt_st_meta(&f, "note"), "x\"y") == 0, "metadata escaped value");
    T_CHECK(T, vt_st_meta(&f, "missing") == NULL, "metadata absent key");

    vt_err e2 = {0};
    T_CHECK(T, vt_st_read_f32(w, got, 5, &e2) == -1 && strstr(e2.msg, "element count"), "count mismatch: %s", e2.msg);
    vt_st_close(&f);
    vt_st_close(&f); /* idempotent */

    /* Overwrite atomically with a different content. */
    rc = vt_st_write(path, outs, 1, NULL, &e);
    T_CHECK(T, rc == 0 && vt_st_open(path, &f, &e) == 0 && f.n == 1 && f.n_meta == 0, "overwrite: %s", e.msg);
    vt_st_close(&f);
    T_CHECK(T, count_dir(dir, ".tmp.") == 0, "temp file left behind after overwrite");

    /* Empty file: no tensors at all. */
    rc = vt_st_write(path, NULL, 0, NULL, &e);
    T_CHECK(T, rc == 0 && vt_st_open(path, &f, &e) == 0 && f.n == 0, "empty write: %s", e.msg);
    vt_st_close(&f);
    unlink(path);
}

/* Temporary files are named after their writer (.vitc-HOST-PID-XXXXXX, and gnuplot's curves .vitc-HOST-PID-curves,
 * metrics.c; .vitc-PID-XXXXXX before HOST was added); vt_remove_stale_temps removes those of ended processes of this
 * machine only: not a live writer's (this process's), another machine's (a folder shared over the network), an
 * old-style name without a PID, a malformed one or other files. */
static void test_stale_temps(vt_test *T, const char *dir) {
    char prefix[64], live[96], dead[96], dead_c[96], p[512];
    vt_temp_prefix(prefix, sizeof prefix); /* .vitc-HOST-PID */
    const char *host = prefix + 6;
    const int hl = (int)(strchr(host, '-') - host);
    snprintf(live, sizeof live, "%s-ghijkl", prefix);
    snprintf(dead, sizeof dead, ".vitc-%.*s-999999999-abcdef", hl, host);
    snprintf(dead_c, sizeof dead_c, ".vitc-%.*s-999999997-curves", hl, host);
    const char *names[] = {".vitc-999999999-abcdef", ".vitc-999999998-curves", dead, dead_c, live,
                           ".vitc-otherhost0-999999999-abcdef", ".vitc-abcdef", ".vitc-12x-abcdef",
                           ".vitc-x-", "notes.txt"};
    const int n = (int)(sizeof names / sizeof names[0]), stale = 4;
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        FILE *f = fopen(p, "wb");
        if (f) fclose(f);
    }
    T_CHECK(T, vt_remove_stale_temps(dir) == stale, "the stale temporary files removed");
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        T_CHECK(T, (access(p, F_OK) == 0) == (i >= stale), "%s %s", names[i], i >= stale ? "kept" : "removed");
        remove(p);
    }
    vt_out o;
    vt_err e = {0};
    snprintf(p, sizeof p, "%s/out.bin", dir);
    char want[80];
    snprintf(want, sizeof want, "/%s-", prefix);
    T_CHECK(T, vt_out_open(&o, p, &e) == 0 && strstr(o.tmp, want), "temporary name %s holds %s", o.tmp, want);
    vt_out_abort(&o);
}

static void test_writer_errors(vt_test *T, const char *dir) {
    char path[300];
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    float a[2] = {1, 2};
    vt_st_out dup[2] = {
        {.name = "x", .dtype = VT_ST_F32, .ndim = 1, .shape = {2}, .data = a},
        {.name = "x", .dtype = VT_ST_F32, .ndim = 1, .shape = {2}, .data = a},
    };
    vt_err e = {0};
    T_CHECK(T, vt_st_write(path, dup, 2, NULL, &e) == -1 && strstr(e.msg, "duplicate"), "dup: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_st_write(path, dup, 1, "[1]", &e) == -1 && strstr(e.msg, "metadata"), "meta: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_st_write(path, dup, 1, "{\"a\":1}", &e) == -1 && strstr(e.msg, "not a string"), "meta2: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_st_write(path, dup, 1, "{\"a\":\"b\"} x", &e) == -1 && strstr(e.msg, "metadata"), "meta3: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_st_write(path, dup, 1, "{\"a\":\"b\",\"a\":\"c\"}", &e) == -1 && strstr(e.msg, "duplicate"), "meta4: %s",
            e.msg);
    vt_clearerr(&e);
    /* strings the reader would refuse (not UTF-8; e.g. a --data path with byte 0xff) are never written */
    T_CHECK(T, vt_st_write(path, dup, 1, "{\"ok\":\"b\",\"data\":\"/tmp/\xff\"}", &e) == -1 &&
                   strstr(e.msg, "the value of metadata key 'data' is not valid UTF-8 (byte 0xff at offset 5)") &&
                   strstr(e.msg, path),
            "metadata value not UTF-8: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_st_write(path, dup, 1, "{\"d\xc3\":\"b\"}", &e) == -1 &&
                   strstr(e.msg, "metadata key 'd\\xc3' is not valid UTF-8"),
            "metadata key not UTF-8: %s", e.msg);
    vt_clearerr(&e);
    vt_st_out badname = {.name = "w\xe2\x82", .dtype = VT_ST_F32, .ndim = 1, .shape = {2}, .data = a};
    T_CHECK(T, vt_st_write(path, &badname, 1, NULL, &e) == -1 &&
                   strstr(e.msg, "tensor name 'w\\xe2\\x82' is not valid"), "tensor name not UTF-8: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_st_write(path, dup, 1, "{\"d\":\"caf\xc3\xa9 \\u00e9\"}", &e) == 0, "UTF-8 metadata: %s", e.msg);
    vt_st_file f0;
    T_CHECK(T, vt_st_open(path, &f0, &e) == 0 && vt_st_meta(&f0, "d") &&
                   strcmp(vt_st_meta(&f0, "d"), "caf\xc3\xa9 \xc3\xa9") == 0, "UTF-8 metadata read back: %s", e.msg);
    vt_st_close(&f0);
    unlink(path);
    vt_st_out noname = {.name = "", .dtype = VT_ST_F32, .ndim = 1, .shape = {2}, .data = a};
    T_CHECK(T, vt_st_write(path, &noname, 1, NULL, &e) == -1 && strstr(e.msg, "empty"), "noname: %s", e.msg);
    vt_clearerr(&e);
    vt_st_out neg = {.name = "n", .dtype = VT_ST_F32, .ndim = 1, .shape = {-2}, .data = a};
    T_CHECK(T, vt_st_write(path, &neg, 1, NULL, &e) == -1 && strstr(e.msg, "shape"), "neg: %s", e.msg);
    vt_clearerr(&e);
    vt_st_out nodata = {.name = "n", .dtype = VT_ST_F32, .ndim = 1, .shape = {2}, .data = NULL};
    T_CHECK(T, vt_st_write(path, &nodata, 1, NULL, &e) == -1 && strstr(e.msg, "NULL"), "nodata: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, count_dir(dir, NULL) == 0, "nothing written on error");
    char nodir[320];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir.safetensors", dir);
    T_CHECK(T, vt_st_write(nodir, dup, 1, NULL, &e) == -1 && strstr(e.msg, "cannot write") && strstr(e.msg, "no/such: No such file"), "nodir: %s", e.msg);
    vt_clearerr(&e);
    vt_st_file f;
    T_CHECK(T, vt_st_open(nodir, &f, &e) == -1 && strstr(e.msg, "cannot open"), "open missing: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_st_open(dir, &f, &e) == -1 && strstr(e.msg, "folder"), "open dir: %s", e.msg);
}

static void test_malformed(vt_test *T, const char *dir) {
    /* Truncated files. */
    uint8_t small[5] = {1, 0, 0, 0, 0};
    expect_bad_raw(T, small, 5, "truncated", "5-byte file");
    expect_bad_raw(T, small, 0, "truncated", "empty file");
    uint8_t big[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    expect_bad_raw(T, big, 16, "larger than", "header length > file");
    uint8_t huge[16] = {0x01, 0x00, 0x40, 0x06, 0, 0, 0, 0, '{', '}'}; /* 100 MiB + 1 */
    expect_bad_raw(T, huge, 16, "header too large", "header too large");
    uint8_t maxlen[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    expect_bad_raw(T, maxlen, 16, "header too large", "u64 max header");

    /* Via a real file: truncated data section is reported by vt_st_open too, with the path. */
    char path[300];
    snprintf(path, sizeof path, "%s/trunc.safetensors", dir);
    size_t len;
    uint8_t *b = image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", NULL, 8, &len);
    FILE *fp = fopen(path, "wb");
    T_CHECK(T, fp && fwrite(b, 1, len - 3, fp) == len - 3, "write truncated");
    if (fp) fclose(fp);
    vt_st_file f;
    vt_err e = {0};
    T_CHECK(T, vt_st_open(path, &f, &e) == -1 && strstr(e.msg, "out of range") && strstr(e.msg, "'a'") &&
                   strstr(e.msg, path),
            "truncated data: %s", e.msg);
    unlink(path);
    /* Every prefix of a valid image fails cleanly. */
    int all_fail = 1;
    for (size_t k = 0; k < len; k++) {
        vt_err ek = {0};
        if (vt_st_parse(b, k, &f, &ek) == 0) all_fail = 0, vt_st_close(&f);
    }
    T_CHECK(T, all_fail, "some truncated prefix parsed");
    T_CHECK(T, vt_st_parse(b, len, &f, &e) == 0, "full image parses");
    vt_st_close(&f);
    /* Single-byte corruptions never crash (results vary). */
    for (size_t k = 0; k < len; k++) {
        static const uint8_t vals[] = {0x00, 0x20, 0x22, 0x2c, 0x30, 0x39, 0x5b, 0x5d, 0x7b, 0x7d, 0xff};
        for (size_t v = 0; v < sizeof vals; v++) {
            uint8_t save = b[k];
            b[k] = vals[v];
            vt_err ek = {0};
            if (vt_st_parse(b, len, &f, &ek) == 0) vt_st_close(&f);
            b[k] = save;
        }
    }
    free(b);

    /* Header syntax. */
    expect_bad(T, " {}", 0, "must start with '{'");
    expect_bad(T, "[1]", 0, "JSON object");
    expect_bad(T, "", 0, "JSON object");
    expect_bad(T, "{\"a\":", 0, "invalid JSON");
    expect_bad(T, "{\"__metadata__\":{\"vitc_form\":\"deployed\\u0000x\"}}", 0,
               "an escaped NUL (\\u0000) at header offset 38");
    { /* an escaped backslash before u0000 is text, not a NUL */
        vt_st_file f;
        vt_err e = {0};
        const char *h = "{\"__metadata__\":{\"note\":\"a\\\\u0000\"}}";
        const size_t hl = strlen(h);
        uint8_t b[128] = {0};
        memcpy(b + 8, h, hl);
        b[0] = (uint8_t)hl;
        T_CHECK(T, vt_st_parse(b, 8 + hl, &f, &e) == 0 && strcmp(vt_st_meta(&f, "note"), "a\\u0000") == 0,
                "escaped backslash then u0000: %s", e.msg);
        vt_st_close(&f);
    }
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",}}", 0, "invalid JSON");
    expect_bad(T, "{} x", 0, "invalid JSON");
    expect_bad(T, "{}{}", 0, "invalid JSON");
    expect_bad(T, "{\"\xff\":1}", 0, "UTF-8");
    uint8_t nul[] = {3, 0, 0, 0, 0, 0, 0, 0, '{', 0, '}'};
    expect_bad_raw(T, nul, sizeof nul, "NUL", "NUL in header");

    /* Entries. */
    expect_bad(T, "{\"a\":5}", 0, "not a JSON object");
    expect_bad(T, "{\"a\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "unknown dtype");
    expect_bad(T, "{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype");
    expect_bad(T, "{\"a\":{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype is not a string");
    expect_bad(T, "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "missing field 'dtype'");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "missing field 'shape'");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing field 'data_offsets'");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unknown field");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "non-negative integer");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,\"2\"],\"data_offsets\":[0,8]}}", 8, "shape[1]");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", 4, "shape[0]");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":5,\"data_offsets\":[0,4]}}", 4, "shape is not an array");
    /* integral values not written as integers (cJSON reads them as integers) */
    expect_bad(T, "{\"a\":{\"dtype\":\"U8\",\"shape\":[10.0],\"data_offsets\":[0,10]}}", 10,
               "tensor 'a': the number 10.0 in its entry is not written as a non-negative integer");
    expect_bad(T, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1e1],\"data_offsets\":[0,10]}}", 10, "number 1e1");
    expect_bad(T, "{\"a\":{\"dtype\":\"U8\",\"shape\":[010],\"data_offsets\":[0,10]}}", 10, "number 010");
    expect_bad(T, "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[-0,0]}}", 0, "number -0 ");
    expect_bad(T, "{\"b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]},\"a\":{\"dtype\":\"U8\",\"shape\":[2],"
                  "\"data_offsets\":[1,3.0E0]}}", 3, "tensor 'a': the number 3.0E0");
    expect_bad(T, "{\"a\":{\"dtype\":\"U8\",\"shape\":[9007199254740993,0],\"data_offsets\":[0,0]}}", 0,
               "number 9007199254740993 in its entry is not at most 2^53");
    expect_bad(T, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "max 8");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[9007199254740992,9007199254740992],\"data_offsets\":[0,4]}}", 4,
               "overflow");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "data_offsets");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, "data_offsets");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, "data_offsets");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.5]}}", 4, "data_offsets");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, "begin 4 > end 0");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "size mismatch");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "size mismatch");
    expect_bad(T, "{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty");
    char longname[400];
    snprintf(longname, sizeof longname, "{\"%0128d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 7);
    expect_bad(T, longname, 4, "too long");
    snprintf(longname, sizeof longname, "{\"%0127d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 7);
    {
        size_t l;
        uint8_t *img = image(longname, NULL, 4, &l);
        vt_err e1 = {0};
        T_CHECK(T, vt_st_parse(img, l, &f, &e1) == 0, "127-char name accepted: %s", e1.msg);
        vt_st_close(&f);
        free(img);
    }

    /* Duplicates. */
    expect_bad(T,
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, "duplicate key 'a'");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "duplicate");
    expect_bad(T, "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate");
    expect_bad(T, "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, "duplicate");

    /* Metadata. */
    expect_bad(T, "{\"__metadata__\":{\"k\":1}}", 0, "__metadata__");
    expect_bad(T, "{\"__metadata__\":[]}", 0, "__metadata__");

    /* Offsets: range, gaps, overlaps, trailing bytes. */
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "out of range");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap");
    expect_bad(T,
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
               12, "gap");
    expect_bad(T,
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, "overlap");
    expect_bad(T,
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
               4, "overlap");
    expect_bad(T,
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
               8, "overlap");
    expect_bad(T, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "trailing");
    expect_bad(T, "{}", 3, "trailing");
    expect_bad(T, "{\"__metadata__\":{\"k\":\"v\"}}", 1, "trailing");

    /* Valid edge cases: trailing-space padding, out-of-order offsets, zero-size tensors between others. */
    const char *ok[] = {
        "{}",
        "{}       ",
        "{\"__metadata__\":{}}",
        "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
        "\"z\":{\"dtype\":\"F32\",\"shape\":[0, 5],\"data_offsets\":[4,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
    };
    size_t okd[] = {0, 0, 0, 8};
    for (int i = 0; i < 4; i++) {
        size_t l;
        uint8_t *img = image(ok[i], NULL, okd[i], &l);
        vt_err e1 = {0};
        T_CHECK(T, vt_st_parse(img, l, &f, &e1) == 0, "valid header %s rejected: %s", ok[i], e1.msg);
        vt_st_close(&f);
        free(img);
    }
}

static void test_conversions(vt_test *T) {
    /* F16 bit patterns and their exact values. */
    static const uint16_t h[] = {0x3C00, 0xC000, 0x3555, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x8000, 0x7E00};
    const float hv[] = {1.0f, -2.0f, 0.333251953125f, 5.9604644775390625e-8f, 6.0975551605224609375e-5f,
                        6.103515625e-5f, 65504.0f, INFINITY, -INFINITY, -0.0f, NAN};
    /* BF16 bit patterns. */
    static const uint16_t bf[] = {0x3F80, 0xC049, 0x7F80, 0x0001, 0x8000, 0x4B80};
    const float bv[] = {1.0f, -3.140625f, INFINITY, 9.18354961579912115600575419705e-41f, -0.0f, 16777216.0f};
    char hdr[512];
    snprintf(hdr, sizeof hdr,
             "{\"h\":{\"dtype\":\"F16\",\"shape\":[11],\"data_offsets\":[0,22]},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[6],\"data_offsets\":[22,34]}}");
    uint8_t data[34];
    memcpy(data, h, 22);
    memcpy(data + 22, bf, 12);
    size_t len;
    uint8_t *img = image(hdr, data, sizeof data, &len);
    vt_st_file f;
    vt_err e = {0};
    T_CHECK(T, vt_st_parse(img, len, &f, &e) == 0, "parse: %s", e.msg);
    float out[11];
    const vt_st_entry *th = vt_st_find(&f, "h");
    T_CHECK(T, th && vt_st_read_f32(th, out, 11, &e) == 0, "read f16: %s", e.msg);
    for (int i = 0; th && i < 10; i++)
        T_CHECK(T, same_bits(out[i], hv[i]), "f16 0x%04x -> %.10g, want %.10g", h[i], (double)out[i], (double)hv[i]);
    T_CHECK(T, th && isnan(out[10]), "f16 NaN");
    const vt_st_entry *tb = vt_st_find(&f, "b");
    T_CHECK(T, tb && vt_st_read_f32(tb, out, 6, &e) == 0, "read bf16: %s", e.msg);
    for (int i = 0; tb && i < 6; i++)
        T_CHECK(T, same_bits(out[i], bv[i]), "bf16 0x%04x -> %.10g, want %.10g", bf[i], (double)out[i], (double)bv[i]);
    int64_t iv[6];
    vt_err e2 = {0};
    T_CHECK(T, tb && vt_st_read_i64(tb, iv, 6, &e2) == -1 && strstr(e2.msg, "not an integer"), "bf16 inf -> i64: %s",
            e2.msg);
    vt_st_close(&f);
    free(img);

    /* Every F16 pattern matches the formula sign * 2^(e-15) * (1 + m/1024) (or the subnormal one). */
    uint16_t all[2048];
    int allok = 1;
    for (int block = 0; block < 32; block++) {
        for (int i = 0; i < 2048; i++) all[i] = (uint16_t)(block * 2048 + i);
        snprintf(hdr, sizeof hdr, "{\"x\":{\"dtype\":\"F16\",\"shape\":[2048],\"data_offsets\":[0,4096]}}");
        img = image(hdr, all, sizeof all, &len);
        float *o = malloc(2048 * sizeof(float));
        if (vt_st_parse(img, len, &f, &e) == 0 && vt_st_read_f32(&f.entries[0], o, 2048, &e) == 0) {
            for (int i = 0; i < 2048; i++) {
                int s = all[i] >> 15, ex = (all[i] >> 10) & 31, m = all[i] & 1023;
                double want = ex == 0 ? ldexp(m, -24) : ex == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, ex - 25);
                if (s) want = -want;
                if (ex == 31 && m) allok &= isnan(o[i]) != 0;
                else allok &= (double)o[i] == want && (signbit(o[i]) != 0) == (s != 0);
            }
        } else {
            allok = 0;
        }
        vt_st_close(&f);
        free(o);
        free(img);
    }
    T_CHECK(T, allok, "exhaustive F16 conversion");

    /* Unaligned data: a 1-byte tensor first puts F32/I64 data at odd addresses. */
    snprintf(hdr, sizeof hdr,
             "{\"u\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
             "\"f\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[1,13]},"
             "\"i\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[13,29]},"
             "\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[29,37]},"
             "\"s\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[37,39]},"
             "\"k\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[39,41]},"
             "\"j\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[41,42]}}");
    while (strlen(hdr) % 8) strcat(hdr, " "); /* data section 8-aligned, so "f" starts at an odd address */
    uint8_t d2[42];
    d2[0] = 200;
    float fv[3] = {1.25f, -7.5f, 3e38f};
    int64_t lv[2] = {-5, 1LL << 40};
    double dv = 0.1;
    int16_t sv = -300;
    memcpy(d2 + 1, fv, 12);
    memcpy(d2 + 13, lv, 16);
    memcpy(d2 + 29, &dv, 8);
    memcpy(d2 + 37, &sv, 2);
    d2[39] = 0;
    d2[40] = 1;
    d2[41] = 0xF6; /* -10 */
    img = image(hdr, d2, sizeof d2, &len);
    T_CHECK(T, vt_st_parse(img, len, &f, &e) == 0, "parse unaligned: %s", e.msg);
    const vt_st_entry *tf = vt_st_find(&f, "f"), *ti = vt_st_find(&f, "i"), *td = vt_st_find(&f, "d");
    const vt_st_entry *tu = vt_st_find(&f, "u"), *ts = vt_st_find(&f, "s"), *tk = vt_st_find(&f, "k"),
                      *tj = vt_st_find(&f, "j");
    T_CHECK(T, tf && ((uintptr_t)tf->data & 3) != 0, "data really unaligned");
    float o3[3];
    T_CHECK(T, tf && vt_st_read_f32(tf, o3, 3, &e) == 0 && o3[0] == 1.25f && o3[1] == -7.5f && o3[2] == 3e38f,
            "unaligned f32");
    int64_t o2[2];
    T_CHECK(T, ti && vt_st_read_i64(ti, o2, 2, &e) == 0 && o2[0] == -5 && o2[1] == (1LL << 40), "unaligned i64");
    T_CHECK(T, ti && vt_st_read_f32(ti, o3, 2, &e) == 0 && o3[0] == -5.0f && o3[1] == 1099511627776.0f, "i64->f32");
    T_CHECK(T, td && vt_st_read_f32(td, o3, 1, &e) == 0 && o3[0] == 0.1f, "f64->f32");
    vt_clearerr(&e);
    T_CHECK(T, td && vt_st_read_i64(td, o2, 1, &e) == -1 && strstr(e.msg, "'d'"), "f64 0.1 -> i64 rejected: %s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, tf && vt_st_read_i64(tf, o2, 3, &e) == -1, "f32 non-integral -> i64 rejected");
    vt_clearerr(&e);
    T_CHECK(T, tu && vt_st_read_f32(tu, o3, 1, &e) == 0 && o3[0] == 200.0f, "u8");
    T_CHECK(T, ts && vt_st_read_i64(ts, o2, 1, &e) == 0 && o2[0] == -300, "i16");
    T_CHECK(T, tk && vt_st_read_f32(tk, o3, 2, &e) == 0 && o3[0] == 0.0f && o3[1] == 1.0f, "bool");
    T_CHECK(T, tj && vt_st_read_i64(tj, o2, 1, &e) == 0 && o2[0] == -10, "i8");
    vt_st_close(&f);
    free(img);

    T_CHECK(T, strcmp(vt_st_dtype_name(VT_ST_BF16), "BF16") == 0 && strcmp(vt_st_dtype_name(VT_ST_NDTYPE), "?") == 0,
            "dtype names");
}

/* Error messages that do not fit vt_err end in "..." at a character boundary (valid UTF-8), short ones are whole. */
static void test_error_fit(vt_test *T) {
    vt_err e = {0};
    vt_seterr(&e, "short %d", 7);
    T_CHECK(T, strcmp(e.msg, "short 7") == 0, "a short message whole: %s", e.msg);
    char name[sizeof e.msg + 200];
    for (int pre = 0; pre < 3; pre++) { /* the cut lands on each byte of a 2-byte character in turn */
        memset(name, 'a', (size_t)pre);
        int len = pre;
        for (; len + 2 < (int)sizeof name; len += 2) memcpy(name + len, "\xc3\xa9", 2); /* é */
        name[len] = '\0';
        vt_clearerr(&e);
        vt_seterr(&e, "cannot open %s: No such file or directory", name);
        const size_t n = strlen(e.msg);
        size_t bad = 0;
        const char *end = ": No such file or directory";
        T_CHECK(T, n < sizeof e.msg && n > sizeof e.msg - 8 && strncmp(e.msg, "cannot open ", 12) == 0 &&
                       strstr(e.msg, "...") && n > strlen(end) && strcmp(e.msg + n - strlen(end), end) == 0 &&
                       vt_utf8_valid((const uint8_t *)e.msg, n, &bad),
                "a cut message keeps its start and its reason, ... between, valid UTF-8 (prefix %d: length %zu, bad "
                "byte at %zu)", pre, n, bad);
    }
    /* a message longer than vt_msg_vformat's 8 KiB staging buffer (a path past PATH_MAX: ENAMETOOLONG) keeps its
     * reason and whole characters too (it had kept the end of the first 8191 bytes, cut inside a character) */
    enum { LONG = 9001 };
    char *longname = malloc(LONG + 1);
    for (int i = 0; longname && i + 2 <= LONG; i += 2) memcpy(longname + i, "\xc3\xa9", 2);
    if (longname) longname[LONG - 1] = 'x', longname[LONG] = '\0';
    for (int pre = 0; longname && pre < 2; pre++) { /* the 8 KiB mark on each byte of a character */
        vt_clearerr(&e);
        vt_seterr(&e, "%scannot open %s: File name too long", pre ? "a" : "", longname);
        const size_t n = strlen(e.msg);
        size_t bad = 0;
        const char *end = "\xc3\xa9x: File name too long";
        T_CHECK(T, n > strlen(end) && strcmp(e.msg + n - strlen(end), end) == 0 &&
                       vt_utf8_valid((const uint8_t *)e.msg, n, &bad),
                "a message past 8 KiB keeps its reason, valid UTF-8 (prefix %d: ...%s, bad byte at %zu)", pre,
                e.msg + (n > 40 ? n - 40 : 0), bad);
    }
    free(longname);
}

/* vt_st_open of a regular file keeps its header alone in memory and reads the tensors from the file: values as
 * written (float32 in place, float16 over 1.5 blocks of 1 MiB and a few elements, int64; float64 read as int64 names
 * its non-integer element in its second block); a file shortened after opening gives a read error naming the tensor
 * (a mapping had raised SIGBUS), the tensors before the cut still read. */
static void test_open_reads(vt_test *T, const char *dir) {
    char path[300];
    snprintf(path, sizeof path, "%s/opened.safetensors", dir);
    enum { NB = 1 << 20, NH = 3 * (1 << 18) + 7, ND = 200001 }; /* NH: 1.5 blocks of float16 and 7 elements */
    float a[3] = {1.0f, 2.0f, 3.0f}, *b = malloc(sizeof(float) * NB), *got = malloc(sizeof(float) * NB);
    uint16_t *h = malloc(sizeof(uint16_t) * NH);
    double *d = malloc(sizeof(double) * ND);
    int64_t c[2] = {-4, 1LL << 40}, ci[2] = {0}, *di = malloc(sizeof(int64_t) * ND);
    for (int i = 0; b && i < NB; i++) b[i] = (float)(i % 1000) * 0.25f - 7.0f;
    for (int i = 0; h && i < NH; i++) h[i] = (uint16_t)(0x3c00 + (i % 1024)); /* 1 + (i % 1024)/1024 */
    for (int i = 0; d && i < ND; i++) d[i] = i == 200000 ? 0.5 : (double)i; /* 131,072 doubles a block */
    vt_st_out outs[5] = {{.name = "a", .dtype = VT_ST_F32, .ndim = 1, .shape = {3}, .data = a},
                         {.name = "b", .dtype = VT_ST_F32, .ndim = 1, .shape = {NB}, .data = b},
                         {.name = "c", .dtype = VT_ST_I64, .ndim = 1, .shape = {2}, .data = c},
                         {.name = "d", .dtype = VT_ST_F64, .ndim = 1, .shape = {ND}, .data = d},
                         {.name = "h", .dtype = VT_ST_F16, .ndim = 1, .shape = {NH}, .data = h}};
    vt_err e = {0};
    vt_st_file f = {0};
    const int ok = b && got && h && d && di && vt_st_write(path, outs, 5, NULL, &e) == 0 &&
                   vt_st_open(path, &f, &e) == 0;
    struct stat st;
    T_CHECK(T, ok && f.opened && stat(path, &st) == 0 && f.len < 1024 && st.st_size > 6 * NB,
            "a regular file: its header alone in memory (%zu bytes): %s", f.len, e.msg);
    const vt_st_entry *eb = ok ? vt_st_find(&f, "b") : NULL, *ec = ok ? vt_st_find(&f, "c") : NULL,
                      *ed = ok ? vt_st_find(&f, "d") : NULL, *eh = ok ? vt_st_find(&f, "h") : NULL;
    if (eb && ec && ed && eh) {
        T_CHECK(T, vt_st_read_f32(eb, got, NB, &e) == 0 && memcmp(got, b, sizeof(float) * NB) == 0, "b: %s", e.msg);
        int same = vt_st_read_f32(eh, got, NH, &e) == 0;
        for (int i = 0; same && i < NH; i++) same = got[i] == 1.0f + (float)(i % 1024) / 1024.0f;
        T_CHECK(T, same, "float16 over 1.5 blocks and 7 elements: %s", e.msg);
        T_CHECK(T, vt_st_read_i64(ec, ci, 2, &e) == 0 && ci[0] == c[0] && ci[1] == c[1], "int64: %s", e.msg);
        e = (vt_err){0};
        T_CHECK(T, vt_st_read_i64(ed, di, ND, &e) != 0 && strstr(e.msg, "element 200000 = 0.5 is not an integer"),
                "float64 as int64, a fraction in the second block: %s", e.msg);
        T_CHECK(T, truncate(path, (off_t)eh->off + 100) == 0, "truncate: %s", strerror(errno));
        e = (vt_err){0};
        T_CHECK(T, vt_st_read_f32(eh, got, NH, &e) != 0 && e.code == VT_E_IO && strstr(e.msg, "tensor 'h'") &&
                       strstr(e.msg, "shortened"),
                "a file shortened after opening: %s", e.msg);
        e = (vt_err){0};
        T_CHECK(T, vt_st_read_f32(eb, got, NB, &e) == 0 && memcmp(got, b, sizeof(float) * NB) == 0,
                "... a tensor before the cut still reads: %s", e.msg);
    }
    vt_st_close(&f);
    vt_st_close(&f); /* (safe twice) */
    free(b);
    free(got);
    free(h);
    free(d);
    free(di);
    unlink(path);
}

void test_safetensors(vt_test *T) {
    char dir[] = "/tmp/vitc_st_XXXXXX";
    if (!mkdtemp(dir)) {
        T_CHECK(T, 0, "mkdtemp failed");
        return;
    }
    test_roundtrip(T, dir);
    test_open_reads(T, dir);
    test_writer_errors(T, dir);
    test_stale_temps(T, dir);
    test_malformed(T, dir);
    test_conversions(T);
    test_error_fit(T);
    T_CHECK(T, count_dir(dir, NULL) == 0, "test files left behind");
    rm_dir(dir);
}
