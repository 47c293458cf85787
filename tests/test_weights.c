/* The parameter store (its name index, also the scopes'), vt_params_load/save and the CLI tensor-file helpers. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "vitc/graph.h"
#include "vitc/weights.h"

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

/* A small model: two params, a running-mean buffer and an I64 counter (shape of "a" given). */
static vt_params *make_model(int a0, int a1, const char *skip, const char *extra) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    vt_init z = {VT_INIT_ZERO, 0.0f};
    int sa[2] = {a0, a1}, sb[1] = {4}, sc[3] = {2, 1, 3};
    if (!skip || strcmp(skip, "a") != 0) vt_params_add(P, "a", VT_PARAM, 2, sa, z, &e);
    if (!skip || strcmp(skip, "b") != 0) vt_params_add(P, "b", VT_PARAM, 1, sb, z, &e);
    vt_params_add(P, "bn.running_mean", VT_BUFFER, 1, sb, z, &e);
    vt_tensor *nb = vt_params_add(P, "bn.num_batches_tracked", VT_BUFFER, 0, NULL, z, &e);
    if (nb) nb->is_i64 = 1;
    if (extra) vt_params_add(P, extra, VT_PARAM, 3, sc, z, &e);
    return P;
}

static void fill(vt_params *P) {
    for (int i = 0; i < P->n; i++)
        for (int64_t j = 0; j < P->t[i]->numel; j++) P->t[i]->data[j] = (float)(i * 100 + j) * 0.25f - 3.0f;
    vt_tensor *nb = vt_params_find(P, "bn.num_batches_tracked");
    if (nb) nb->data[0] = 12345.0f;
}

static int all_zero(const vt_params *P) {
    for (int i = 0; i < P->n; i++)
        for (int64_t j = 0; j < P->t[i]->numel; j++)
            if (P->t[i]->data[j] != 0.0f) return 0;
    return 1;
}

static void expect_load_fail(vt_test *T, vt_params *P, const char *path, const char *kw1, const char *kw2) {
    vt_err e = {0};
    int rc = vt_params_load(P, path, &e);
    T_CHECK(T, rc == -1 && strstr(e.msg, kw1) && (!kw2 || strstr(e.msg, kw2)), "want '%s' and '%s', got rc=%d '%s'",
            kw1, kw2 ? kw2 : "", rc, e.msg);
    T_CHECK(T, all_zero(P), "a failed load modified the model");
}

/* The store's name index across its growth (256 slots, then doubling): 5,000 tensors each found at its own entry,
 * a re-declaration returning the same tensor, absent names (and names differing in the last byte) not found; a
 * graph's scopes through the same index: re-entering a scope reuses it. */
static void check_name_index(vt_test *T) {
    vt_err e = {0};
    vt_params *P = vt_params_new(&e);
    enum { N = 5000 };
    int one = 1, ok = P != NULL;
    for (int i = 0; ok && i < N; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "blocks.%d.w", i);
        ok = vt_params_add(P, nm, VT_PARAM, 1, &one, (vt_init){VT_INIT_ZERO, 0}, &e) == P->t[i] && P->n == i + 1;
    }
    for (int i = 0; ok && i < N; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "blocks.%d.w", i);
        ok = vt_params_find(P, nm) == P->t[i] &&
             vt_params_add(P, nm, VT_PARAM, 1, &one, (vt_init){VT_INIT_ZERO, 0}, &e) == P->t[i];
        snprintf(nm, sizeof nm, "blocks.%d.x", i);
        ok = ok && !vt_params_find(P, nm);
    }
    T_CHECK(T, ok && P->n == N && !vt_params_find(P, "") && !vt_params_find(P, "blocks.5000.w"),
            "parameter store index over %d names (%s)", N, e.msg);
    vt_graph *g = vt_graph_new(P, 0, &e);
    for (int i = 0; g && i < 600; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "stage%d", i);
        vt_scope(g, nm);
    }
    if (g) vt_scope(g, "stage17");
    T_CHECK(T, g && g->nscopes == 601 && g->cur_scope == 18 && strcmp(g->scopes[18], "stage17") == 0,
            "scopes re-entered by name: %d scopes, current %d", g ? g->nscopes : -1, g ? g->cur_scope : -1);
    vt_graph_free(g);
    vt_params_free(P);
}

void test_weights(vt_test *T) {
    check_name_index(T);
    char dir[] = "/tmp/vitc_w_XXXXXX";
    if (!mkdtemp(dir)) {
        T_CHECK(T, 0, "mkdtemp failed");
        return;
    }
    char path[300], p2[300];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/w2.safetensors", dir);
    vt_err e = {0};

    /* Save and load back: exact values, I64 counter. */
    vt_params *P = make_model(2, 3, NULL, NULL);
    fill(P);
    T_CHECK(T, vt_params_save(P, path, &e) == 0, "save: %s", e.msg);
    T_CHECK(T, count_dir(dir, ".tmp.") == 0 && count_dir(dir, NULL) == 1, "atomic save left extra files");
    vt_st_file f;
    T_CHECK(T, vt_st_open(path, &f, &e) == 0, "open: %s", e.msg);
    const vt_st_entry *nbe = vt_st_find(&f, "bn.num_batches_tracked");
    int64_t nbv = 0;
    T_CHECK(T, nbe && nbe->dtype == VT_ST_I64 && nbe->ndim == 0 && vt_st_read_i64(nbe, &nbv, 1, &e) == 0 && nbv == 12345,
            "num_batches_tracked stored as I64");
    T_CHECK(T, vt_st_find(&f, "a") && vt_st_find(&f, "a")->dtype == VT_ST_F32, "params stored as F32");
    vt_st_close(&f);
    vt_params *Q = make_model(2, 3, NULL, NULL);
    T_CHECK(T, vt_params_load(Q, path, &e) == 0, "load: %s", e.msg);
    int same = Q->n == P->n;
    for (int i = 0; same && i < P->n; i++)
        same = memcmp(P->t[i]->data, Q->t[i]->data, sizeof(float) * (size_t)P->t[i]->numel) == 0;
    T_CHECK(T, same, "loaded values differ");
    vt_params_free(Q);

    /* Missing, unexpected and wrong-shape tensors are all named; nothing is loaded. */
    Q = make_model(2, 3, NULL, "extra.w");
    expect_load_fail(T, Q, path, "missing: extra.w", "missing 1");
    vt_params_free(Q);
    Q = make_model(2, 3, "b", NULL);
    expect_load_fail(T, Q, path, "unexpected: b", "unexpected 1");
    vt_params_free(Q);
    Q = make_model(3, 2, NULL, NULL);
    expect_load_fail(T, Q, path, "shape mismatch: a (file (2, 3) vs model (3, 2))", NULL);
    vt_params_free(Q);
    Q = make_model(3, 2, "b", "c");
    expect_load_fail(T, Q, path, "missing: c; unexpected: b; shape mismatch: a (file (2, 3) vs model (3, 2))", NULL);
    vt_params_free(Q);

    /* Many missing names: the first ten are listed, then a count. */
    Q = make_model(2, 3, NULL, NULL);
    for (int i = 0; i < 15; i++) {
        char nm[32];
        int one = 1;
        snprintf(nm, sizeof nm, "blk%02d", i);
        vt_params_add(Q, nm, VT_PARAM, 1, &one, (vt_init){VT_INIT_ZERO, 0}, &e);
    }
    expect_load_fail(T, Q, path, "missing 15", "blk09 and 5 more");
    vt_params_free(Q);

    /* dtypes: F16/BF16 accepted and converted; I32 (and I64 for a non-counter) rejected by name. */
    uint16_t h6[6] = {0x3C00, 0xC000, 0x3800, 0, 0x4000, 0x4200}; /* 1 -2 0.5 0 2 3 */
    uint16_t b4[4] = {0x3F80, 0x4000, 0x4040, 0xBF80};             /* 1 2 3 -1 */
    float rm[4] = {0.5f, 0.25f, 0, 1};
    int64_t cnt = 7;
    int32_t a32[6] = {1, 2, 3, 4, 5, 6};
    int64_t b64[4] = {1, 2, 3, 4};
    vt_st_out outs[4] = {
        {.name = "a", .dtype = VT_ST_F16, .ndim = 2, .shape = {2, 3}, .data = h6},
        {.name = "b", .dtype = VT_ST_BF16, .ndim = 1, .shape = {4}, .data = b4},
        {.name = "bn.running_mean", .dtype = VT_ST_F32, .ndim = 1, .shape = {4}, .data = rm},
        {.name = "bn.num_batches_tracked", .dtype = VT_ST_I64, .ndim = 0, .data = &cnt},
    };
    T_CHECK(T, vt_st_write(p2, outs, 4, NULL, &e) == 0, "write half: %s", e.msg);
    Q = make_model(2, 3, NULL, NULL);
    T_CHECK(T, vt_params_load(Q, p2, &e) == 0, "load half: %s", e.msg);
    vt_tensor *qa = vt_params_find(Q, "a"), *qb = vt_params_find(Q, "b"), *qn = vt_params_find(Q, "bn.num_batches_tracked");
    T_CHECK(T, qa && qa->data[0] == 1.0f && qa->data[1] == -2.0f && qa->data[2] == 0.5f && qa->data[5] == 3.0f, "f16 load");
    T_CHECK(T, qb && qb->data[0] == 1.0f && qb->data[2] == 3.0f && qb->data[3] == -1.0f, "bf16 load");
    T_CHECK(T, qn && qn->data[0] == 7.0f, "i64 counter load");
    vt_params_free(Q);
    /* a file without the counter (older PyTorch): it reads 0, whatever the model held */
    T_CHECK(T, vt_st_write(p2, outs, 3, NULL, &e) == 0, "write without the counter: %s", e.msg);
    Q = make_model(2, 3, NULL, NULL);
    qn = vt_params_find(Q, "bn.num_batches_tracked");
    if (qn) qn->data[0] = 5.0f;
    T_CHECK(T, vt_params_load(Q, p2, &e) == 0 && qn && qn->data[0] == 0.0f, "a counter absent from the file reads 0: "
            "%g (%s)", qn ? (double)qn->data[0] : -1.0, e.msg);
    vt_params_free(Q);
    /* a fixed buffer (one the architecture defines, as Swin's relative_position_index) must equal its definition */
    float idx[4] = {0, 1, 2, 3}, other[4] = {0, 1, 3, 2};
    vt_st_out fixed[4] = {outs[0], outs[1], outs[2], {.name = "idx", .dtype = VT_ST_F32, .ndim = 1, .shape = {4},
                                                      .data = other}};
    T_CHECK(T, vt_st_write(p2, fixed, 4, NULL, &e) == 0, "write with a fixed buffer: %s", e.msg);
    Q = make_model(2, 3, NULL, NULL);
    vt_tensor *qi = vt_params_add(Q, "idx", VT_BUFFER, 1, (int[]){4}, (vt_init){VT_INIT_FIXED, 0.0f}, &e);
    if (qi) memcpy(qi->data, idx, sizeof idx);
    vt_err fe = {0};
    T_CHECK(T, qi && vt_params_load(Q, p2, &fe) == -1 && strstr(fe.msg, "buffer 'idx' element 2 is 3 but the "
            "architecture defines 2") && qi->data[2] == 2.0f, "a fixed buffer of other values refused: %s", fe.msg);
    vt_params_free(Q);

    outs[0] = (vt_st_out){.name = "a", .dtype = VT_ST_I32, .ndim = 2, .shape = {2, 3}, .data = a32};
    outs[1] = (vt_st_out){.name = "b", .dtype = VT_ST_I64, .ndim = 1, .shape = {4}, .data = b64};
    T_CHECK(T, vt_st_write(p2, outs, 4, NULL, &e) == 0, "write ints: %s", e.msg);
    Q = make_model(2, 3, NULL, NULL);
    expect_load_fail(T, Q, p2, "unsupported dtype 2", "a (I32), b (I64)");
    vt_params_free(Q);

    /* A corrupt file is reported by the reader, with the path. */
    FILE *fp = fopen(p2, "wb");
    if (fp) {
        fwrite("\x02\0\0\0\0\0\0\0{}xx", 1, 12, fp);
        fclose(fp);
    }
    Q = make_model(2, 3, NULL, NULL);
    expect_load_fail(T, Q, p2, "trailing", p2);
    vt_params_free(Q);
    unlink(p2);

    /* CLI helpers. */
    float img[24];
    for (int i = 0; i < 24; i++) img[i] = (float)i;
    int64_t lab64[3] = {0, 9, 4};
    int32_t lab32[2] = {-1, 5};
    float labf[2] = {3.0f, 8.0f}, labbad[2] = {1.5f, 2.0f};
    int64_t big[1] = {1LL << 40};
    vt_st_out cli[6] = {
        {.name = "x", .dtype = VT_ST_F32, .ndim = 4, .shape = {1, 2, 3, 4}, .data = img},
        {.name = "y64", .dtype = VT_ST_I64, .ndim = 1, .shape = {3}, .data = lab64},
        {.name = "y32", .dtype = VT_ST_I32, .ndim = 1, .shape = {2}, .data = lab32},
        {.name = "yf", .dtype = VT_ST_F32, .ndim = 1, .shape = {2}, .data = labf},
        {.name = "ybad", .dtype = VT_ST_F32, .ndim = 1, .shape = {2}, .data = labbad},
        {.name = "ybig", .dtype = VT_ST_I64, .ndim = 1, .shape = {1}, .data = big},
    };
    T_CHECK(T, vt_st_write(p2, cli, 6, NULL, &e) == 0, "write cli: %s", e.msg);
    T_CHECK(T, vt_st_open(p2, &f, &e) == 0, "open cli: %s", e.msg);
    float *x = NULL;
    int nd = 4;
    int64_t shp[VT_ST_MAXDIM];
    T_CHECK(T, vt_st_read_named(&f, "x", &x, &nd, shp, &e) == 0 && nd == 4 && shp[0] == 1 && shp[3] == 4 && x &&
                   x[23] == 23.0f,
            "read_named: %s", e.msg);
    vt_free(x);
    nd = -1;
    T_CHECK(T, vt_st_read_named(&f, "y64", &x, &nd, shp, &e) == 0 && nd == 1 && shp[0] == 3 && x[1] == 9.0f, "any ndim");
    vt_free(x);
    vt_err e2 = {0};
    nd = 3;
    T_CHECK(T, vt_st_read_named(&f, "x", &x, &nd, shp, &e2) == -1 && x == NULL && strstr(e2.msg, "expected 3"),
            "ndim check: %s", e2.msg);
    vt_clearerr(&e2);
    nd = -1;
    T_CHECK(T, vt_st_read_named(&f, "zz", &x, &nd, shp, &e2) == -1 && strstr(e2.msg, "'zz' not found"), "absent: %s",
            e2.msg);
    int32_t *lab = NULL;
    int64_t n = 0;
    T_CHECK(T, vt_st_read_labels(&f, "y64", &lab, &n, &e) == 0 && n == 3 && lab[1] == 9 && lab[2] == 4, "labels i64");
    vt_free(lab);
    T_CHECK(T, vt_st_read_labels(&f, "y32", &lab, &n, &e) == 0 && n == 2 && lab[0] == -1 && lab[1] == 5, "labels i32");
    vt_free(lab);
    T_CHECK(T, vt_st_read_labels(&f, "yf", &lab, &n, &e) == 0 && n == 2 && lab[0] == 3 && lab[1] == 8, "labels f32");
    vt_free(lab);
    vt_clearerr(&e2);
    T_CHECK(T, vt_st_read_labels(&f, "ybad", &lab, &n, &e2) == -1 && lab == NULL && strstr(e2.msg, "not an integer"),
            "labels non-integral: %s", e2.msg);
    vt_clearerr(&e2);
    T_CHECK(T, vt_st_read_labels(&f, "ybig", &lab, &n, &e2) == -1 && lab == NULL && strstr(e2.msg, "int32"),
            "labels out of range: %s", e2.msg);
    vt_clearerr(&e2);
    T_CHECK(T, vt_st_read_labels(&f, "x", &lab, &n, &e2) == -1 && lab == NULL && strstr(e2.msg, "shape (B,)"),
            "labels of 4 dimensions: %s", e2.msg);
    vt_st_close(&f);
    unlink(p2);

    /* Saving over an existing file replaces it atomically; a failed save leaves it intact. */
    fill(P);
    P->t[0]->data[0] = 42.0f;
    T_CHECK(T, vt_params_save(P, path, &e) == 0, "resave: %s", e.msg);
    Q = make_model(2, 3, NULL, NULL);
    T_CHECK(T, vt_params_load(Q, path, &e) == 0 && Q->t[0]->data[0] == 42.0f, "resaved value");
    vt_params_free(Q);
    vt_params_find(P, "bn.num_batches_tracked")->data[0] = 1e30f;
    vt_clearerr(&e2);
    T_CHECK(T, vt_params_save(P, path, &e2) == -1 && strstr(e2.msg, "I64"), "unrepresentable counter: %s", e2.msg);
    T_CHECK(T, count_dir(dir, NULL) == 1, "failed save left files");
    Q = make_model(2, 3, NULL, NULL);
    T_CHECK(T, vt_params_load(Q, path, &e) == 0 && Q->t[0]->data[0] == 42.0f, "old file intact after failed save");
    vt_params_free(Q);
    vt_params_free(P);

    unlink(path);
    T_CHECK(T, count_dir(dir, NULL) == 0, "test files left behind");
    rmdir(dir);
}
