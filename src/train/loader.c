/* The batch loader: worker threads claim sample positions of the epoch in order, decode (vt_source) and transform
 * (vt_transform) each into its row of a ring of `prefetch` batch buffers; the consumer takes batches in order.
 *
 * A worker may claim position p only while its batch p / B is fewer than `prefetch` batches ahead of the consumer,
 * so the ring slot (p / B) % prefetch is free. Each row is written by one worker and its RNG is keyed by
 * (seed, epoch, dataset index), so batches do not depend on which thread made them or when. One mutex guards the
 * shared state; workers sleep on `work`, the consumer on `ready`. */
#include "vitc/loader.h"
#include "vitc/graph.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    float *x;
    int *labels;
    int done; /* rows finished */
} slot;

struct vt_loader {
    const vt_source *src;
    const vt_transform *tf;
    int B, Q;
    vt_bad_policy bad;
    size_t per; /* floats per sample */
    slot *ring;
    pthread_t *threads;
    int nthreads; /* started */
    pthread_mutex_t mu;
    pthread_cond_t work, ready;
    /* the epoch (guarded by mu) */
    int *idx, n, nb, active, quit, inflight;
    uint64_t *keys; /* the third RNG key of each position (NULL: the dataset index) */
    int next;     /* next position to claim */
    int consumed; /* batches handed out */
    uint64_t seed;
    int64_t epoch, skipped;
    int failed;   /* a worker's error: msg in err */
    vt_err err;
    unsigned char *known_bad; /* per dataset index: 1 once found unreadable (warned once) */
    FILE *warn;               /* where the warnings go (stderr; NULL: nowhere) */
    char tag[24];             /* after "vitc: " in them (an MPI rank's "rank 1: ") */
};

int vt_loader_default_workers(void) {
    const int n = vt_cpus_usable();
    return n > 8 ? 8 : n;
}

/* Rows of batch k of the epoch. */
static int batch_rows(const vt_loader *L, int k) {
    const int rest = L->n - k * L->B;
    return rest < L->B ? rest : L->B;
}

/* Marks sample i bad and warns once (locked): it could not be read (what "unreadable") or transformed ("unusable"). */
static void mark_bad(vt_loader *L, int i, const char *what, const vt_err *e) {
    pthread_mutex_lock(&L->mu);
    if (!L->known_bad[i]) {
        L->known_bad[i] = 1;
        const char *nm = L->src->name ? L->src->name(L->src->ctx, i) : NULL;
        char line[2048], lead[40]; /* one line, whatever bytes a file name holds */
        if (nm && strstr(e->msg, nm))
            snprintf(line, sizeof line, "skipping %s image: %s", what, e->msg);
        else if (nm)
            snprintf(line, sizeof line, "skipping %s image %s: %s", what, nm, e->msg);
        else
            snprintf(line, sizeof line, "skipping %s sample %d: %s", what, i, e->msg);
        snprintf(lead, sizeof lead, "vitc: %swarning: ", L->tag);
        if (L->warn) vt_write_line(L->warn, lead, line, 1);
    }
    pthread_mutex_unlock(&L->mu);
}

/* Reads sample i and transforms it into out (unlocked; its draws keyed by key); on failure marks it bad. Returns 0 or
 * -1. */
static int read_sample(vt_loader *L, int i, uint64_t key, float *out, int *label) {
    vt_err e = {0};
    vt_image img = {0, 0, 0, NULL};
    if (L->src->get(L->src->ctx, i, L->tf->chans, L->tf->min_side, &img, label, &e) == 0) {
        if (*label >= 0 && *label < L->src->nclasses) {
            vt_rng rng;
            vt_rng_seed(&rng, vt_rng_key(L->seed, (uint64_t)L->epoch, key));
            const int rc = L->tf->apply(L->tf->ctx, &img, &rng, out, &e);
            vt_image_free(&img);
            if (rc == 0) return 0;
            mark_bad(L, i, "unusable", &e); /* e.g. an aspect ratio the resize cannot take: as an unreadable one */
            return -1;
        }
        vt_image_free(&img);
        vt_seterr(&e, "label %d out of range [0, %d)", *label, L->src->nclasses);
    }
    mark_bad(L, i, "unreadable", &e);
    return -1;
}

/* Fills row r of slot s with the sample at epoch position p. Returns 0, or -1 with L->err set (locked). */
static int make_row(vt_loader *L, int p, slot *s, int r) {
    float *out = s->x + (size_t)r * L->per;
    int i = L->idx[p], label = -1, tries = 0, bad = 0;
    for (;;) {
        pthread_mutex_lock(&L->mu);
        const int known = L->known_bad[i];
        pthread_mutex_unlock(&L->mu);
        const uint64_t key = L->keys ? L->keys[p] + (uint64_t)(i - L->idx[p]) : (uint64_t)i;
        if (!known && read_sample(L, i, key, out, &label) == 0) break;
        bad += tries == 0;
        if (L->bad == VT_BAD_DROP || ++tries >= L->src->n) {
            pthread_mutex_lock(&L->mu);
            L->skipped += bad;
            pthread_mutex_unlock(&L->mu);
            if (L->bad == VT_BAD_DROP) {
                memset(out, 0, sizeof(float) * L->per);
                s->labels[r] = -1;
                return 0;
            }
            pthread_mutex_lock(&L->mu);
            vt_seterr(&L->err, "none of the %d images of the dataset could be read (see the warnings above)",
                      L->src->n);
            pthread_mutex_unlock(&L->mu);
            return -1;
        }
        i = (i + 1) % L->src->n; /* the next readable sample stands in, the same whichever thread looks */
    }
    if (bad) {
        pthread_mutex_lock(&L->mu);
        L->skipped += bad;
        pthread_mutex_unlock(&L->mu);
    }
    s->labels[r] = label;
    return 0;
}

static void *worker(void *arg) {
    vt_loader *L = arg;
    pthread_mutex_lock(&L->mu);
    for (;;) {
        while (!L->quit && !(L->active && !L->failed && L->next < L->n && L->next / L->B < L->consumed + L->Q))
            pthread_cond_wait(&L->work, &L->mu);
        if (L->quit) break;
        const int p = L->next++;
        slot *s = &L->ring[(p / L->B) % L->Q];
        L->inflight++;
        pthread_mutex_unlock(&L->mu);
        const int rc = make_row(L, p, s, p % L->B);
        pthread_mutex_lock(&L->mu);
        L->inflight--;
        if (rc) L->failed = 1;
        s->done++;
        pthread_cond_broadcast(&L->ready);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

void vt_loader_free(vt_loader *L) {
    if (!L) return;
    pthread_mutex_lock(&L->mu);
    L->quit = 1;
    pthread_cond_broadcast(&L->work);
    pthread_mutex_unlock(&L->mu);
    for (int t = 0; t < L->nthreads; t++) pthread_join(L->threads[t], NULL);
    pthread_mutex_destroy(&L->mu);
    pthread_cond_destroy(&L->work);
    pthread_cond_destroy(&L->ready);
    for (int q = 0; L->ring && q < L->Q; q++) {
        vt_free(L->ring[q].x);
        free(L->ring[q].labels);
    }
    free(L->ring);
    free(L->threads);
    free(L->idx);
    free(L->keys);
    free(L->known_bad);
    free(L);
}

vt_loader *vt_loader_new(const vt_source *src, const vt_transform *tf, int batch, int workers, int prefetch,
                         vt_bad_policy bad, vt_err *e) {
    if (!src || !tf || !src->get || !tf->apply) {
        vt_seterr(e, "vt_loader_new: NULL source or transform");
        return NULL;
    }
    if (src->n < 1 || batch < 1 || workers < 1 || workers > 1024 || prefetch < 1 || prefetch > 64 || tf->size < 1 ||
        tf->width < 1 || tf->chans < 1) {
        vt_seterr(e, "vt_loader_new: %d samples, batch %d, %d workers, prefetch %d, output %d×%d×%d (each must be "
                  ">= 1; workers <= 1024, prefetch <= 64)", src->n, batch, workers, prefetch, tf->chans, tf->size,
                  tf->width);
        return NULL;
    }
    vt_loader *L = calloc(1, sizeof *L);
    if (!L) {
        vt_seterr_code(e, VT_E_NOMEM, "out of memory");
        return NULL;
    }
    L->src = src;
    L->tf = tf;
    L->B = batch;
    L->Q = prefetch;
    L->bad = bad;
    L->warn = stderr;
    L->per = (size_t)tf->chans * tf->size * tf->width;
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->work, NULL);
    pthread_cond_init(&L->ready, NULL);
    L->ring = calloc((size_t)prefetch, sizeof *L->ring);
    L->threads = calloc((size_t)workers, sizeof *L->threads);
    L->known_bad = calloc((size_t)src->n, 1);
    int ok = L->ring && L->threads && L->known_bad;
    for (int q = 0; ok && q < prefetch; q++) {
        ok = (L->ring[q].x = vt_alloc(sizeof(float) * L->per * (size_t)batch, e)) != NULL &&
             (L->ring[q].labels = calloc((size_t)batch, sizeof(int))) != NULL;
    }
    for (int t = 0; ok && t < workers; t++) {
        if (pthread_create(&L->threads[t], NULL, worker, L) != 0) break;
        L->nthreads++;
    }
    if (!ok || L->nthreads < workers) {
        vt_seterr_code(e, ok ? VT_E_FAILED : VT_E_NOMEM,
                       ok ? "cannot start %d loader threads" : "out of memory for %d loader threads and their batches",
                       workers);
        vt_loader_free(L);
        return NULL;
    }
    return L;
}

int vt_loader_start(vt_loader *L, const int *idx, int n, int drop_last, uint64_t seed, int64_t epoch, vt_err *e) {
    return vt_loader_start_keyed(L, idx, NULL, n, drop_last, seed, epoch, e);
}

int vt_loader_start_keyed(vt_loader *L, const int *idx, const uint64_t *keys, int n, int drop_last, uint64_t seed,
                          int64_t epoch, vt_err *e) {
    if (n < 1 || !idx) return vt_seterr(e, "vt_loader_start: empty index list");
    for (int j = 0; j < n; j++)
        if (idx[j] < 0 || idx[j] >= L->src->n)
            return vt_seterr(e, "vt_loader_start: index %d (position %d) out of range [0, %d)", idx[j], j, L->src->n);
    const int nb = drop_last ? n / L->B : (n + L->B - 1) / L->B;
    if (nb < 1) return vt_seterr(e, "batch size %d is larger than the %d samples of the epoch", L->B, n);
    int *copy = malloc(sizeof(int) * (size_t)n);
    uint64_t *kcopy = keys ? malloc(sizeof(uint64_t) * (size_t)n) : NULL;
    if (!copy || (keys && !kcopy)) {
        free(copy);
        free(kcopy);
        return vt_seterr_code(e, VT_E_NOMEM, "out of memory");
    }
    memcpy(copy, idx, sizeof(int) * (size_t)n);
    if (keys) memcpy(kcopy, keys, sizeof(uint64_t) * (size_t)n);
    pthread_mutex_lock(&L->mu);
    L->active = 0; /* abandon an epoch in progress: wait for rows being made */
    while (L->inflight > 0) pthread_cond_wait(&L->ready, &L->mu);
    free(L->idx);
    free(L->keys);
    L->idx = copy;
    L->keys = kcopy;
    L->n = drop_last ? nb * L->B : n;
    L->nb = nb;
    L->next = 0;
    L->consumed = 0;
    L->seed = seed;
    L->epoch = epoch;
    L->skipped = 0;
    L->failed = 0;
    vt_clearerr(&L->err);
    for (int q = 0; q < L->Q; q++) L->ring[q].done = 0;
    L->active = 1;
    pthread_cond_broadcast(&L->work);
    pthread_mutex_unlock(&L->mu);
    return nb;
}

int vt_loader_next(vt_loader *L, float *x, int *labels, vt_err *e) {
    pthread_mutex_lock(&L->mu);
    if (!L->active || L->consumed >= L->nb) {
        pthread_mutex_unlock(&L->mu);
        return 0;
    }
    const int k = L->consumed, rows = batch_rows(L, k);
    slot *s = &L->ring[k % L->Q];
    while (s->done < rows && !L->failed) pthread_cond_wait(&L->ready, &L->mu);
    if (L->failed) {
        vt_seterr(e, "%s", L->err.msg);
        pthread_mutex_unlock(&L->mu);
        return -1;
    }
    pthread_mutex_unlock(&L->mu);
    memcpy(x, s->x, sizeof(float) * L->per * (size_t)rows);
    memset(x + L->per * (size_t)rows, 0, sizeof(float) * L->per * (size_t)(L->B - rows));
    if (labels) {
        memcpy(labels, s->labels, sizeof(int) * (size_t)rows);
        for (int b = rows; b < L->B; b++) labels[b] = -1;
    }
    pthread_mutex_lock(&L->mu);
    s->done = 0;
    L->consumed++;
    pthread_cond_broadcast(&L->work);
    pthread_mutex_unlock(&L->mu);
    return rows;
}

void vt_loader_set_warnings(vt_loader *L, FILE *f) {
    pthread_mutex_lock(&L->mu);
    L->warn = f;
    pthread_mutex_unlock(&L->mu);
}

void vt_loader_set_tag(vt_loader *L, const char *tag) {
    pthread_mutex_lock(&L->mu);
    snprintf(L->tag, sizeof L->tag, "%s", tag ? tag : "");
    pthread_mutex_unlock(&L->mu);
}

int64_t vt_loader_skipped(vt_loader *L) {
    pthread_mutex_lock(&L->mu);
    const int64_t n = L->skipped;
    pthread_mutex_unlock(&L->mu);
    return n;
}
