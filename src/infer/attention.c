/* `vitc attention`: the attention maps a model's blocks export from their own intermediates (a graph built with
 * export_maps: the fused attention op writes its probabilities into a second output, other blocks mark their
 * softmax or refined maps as graph outputs), reduced to the class token's row (or the mean query's) over the key
 * grid (read where the map is, or computed from its factors: the whole map is formed only for --save-maps and
 * --rollout), bilinearly upsampled (vt_bilinear_resize) onto the preprocessed image in viridis (viridis.h), and laid
 * out in a labelled grid PNG written by stb_image_write (Debian's libstb, already linked for decoding). Captions use
 * stb_easy_font (the same package): it turns text into rectangles, which are filled here, so no font files and no
 * new dependency (libcairo would add one, and fonts) are needed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vitc/attention.h"
#include "vitc/fileio.h"
#include "vitc/predict.h"
#include "vitc/progress.h"
#include "vitc/safetensors.h"

#include <stb_image_write.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wmissing-braces"
#include <stb_easy_font.h>
#pragma GCC diagnostic pop

#include "viridis.h"

#define PAD 4
#define TITLE 12
#define CAPTION 12

int vt_parse_index_list(const char *s, const char *what, int *out, int max, vt_err *e) {
    int n = 0;
    const char *p = s;
    if (!s || !*s) return vt_seterr(e, "%s: empty list (want comma-separated indices such as 0,5,11)", what);
    const char *more = strlen(s) > 60 ? "..." : ""; /* messages quote 60 characters: the reason stays in them */
    while (*p) {
        char *end;
        if (*p < '0' || *p > '9')
            return vt_seterr(e, "%s '%.60s%s': not a list of non-negative integers", what, s, more);
        const long v = strtol(p, &end, 10);
        if (v > 1000000 || (*end && *end != ',') || (*end == ',' && !end[1]))
            return vt_seterr(e, "%s '%.60s%s': not a list of non-negative integers", what, s, more);
        if (n == max) return vt_seterr(e, "%s '%.60s%s': more than %d indices", what, s, more, max);
        for (int i = 0; i < n; i++)
            if (out[i] == (int)v) return vt_seterr(e, "%s '%.60s%s': %ld given twice", what, s, more, v);
        out[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* The block a map belongs to: its name without ".view". */
static void module_of(const vt_attn_map *m, char *buf, size_t n) {
    size_t len = strlen(m->name), vl = strlen(m->view);
    if (vl && len > vl + 1) len -= vl + 1;
    snprintf(buf, n, "%.*s", (int)len, m->name);
}

/* The map's batch entries, heads, queries and keys. */
static void map_dims(const vt_attn_map *m, int *B, int *H, int *N, int *M) {
    const vt_tensor *t = m->t;
    const int full = m->form == VT_MAP_FULL && t && t->ndim == 4;
    *B = full ? t->shape[0] : m->form == VT_MAP_FULL ? 0 : m->batch;
    *H = full ? t->shape[1] : m->heads;
    *N = full ? t->shape[2] : m->n;
    *M = full ? t->shape[3] : m->m;
}

/* Windows per image of a per-window map (Swin: vt_window_partition's windows, padded map), else 0. */
static int windows(const vt_attn_map *m, int *nwh, int *nww) {
    if (m->win_h < 1 || m->win_w < 1 || m->gh < 1 || m->gw < 1) return 0;
    *nwh = (m->win_h + m->gh - 1) / m->gh;
    *nww = (m->win_w + m->gw - 1) / m->gw;
    return *nwh * *nww;
}

/* The grid a map is drawn on: the keys' grid; the whole map for per-window maps; the query grid for keys pooled along
 * its rows (kpool). */
static void draw_grid(const vt_attn_map *m, int *gh, int *gw) {
    *gh = m->win_h > 0 ? m->win_h : m->kpool > 0 ? m->gh : m->kh;
    *gw = m->win_h > 0 ? m->win_w : m->kpool > 0 ? m->gw : m->kw;
}

/* 0 when m can be drawn for one image: one batch entry (or the windows of one image), queries and keys on the token
 * grids it declares. */
static int drawable(const vt_attn_map *m, char *why, size_t n) {
    int B, H, N, M, nwh, nww;
    map_dims(m, &B, &H, &N, &M);
    if (m->win_h > 0) {
        const int nw = windows(m, &nwh, &nww);
        if (B != nw || m->lead || N != m->gh * m->gw || M != N) {
            snprintf(why, n, "%s: %d per-window maps of %d×%d do not fit %d windows of %dx%d tokens", m->name, B, N,
                     M, nw, m->gh, m->gw);
            return -1;
        }
        return 0;
    }
    if (B != 1) {
        snprintf(why, n, "%s: its attention runs per window (%d windows per image) and exports no per-window maps (as "
                 "FLatten's inside windows)", m->name, B);
        return -1;
    }
    if (m->kh < 1 || m->kw < 1 || N != m->lead + m->gh * m->gw || M != m->klead + m->kh * m->kw) {
        snprintf(why, n, "%s: its %d×%d map is not over the token grid", m->name, N, M);
        return -1;
    }
    return 0;
}

/* Query i (key == 0) or key i (key == 1) of head h of batch entry b of a factorised map as the products use it, into
 * f (d doubles): the key bias added to keys, then ReLU on both when m->relu. */
static void factor_vec(const vt_attn_map *m, int b, int h, int key, int i, double *f) {
    const vt_tensor *t = key ? m->k : m->q;
    const int64_t *st = key ? m->kst : m->qst, *bst = m->kbst;
    const float *x = t->data + (key ? m->koff : m->qoff) + b * st[0] + h * st[1] + i * st[2];
    const float *kb = key && m->kbias ? m->kbias->data + m->kboff + b * bst[0] + h * bst[1] + i * bst[2] : NULL;
    for (int c = 0; c < m->d; c++) {
        double y = x[c * st[3]];
        if (kb) y += kb[c * bst[3]];
        f[c] = m->relu && !(y > 0.0) ? 0.0 : y;
    }
}

/* The keys of head h of batch entry b (factor_vec) into kf (M × d doubles). */
static void factor_keys(const vt_attn_map *m, int b, int h, int M, double *kf) {
    for (int j = 0; j < M; j++) factor_vec(m, b, h, 1, j, kf + (size_t)j * m->d);
}

/* Row i of a factorised map from query qf (d doubles) and keys kf (factor_keys) into r (M doubles): the products
 * s_j = Σ_c qf(c)·kf(j, c), normalised by m->form. */
static void factor_row(const vt_attn_map *m, const double *qf, const double *kf, int M, double *r) {
    double sum = 0.0, mx = -INFINITY, z = 0.0;
    for (int j = 0; j < M; j++) {
        double acc = 0.0;
        for (int c = 0; c < m->d; c++) acc += qf[c] * kf[(size_t)j * m->d + c];
        r[j] = acc;
        sum += acc;
        mx = m->scale * acc > mx ? m->scale * acc : mx;
    }
    if (m->form == VT_MAP_SOFTMAX)
        for (int j = 0; j < M; j++) z += exp(m->scale * r[j] - mx);
    for (int j = 0; j < M; j++)
        r[j] = m->form == VT_MAP_LINEAR    ? r[j] / (sum + m->eps)
               : m->form == VT_MAP_SOFTMAX ? exp(m->scale * r[j] - mx) / z
                                           : m->scale * r[j];
}

int vt_attn_map_values(const vt_attn_map *m, float *out) {
    int B, H, N, M;
    map_dims(m, &B, &H, &N, &M);
    if (m->form == VT_MAP_FULL) {
        memcpy(out, m->t->data, sizeof(float) * (size_t)B * H * N * M);
        return 0;
    }
    double *r = malloc(sizeof(double) * ((size_t)M * (1 + m->d) + m->d));
    if (!r) return -1;
    double *kf = r + M, *qf = kf + (size_t)M * m->d;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            factor_keys(m, b, h, M, kf);
            for (int i = 0; i < N; i++) {
                float *row = out + (((size_t)b * H + h) * N + i) * M;
                factor_vec(m, b, h, 0, i, qf);
                factor_row(m, qf, kf, M, r);
                for (int j = 0; j < M; j++) row[j] = (float)r[j];
            }
        }
    free(r);
    return 0;
}

/* Where token j of window b of a per-window map came from, (oy, ox) on the win_h × win_w map: 0 for padding. */
static int window_token(const vt_attn_map *m, int b, int j, int nww, int Hp, int Wp, int *oy, int *ox) {
    *oy = ((b / nww) * m->gh + j / m->gw + m->win_sh) % Hp;
    *ox = ((b % nww) * m->gw + j % m->gw + m->win_sw) % Wp;
    return *oy < m->win_h && *ox < m->win_w;
}

/* Whether the drawn row averages query i of batch entry b: the class token alone when the queries have a leading
 * token, else every query but a per-window map's padding (nww, Hp, Wp: windows(), for per-window maps). */
static int drawn_query(const vt_attn_map *m, int b, int i, int nww, int Hp, int Wp) {
    int qy, qx;
    if (m->lead) return i == 0;
    return !m->win_h || window_token(m, b, i, nww, Hp, Wp, &qy, &qx);
}

int64_t vt_attn_row_work(const vt_attn_map *m) {
    int B, H, N, M;
    map_dims(m, &B, &H, &N, &M);
    return m->form == VT_MAP_FULL ? M : 2 * (int64_t)M + (int64_t)M * m->d + 3 * (int64_t)m->d;
}

/* Σ over heads [h0, h1) and the drawn queries (drawn_query) of batch entry b of their rows into acc (M doubles): read
 * from data ((B, H, N, M) values), else computed from m itself without forming the map, from t (VT_MAP_FULL) or the
 * factors in double precision. Linear and dot forms in O((N + M)·d) per head, as the mean of rows w_i·(q_i·k_j) is
 * q̄·k_j with q̄ = Σ_i w_i·q_i (w_i = 1 / (q_i·Σ_j k_j + eps), or scale); softmax rows one at a time. ws: M·(1 + d)
 * + 3·d doubles. Returns the number of rows summed. */
static int row_sum(const vt_attn_map *m, const float *data, int b, int h0, int h1, double *acc, double *ws) {
    int B, H, N, M, nwh = 0, nww = 0;
    map_dims(m, &B, &H, &N, &M);
    windows(m, &nwh, &nww);
    const int Hp = nwh * m->gh, Wp = nww * m->gw, d = m->d;
    if (!data && m->form == VT_MAP_FULL) data = m->t->data;
    double *r = ws, *kf = r + M, *qf = kf + (size_t)M * d, *ksum = qf + d, *qbar = ksum + d;
    const int bilinear = m->form == VT_MAP_LINEAR || m->form == VT_MAP_DOT;
    int rows = 0;
    memset(acc, 0, sizeof(double) * (size_t)M);
    for (int hh = h0; hh < h1; hh++) {
        if (!data) {
            factor_keys(m, b, hh, M, kf);
            for (int c = 0; c < d; c++) ksum[c] = qbar[c] = 0.0;
            for (int j = 0; bilinear && j < M; j++)
                for (int c = 0; c < d; c++) ksum[c] += kf[(size_t)j * d + c];
        }
        for (int i = 0; i < N; i++) {
            if (!drawn_query(m, b, i, nww, Hp, Wp)) continue;
            rows++;
            if (data) {
                const float *row = data + (((size_t)b * H + hh) * N + i) * M;
                for (int j = 0; j < M; j++) acc[j] += row[j];
                continue;
            }
            factor_vec(m, b, hh, 0, i, qf);
            if (bilinear) {
                double w = m->scale, z = 0.0; /* linear: z = Σ_j q·k_j, the row's sum */
                for (int c = 0; m->form == VT_MAP_LINEAR && c < d; c++) z += qf[c] * ksum[c];
                if (m->form == VT_MAP_LINEAR) w = 1.0 / (z + m->eps);
                for (int c = 0; c < d; c++) qbar[c] += w * qf[c];
            } else {
                factor_row(m, qf, kf, M, r);
                for (int j = 0; j < M; j++) acc[j] += r[j];
            }
        }
        for (int j = 0; !data && bilinear && j < M; j++) {
            double s = 0.0;
            for (int c = 0; c < d; c++) s += qbar[c] * kf[(size_t)j * d + c];
            acc[j] += s;
        }
    }
    return rows;
}

void vt_attn_map_row(const vt_attn_map *m, const float *values, int h, float *v, double *work) {
    int B, H, N, M, nwh, nww;
    map_dims(m, &B, &H, &N, &M);
    const int K = m->kh * m->kw, h0 = h < 0 ? 0 : h, h1 = h < 0 ? H : h + 1;
    double *acc = work, *ws = work + M;
    if (windows(m, &nwh, &nww)) {
        const int Hp = nwh * m->gh, Wp = nww * m->gw;
        for (int b = 0; b < B; b++) {
            const int rows = row_sum(m, values, b, h0, h1, acc, ws);
            for (int j = 0; j < M; j++) {
                int oy, ox;
                if (window_token(m, b, j, nww, Hp, Wp, &oy, &ox)) /* not padding */
                    v[oy * m->win_w + ox] = rows ? (float)(acc[j] / rows) : 0.0f;
            }
        }
        return;
    }
    const int rows = row_sum(m, values, 0, h0, h1, acc, ws);
    for (int j = 0; j < K; j++) v[j] = (float)(acc[m->klead + j] / rows);
    if (m->kpool > 0) /* downwards, so that v[t / kpool] is still key t / kpool's value when t reads it */
        for (int t = m->gh * m->gw - 1; t >= 0; t--) v[t] = t / m->kpool < K ? v[t / m->kpool] : 0.0f;
}

/* Attention rollout (Abnar & Zuidema 2020) of one image into R (N×N, double): per block the head mean plus the
 * identity, rows renormalised, multiplied through the blocks in order (R ← A·R). */
static void rollout(float *const *maps, const int *heads, int nb, int N, double *R, double *A, double *T) {
    for (int i = 0; i < N * N; i++) R[i] = i % (N + 1) == 0 ? 1.0 : 0.0;
    for (int b = 0; b < nb; b++) {
        const float *t = maps[b];
        const int H = heads[b];
        for (int i = 0; i < N; i++) {
            double sum = 0.0;
            for (int j = 0; j < N; j++) {
                double s = 0.0;
                for (int h = 0; h < H; h++) s += t[((size_t)h * N + i) * N + j];
                A[i * N + j] = s / H + (i == j);
                sum += A[i * N + j];
            }
            for (int j = 0; j < N; j++) A[i * N + j] /= sum;
        }
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                double s = 0.0;
                for (int k = 0; k < N; k++) s += A[i * N + k] * R[k * N + j];
                T[i * N + j] = s;
            }
        memcpy(R, T, sizeof(double) * (size_t)N * N);
    }
}

/* The picture being drawn: an RGB canvas and its layout. */
typedef struct {
    unsigned char *rgb;
    int W, H;       /* canvas */
    int Sh, Sw, f;  /* input height and width, and the pixels drawn per input pixel */
    int Th, Tw;     /* tile height and width: f·Sh, f·Sw */
    float *big;     /* Sh·Sw upsampled map */
} canvas;

static void fill(canvas *cv, int x0, int y0, int w, int h, const unsigned char c[3]) {
    for (int y = y0 < 0 ? 0 : y0; y < y0 + h && y < cv->H; y++)
        for (int x = x0 < 0 ? 0 : x0; x < x0 + w && x < cv->W; x++) memcpy(cv->rgb + ((size_t)y * cv->W + x) * 3, c, 3);
}

/* Longest title drawn, in bytes: a longer one (a long file name) is cut. */
#define TITLE_MAX 160

/* The title of image `path`'s row of map m (NULL: the rollout) into t (TITLE_MAX bytes): the file's name, the map's
 * name, and which row is drawn (the class token's, or the mean over the queries); a long file name is cut first. */
static void map_title(const vt_attn_map *m, const char *path, char *t) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char what[136];
    if (!m) {
        snprintf(what, sizeof what, "rollout over all blocks");
    } else {
        int B, H, N, M;
        map_dims(m, &B, &H, &N, &M);
        char row[64];
        if (m->lead)
            snprintf(row, sizeof row, "class token's row");
        else if (m->win_h)
            snprintf(row, sizeof row, "each window's mean row");
        else
            snprintf(row, sizeof row, "mean row of %d queries", N);
        snprintf(what, sizeof what, "%.64s%s: %.40s%s", m->name, m->win_h ? " (per window)" : "", row,
                 m->probs ? "" : " (scores)");
    }
    const size_t nw = strlen(what), room = TITLE_MAX - 3 - nw, nb = strlen(base); /* (room >= 21) */
    const size_t keep = nb <= room ? nb : room - 3; /* a long file name: its start, marked cut */
    memcpy(t, base, keep);
    memcpy(t + keep, nb <= room ? "  " : "...  ", nb <= room ? 2 : 5);
    memcpy(t + keep + (nb <= room ? 2 : 5), what, nw + 1);
    for (char *q = t; *q; q++) /* the font draws printable ASCII; a newline would start another line over the tiles */
        if ((unsigned char)*q < 0x20 || (unsigned char)*q > 0x7e) *q = '?';
}

/* Text at (x, y) in white, cut to maxw pixels (stb_easy_font: each character a few filled rectangles). */
static void text(canvas *cv, int x, int y, const char *s, int maxw) {
    static const unsigned char white[3] = {235, 235, 235};
    char buf[TITLE_MAX];
    snprintf(buf, sizeof buf, "%s", s);
    while (buf[0] && stb_easy_font_width(buf) > maxw) buf[strlen(buf) - 1] = 0;
    /* room for every quad of the text (a printable character is at most 11 quads, 64 bytes each; 'X'), else the
     * font stops mid-text and a title the picture was widened for is drawn cut */
    const size_t room = sizeof(float) * 16 * 12 * (strlen(buf) + 1);
    float *quads = malloc(room);
    if (!quads) return; /* out of memory: the picture without this text */
    const int nq = stb_easy_font_print((float)x, (float)y, buf, NULL, quads, (int)room);
    for (int q = 0; q < nq; q++) {
        const float *v = quads + q * 16; /* 4 vertices of (x, y, z, colour) */
        float xa = v[0], xb = v[0], ya = v[1], yb = v[1];
        for (int k = 1; k < 4; k++) {
            xa = fminf(xa, v[k * 4]), xb = fmaxf(xb, v[k * 4]);
            ya = fminf(ya, v[k * 4 + 1]), yb = fmaxf(yb, v[k * 4 + 1]);
        }
        fill(cv, (int)xa, (int)ya, (int)(xb - xa), (int)(yb - ya), white);
    }
    free(quads);
}

/* x clamped to [0, 1], NaN to 0 (weights that overflow must not index outside the colormap). */
static float unit(float x) { return x >= 0.0f ? (x <= 1.0f ? x : 1.0f) : 0.0f; }

/* The pixels per cell of a dh × dw grid drawn for m where its tokens cover only the image's top-left cells·px pixels
 * (a patch conv without padding at a size that is not a multiple: vt_attn_map.px, for the query grid); 0: the whole
 * image. */
static int cover_px(const vt_attn_map *m, int dh, int dw) {
    return m->px > 0 && dh == m->gh && dw == m->gw ? m->px : 0;
}

/* Tile at (x0, y0): the preprocessed image x (C, Sh, Sw, normalised by pp), and over it, if v is non-NULL, the map v
 * (kh × kw) min-max scaled, upsampled to Sh×Sw (with px > 0: to the kh·px × kw·px pixels its cells cover, the rest
 * of the image left bare) and coloured with viridis (55% map, 45% image); f-fold pixels. */
static void tile(canvas *cv, int x0, int y0, const float *x, int C, const vt_preprocess *pp, const float *v, int kh,
                 int kw, int px) {
    const int Sh = cv->Sh, Sw = cv->Sw, f = cv->f;
    const int ch = px > 0 && kh * px < Sh ? kh * px : Sh, cw = px > 0 && kw * px < Sw ? kw * px : Sw;
    if (v) {
        float lo = v[0], hi = v[0];
        for (int j = 1; j < kh * kw; j++) lo = fminf(lo, v[j]), hi = fmaxf(hi, v[j]);
        vt_bilinear_resize(v, 1, kh, kw, 1, cv->big, ch, cw);
        for (int y = ch - 1; y >= 0; y--) { /* rows of cw to rows of Sw, from the last (they only move forward) */
            memmove(cv->big + (size_t)y * Sw, cv->big + (size_t)y * cw, sizeof(float) * (size_t)cw);
            for (int xx = cw; xx < Sw; xx++) cv->big[(size_t)y * Sw + xx] = NAN;
        }
        for (int j = ch * Sw; j < Sh * Sw; j++) cv->big[j] = NAN;
        for (int j = 0; j < Sh * Sw; j++)
            if (!isnan(cv->big[j])) cv->big[j] = hi > lo ? (cv->big[j] - lo) / (hi - lo) : 0.0f;
    }
    for (int y = 0; y < Sh; y++)
        for (int xx = 0; xx < Sw; xx++) {
            unsigned char px[3];
            for (int c = 0; c < 3; c++) {
                const int ch = C == 1 ? 0 : c;
                float o = 255.0f * unit(x[((size_t)ch * Sh + y) * Sw + xx] * pp->std[ch] + pp->mean[ch]);
                if (v && !isnan(cv->big[y * Sw + xx])) {
                    const int k = (int)lrintf(255.0f * unit(cv->big[y * Sw + xx]));
                    o = 0.45f * o + 0.55f * (float)viridis[k][c];
                }
                px[c] = (unsigned char)lrintf(o);
            }
            fill(cv, x0 + xx * f, y0 + y * f, f, f, px);
        }
}

/* stb_image_write's sink: into the output's temporary file (a short write leaves the stream's error flag set, which
 * vt_out_commit reports). */
static void png_write(void *ctx, void *data, int size) {
    vt_out *o = ctx;
    if (o->f) (void)fwrite(data, 1, (size_t)size, o->f);
}

static int write_png(const char *path, const canvas *cv, vt_err *e) {
    vt_out o;
    if (vt_out_open(&o, path, e)) return -1;
    if (!stbi_write_png_to_func(png_write, &o, cv->W, cv->H, 3, cv->rgb, cv->W * 3)) {
        vt_out_abort(&o);
        return vt_seterr(e, "%s: PNG encoding failed", path);
    }
    return vt_out_commit(&o, e);
}

/* Everything one run holds (freed by run_free). */
typedef struct {
    vt_graph *g;
    vt_attn_map **sel, **prim;  /* drawn maps; each block's first square probability map (rollout) */
    int nsel, nprim;
    float **cur;                /* per graph map: its (H, N, M) values for the current image (NULL: not needed) */
    float **selv, **primv;      /* cur of the drawn and of the rollout maps */
    int *primh;                 /* heads of the rollout maps */
    float **saved;              /* --save-maps: per drawn map its values, then per drawn map its rows */
    float *inputs, *rolls, *row;
    double *work;               /* vt_attn_map_row's scratch, for the largest drawn map */
    double *R, *A, *T;
    canvas cv;
} run_t;

static void run_free(run_t *r) {
    if (r->saved)
        for (int i = 0; i < 2 * r->nsel; i++) free(r->saved[i]);
    if (r->cur)
        for (int i = 0; i < r->g->nmaps; i++) free(r->cur[i]);
    free(r->cur);
    free(r->selv);
    free(r->primv);
    free(r->primh);
    free(r->saved);
    free(r->sel);
    free(r->prim);
    free(r->inputs);
    free(r->rolls);
    free(r->row);
    free(r->work);
    free(r->R);
    free(r->A);
    free(r->T);
    free(r->cv.rgb);
    free(r->cv.big);
    vt_graph_free(r->g);
}

/* Numbers of floats of one image's map. */
static int64_t map_numel(const vt_attn_map *m) {
    int B, H, N, M;
    map_dims(m, &B, &H, &N, &M);
    return (int64_t)B * H * N * M;
}

/* Selects the maps to draw (o->blocks or every drawable block) and, for the rollout, each block's primary map, and
 * gives each a buffer for its values. */
static int select_maps(run_t *r, const vt_model_cfg *c, const vt_attn_viz_opts *o, vt_err *e) {
    vt_graph *g = r->g;
    char(*mods)[VT_NAMELEN] = calloc((size_t)g->nmaps, VT_NAMELEN); /* distinct blocks in build order */
    int nmod = 0, *mod_of = calloc((size_t)g->nmaps, sizeof(int)), rc = -1;
    const size_t nm = (size_t)g->nmaps;
    r->sel = calloc(nm, sizeof(*r->sel));
    r->prim = calloc(nm, sizeof(*r->prim));
    r->cur = calloc(nm, sizeof(*r->cur));
    r->selv = calloc(nm, sizeof(*r->selv));
    r->primv = calloc(nm, sizeof(*r->primv));
    r->primh = calloc(nm, sizeof(*r->primh));
    if (!mods || !mod_of || !r->sel || !r->prim || !r->cur || !r->selv || !r->primv || !r->primh) {
        vt_seterr_code(e, VT_E_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < g->nmaps; i++) {
        char m[VT_NAMELEN];
        module_of(g->maps[i], m, sizeof m);
        int k = 0;
        while (k < nmod && strcmp(mods[k], m) != 0) k++;
        if (k == nmod) snprintf(mods[nmod++], VT_NAMELEN, "%s", m);
        mod_of[i] = k;
    }
    char why[300] = "";
    int left = 0; /* maps the default selection leaves out */
    for (int b = 0; b < o->nblocks; b++)
        if (o->blocks[b] >= nmod) {
            vt_seterr_code(e, VT_E_USAGE, "block %d: %s has %d attention blocks (0 to %d: %s ... %s)", o->blocks[b],
                           c->name, nmod, nmod - 1, mods[0], mods[nmod - 1]);
            goto done;
        }
    for (int i = 0; i < g->nmaps; i++) {
        vt_attn_map *m = g->maps[i];
        int want = o->nblocks == 0;
        for (int b = 0; b < o->nblocks; b++) want |= o->blocks[b] == mod_of[i];
        char w[300];
        const int ok = drawable(m, w, sizeof w) == 0;
        if (!ok && !why[0]) snprintf(why, sizeof why, "%s", w);
        left += !ok && !o->nblocks;
        if (want && !ok && o->nblocks) {
            vt_seterr_code(e, VT_E_USAGE, "%s", w);
            goto done;
        }
        if (!want || !ok) continue;
        /* only drawn: vt_attn_map_row reads the map where it is, or its factors (no N×M copy) */
        if ((o->save_maps || o->rollout) && !r->cur[i] && !(r->cur[i] = malloc(sizeof(float) * (size_t)map_numel(m))))
            goto oom;
        r->selv[r->nsel] = r->cur[i];
        r->sel[r->nsel++] = m;
    }
    if (o->rollout)
        for (int k = 0; k < nmod; k++) {
            int p = -1, B, H, N, M, N0 = 0;
            char wb[300];
            const char *lack = "no attention map"; /* why no map of block k fits, the last reason seen */
            int refined = 0; /* the Refiner: its values are mixed by the refined map, not by its softmax */
            for (int i = 0; i < g->nmaps; i++) refined |= mod_of[i] == k && strcmp(g->maps[i]->view, "refined") == 0;
            if (refined) lack = "a refined map (scores, not probabilities) that mixes its values, not its softmax";
            for (int i = 0; i < g->nmaps && p < 0 && !refined; i++) {
                if (mod_of[i] != k) continue;
                map_dims(g->maps[i], &B, &H, &N, &M);
                if (!g->maps[i]->probs)
                    lack = "no softmax probabilities (its attention is not a softmax over tokens)";
                else if (g->maps[i]->win_h)
                    lack = "maps inside windows or stripes only, not over the whole image";
                else if (N != M)
                    lack = "fewer keys than queries (spatial reduction)";
                else if (drawable(g->maps[i], wb, sizeof wb) != 0)
                    lack = "no map that can be drawn";
                else
                    p = i;
            }
            if (r->nprim) map_dims(r->prim[0], &B, &H, &N0, &M);
            if (p >= 0) map_dims(g->maps[p], &B, &H, &N, &M);
            if (p < 0 || (r->nprim && N != N0)) {
                char tok[96];
                if (p >= 0) snprintf(tok, sizeof tok, "maps over %d tokens where the first block's are over %d", N, N0);
                vt_seterr_code(e, VT_E_USAGE, "--rollout needs every block's token-to-token probabilities over the "
                               "same tokens; %s has %s", mods[k], p >= 0 ? tok : lack);
                goto done;
            }
            if (!r->cur[p] && !(r->cur[p] = malloc(sizeof(float) * (size_t)map_numel(g->maps[p])))) goto oom;
            r->primv[r->nprim] = r->cur[p];
            r->primh[r->nprim] = H;
            r->prim[r->nprim++] = g->maps[p];
        }
    if (!r->nsel) {
        vt_seterr(e, "%s has no attention maps that can be drawn (%s)", c->name, why);
        goto done;
    }
    if (left && o->notes) {
        char line[400];
        snprintf(line, sizeof line, "%d of %d attention maps left out, e.g. %s", left, g->nmaps, why);
        vt_write_line(o->notes, "vitc: note: ", line, 1);
    }
    rc = 0;
    goto done;
oom:
    vt_seterr_code(e, VT_E_NOMEM, "out of memory");
done:
    free(mods);
    free(mod_of);
    return rc;
}

int vt_attention_pictures(const vt_model_cfg *c, vt_params *P, const char *const *paths, int n,
                          const vt_attn_viz_opts *o, vt_err *e) {
    if (c->arch.in_chans != 1 && c->arch.in_chans != 3)
        return vt_seterr(e, "attention reads 1- or 3-channel images; %s has %d input channels", c->name,
                         c->arch.in_chans);
    if (n < 1) return vt_seterr(e, "attention needs at least one image");
    if (!o->png && !o->save_maps) return vt_seterr(e, "attention needs an output: -o OUT.png and/or --save-maps");
    if ((o->png && vt_output_check(o->png, paths, n, e)) || (o->save_maps && vt_output_check(o->save_maps, paths, n, e)))
        return -1;
    if (o->png && o->save_maps && vt_same_output(o->png, o->save_maps))
        return vt_seterr(e, "-o %s and --save-maps %s name the same file", o->png, o->save_maps);
    run_t r = {0};
    vt_tensor *in = NULL;
    if (!(r.g = vt_graph_new(P, 0, e))) return -1;
    r.g->export_maps = 1;
    vt_graph_output(r.g, vt_model_build(r.g, c, 1, &in));
    if (vt_graph_finalize(r.g, e)) goto fail;
    if (r.g->nmaps == 0) {
        vt_seterr(e, "%s has no attention maps: its blocks (attention '%s') compute none to export", c->name,
                  c->arch.stages[0].attn);
        goto fail;
    }
    if (select_maps(&r, c, o, e)) goto fail;
    int cols = 1, B, H, N, M;
    if (!o->head_mean) {
        int maxh = 0;
        for (int i = 0; i < r.nsel; i++) {
            map_dims(r.sel[i], &B, &H, &N, &M);
            maxh = H > maxh ? H : maxh;
            for (int k = 0; k < o->nheads; k++)
                if (o->heads[k] >= H) {
                    vt_seterr_code(e, VT_E_USAGE, "head %d: %s has %d head%s (0 to %d)", o->heads[k], r.sel[i]->name, H,
                              H == 1 ? "" : "s", H - 1);
                    goto fail;
                }
        }
        cols = o->nheads ? o->nheads : maxh;
    }
    const vt_preprocess pp = vt_model_preprocess(c);
    const int Sh = pp.size, Sw = vt_preprocess_width(&pp), C = c->arch.in_chans;
    const int rows_img = r.nsel + (o->rollout ? 1 : 0);
    const int64_t per = (int64_t)C * Sh * Sw;
    r.cv.Sh = Sh;
    r.cv.Sw = Sw;
    const int short_side = Sh < Sw ? Sh : Sw;
    r.cv.f = (128 + short_side - 1) / short_side; /* the shorter side drawn at >= 128 pixels */
    r.cv.Th = r.cv.f * Sh;
    r.cv.Tw = r.cv.f * Sw;
    int64_t W = PAD + (int64_t)(1 + cols) * (r.cv.Tw + PAD);
    for (int b = 0; o->png && b < n; b++) /* wide enough for every row's title */
        for (int i = 0; i <= r.nsel; i++) {
            char t[TITLE_MAX];
            map_title(i < r.nsel ? r.sel[i] : NULL, paths[b], t);
            const int64_t w = 2 * PAD + stb_easy_font_width(t);
            W = w > W ? w : W;
        }
    const int64_t Hh = PAD + (int64_t)n * rows_img * (TITLE + CAPTION + r.cv.Th + PAD);
    if (o->png && (W > 32768 || Hh > 262144 || W * Hh > ((int64_t)1 << 28))) {
        vt_seterr_code(e, VT_E_USAGE, "the picture would be %lld×%lld pixels: choose fewer images, blocks or heads "
                       "(--blocks, --heads mean)", (long long)W, (long long)Hh);
        goto fail;
    }
    r.cv.W = (int)W;
    r.cv.H = (int)Hh;
    int maxk = 1, NR = 0;
    int64_t maxw = 1;
    if (r.nprim) map_dims(r.prim[0], &B, &H, &NR, &M);
    for (int i = 0; i < r.nsel; i++) {
        int gh, gw;
        draw_grid(r.sel[i], &gh, &gw);
        maxk = gh * gw > maxk ? gh * gw : maxk;
        maxw = vt_attn_row_work(r.sel[i]) > maxw ? vt_attn_row_work(r.sel[i]) : maxw;
    }
    r.row = malloc(sizeof(float) * (size_t)maxk);
    r.work = malloc(sizeof(double) * (size_t)maxw);
    r.cv.big = malloc(sizeof(float) * (size_t)Sh * Sw);
    if (o->png && !(r.cv.rgb = malloc((size_t)r.cv.W * r.cv.H * 3))) goto oom;
    if (!r.row || !r.work || !r.cv.big) goto oom;
    if (o->png) memset(r.cv.rgb, 24, (size_t)r.cv.W * r.cv.H * 3);
    if (o->save_maps) {
        if (!(r.saved = calloc(2 * (size_t)r.nsel, sizeof(float *))) || !(r.inputs = malloc(sizeof(float) * per * n)))
            goto oom;
        for (int i = 0; i < r.nsel; i++) {
            int gh, gw;
            draw_grid(r.sel[i], &gh, &gw);
            map_dims(r.sel[i], &B, &H, &N, &M);
            if (!(r.saved[i] = malloc(sizeof(float) * (size_t)map_numel(r.sel[i]) * n)) ||
                !(r.saved[r.nsel + i] = malloc(sizeof(float) * (size_t)H * gh * gw * n)))
                goto oom;
        }
        if (o->rollout && !(r.rolls = malloc(sizeof(float) * (size_t)NR * NR * n))) goto oom;
    }
    if (o->rollout && (!(r.R = malloc(sizeof(double) * (size_t)NR * NR)) ||
                       !(r.A = malloc(sizeof(double) * (size_t)NR * NR)) ||
                       !(r.T = malloc(sizeof(double) * (size_t)NR * NR))))
        goto oom;
    vt_progress pg;
    vt_progress_start(&pg, n > 1 ? o->progress : NULL, "attention", "img", n, 0);
    for (int b = 0; b < n; b++) {
        if (vt_image_load(paths[b], &pp, in->data, e)) {
            vt_progress_end(&pg);
            goto fail;
        }
        vt_graph_forward(r.g);
        for (int i = 0; i < r.g->nmaps; i++) {
            if (r.cur[i] && vt_attn_map_values(r.g->maps[i], r.cur[i])) {
                vt_progress_end(&pg);
                goto oom;
            }
            for (int64_t k = 0, nk = r.cur[i] ? map_numel(r.g->maps[i]) : 0; k < nk; k++)
                if (!isfinite(r.cur[i][k])) { /* nothing is written: the weights overflow on this image */
                    vt_progress_end(&pg);
                    vt_seterr_code(e, VT_E_NONFINITE, "%s: the attention map of %s is not finite (%g): the weights "
                                   "overflow on this image", paths[b], r.g->maps[i]->name, (double)fabsf(r.cur[i][k]));
                    goto fail;
                }
        }
        if (r.inputs) memcpy(r.inputs + b * per, in->data, sizeof(float) * (size_t)per);
        for (int i = 0; r.saved && i < r.nsel; i++) {
            const int64_t k = map_numel(r.sel[i]);
            int gh, gw;
            memcpy(r.saved[i] + k * b, r.selv[i], sizeof(float) * (size_t)k);
            draw_grid(r.sel[i], &gh, &gw);
            map_dims(r.sel[i], &B, &H, &N, &M);
            for (int h = 0; h < H; h++)
                vt_attn_map_row(r.sel[i], r.selv[i], h, r.saved[r.nsel + i] + ((size_t)b * H + h) * gh * gw, r.work);
        }
        if (o->rollout) {
            rollout(r.primv, r.primh, r.nprim, NR, r.R, r.A, r.T);
            if (r.rolls)
                for (int k = 0; k < NR * NR; k++) r.rolls[(size_t)b * NR * NR + k] = (float)r.R[k];
        }
        if (o->png) {
            for (int i = 0; i < rows_img; i++) {
                const vt_attn_map *m = i < r.nsel ? r.sel[i] : r.prim[0];
                const int y0 = PAD + (b * rows_img + i) * (TITLE + CAPTION + r.cv.Th + PAD), yt = y0 + TITLE + CAPTION;
                char t[TITLE_MAX];
                map_title(i < r.nsel ? m : NULL, paths[b], t);
                text(&r.cv, PAD, y0 + 2, t, r.cv.W - 2 * PAD);
                text(&r.cv, PAD, y0 + TITLE + 2, "input", r.cv.Tw);
                tile(&r.cv, PAD, yt, in->data, C, &pp, NULL, 0, 0, 0);
                if (i == r.nsel) { /* rollout: the class row (or the mean row) over the grid keys */
                    const int K = m->kh * m->kw, q1 = m->lead ? 1 : NR;
                    for (int j = 0; j < K; j++) {
                        double s = 0.0;
                        for (int q = 0; q < q1; q++) s += r.R[(size_t)q * NR + m->klead + j];
                        r.row[j] = (float)(s / q1);
                    }
                    text(&r.cv, PAD + r.cv.Tw + PAD, y0 + TITLE + 2, m->lead ? "class row" : "mean row", r.cv.Tw);
                    tile(&r.cv, PAD + r.cv.Tw + PAD, yt, in->data, C, &pp, r.row, m->kh, m->kw,
                         cover_px(m, m->kh, m->kw));
                    continue;
                }
                map_dims(m, &B, &H, &N, &M);
                for (int k = 0; k < cols; k++) {
                    const int h = o->head_mean ? -1 : o->nheads ? o->heads[k] : k;
                    if (h >= H) continue;
                    char cap[64];
                    if (h < 0)
                        snprintf(cap, sizeof cap, "mean of %d head%s", H, H == 1 ? "" : "s");
                    else if (m->split)
                        snprintf(cap, sizeof cap, "head %d %s", h, h < m->split ? "computed" : "hallucin.");
                    else
                        snprintf(cap, sizeof cap, "head %d", h);
                    vt_attn_map_row(m, r.selv[i], h, r.row, r.work);
                    const int x0 = PAD + (1 + k) * (r.cv.Tw + PAD);
                    int gh, gw;
                    draw_grid(m, &gh, &gw);
                    for (int j = 0; j < gh * gw; j++) /* a picture alone (no map kept) is checked where it is drawn */
                        if (!isfinite(r.row[j])) {
                            vt_progress_end(&pg);
                            vt_seterr_code(e, VT_E_NONFINITE, "%s: the attention map of %s is not finite (%g): the "
                                           "weights overflow on this image", paths[b], m->name, (double)fabsf(r.row[j]));
                            goto fail;
                        }
                    text(&r.cv, x0, y0 + TITLE + 2, cap, r.cv.Tw);
                    tile(&r.cv, x0, yt, in->data, C, &pp, r.row, gh, gw, cover_px(m, gh, gw));
                }
            }
        }
        vt_progress_update(&pg, b + 1);
    }
    vt_progress_end(&pg);
    if (o->png && write_png(o->png, &r.cv, e)) goto fail;
    if (o->save_maps) {
        vt_st_out *t = calloc(2 * (size_t)r.nsel + 2, sizeof *t);
        char(*rn)[VT_NAMELEN + 8] = calloc((size_t)r.nsel, VT_NAMELEN + 8);
        if (!t || !rn) {
            free(t);
            free(rn);
            goto oom;
        }
        int nt = 0;
        t[nt++] = (vt_st_out){"input", VT_ST_F32, 4, {n, C, Sh, Sw}, r.inputs};
        for (int i = 0; i < r.nsel; i++) {
            map_dims(r.sel[i], &B, &H, &N, &M);
            if (r.sel[i]->win_h) /* per-window maps: (images, windows, heads, queries, keys) */
                t[nt++] = (vt_st_out){r.sel[i]->name, VT_ST_F32, 5, {n, B, H, N, M}, r.saved[i]};
            else
                t[nt++] = (vt_st_out){r.sel[i]->name, VT_ST_F32, 4, {n, H, N, M}, r.saved[i]};
            int gh, gw;
            draw_grid(r.sel[i], &gh, &gw);
            snprintf(rn[i], VT_NAMELEN + 8, "%s.rows", r.sel[i]->name);
            t[nt++] = (vt_st_out){rn[i], VT_ST_F32, 4, {n, H, gh, gw}, r.saved[r.nsel + i]};
        }
        if (o->rollout) t[nt++] = (vt_st_out){"rollout", VT_ST_F32, 3, {n, NR, NR}, r.rolls};
        char meta[300];
        snprintf(meta, sizeof meta, "{\"model\": \"%s\", \"format\": \"vitc attention: maps (images, [windows,] heads, "
                 "queries, keys); NAME.rows: the drawn rows (images, heads, grid h, grid w)\"}", c->name);
        const int rc = vt_st_write(o->save_maps, t, nt, meta, e);
        free(t);
        free(rn);
        if (rc) goto fail;
    }
    run_free(&r);
    return 0;
oom:
    vt_seterr_code(e, VT_E_NOMEM, "out of memory");
fail:
    run_free(&r);
    return -1;
}
