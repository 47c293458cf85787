/* Pictures of what a model attends to (`vitc attention`): the attention maps its blocks export from their own
 * intermediates (vt_graph.export_maps, vt_attn_map), the class token's row (or, without a class token, the mean
 * query's) per block and head over the patch grid, attention rollout, a labelled grid PNG and the raw maps. */
#ifndef VITC_ATTENTION_H
#define VITC_ATTENTION_H

#include <stdio.h>

#include "vitc/model.h"

#define VT_ATTN_MAX_SEL 256

/* What to draw and write. */
typedef struct vt_attn_viz_opts {
    int nblocks;                   /* 0: every block with drawable maps; else the attention blocks below */
    int blocks[VT_ATTN_MAX_SEL];   /* block indices (0-based, in build order; a block may give several views) */
    int head_mean;                 /* 1: one column, the mean over the heads */
    int nheads;                    /* 0: every head; else the heads below (ignored with head_mean) */
    int heads[VT_ATTN_MAX_SEL];
    int rollout;                   /* 1: also attention rollout (Abnar & Zuidema 2020) over every block */
    const char *png;               /* the picture (NULL: none) */
    const char *save_maps;         /* safetensors with the preprocessed inputs and raw maps (NULL: none) */
    FILE *progress;                /* progress over the images (NULL: none) */
    FILE *notes;                   /* a line on the maps every block selection left out, and why (NULL: none) */
} vt_attn_viz_opts;

/* Runs c (parameters P) on the n image files in paths with its blocks exporting their attention maps, and writes what
 * o asks for. Each map is drawn as its class token's row or, without a class token, its mean query's row over the key
 * grid; Swin's per-window maps as each window's mean query put back where the window took its tokens.
 * The PNG: one row per (image, map view) (and per image for the rollout), its first column the preprocessed image,
 * then one tile per head (or the head mean), the row min-max scaled, bilinearly upsampled to the input and overlaid
 * in viridis (to the part of it the tokens cover where a ViT's or Refined-ViT's patch stride does not divide the
 * size: their last pixels stay bare); each tile T×T pixels (T = S·⌈128/S⌉ for inputs of S pixels) under a 12-pixel
 * caption, each row under a 12-pixel title (the file, the map and which row is drawn: the class token's, or the mean of how many queries), 4
 * pixels between tiles and around: width 4 + (1 + cols)·(T + 4), or wider to fit the widest title (stb_easy_font's
 * characters, at most 7 pixels each, plus 8), height 4 + rows·(24 + T + 4).
 * The safetensors file: "input" (n, C, S, S); each drawn map by name, (n, H, N, M) or per window (n, nW, H, N, M);
 * NAME.rows, the drawn rows (n, H, grid h, grid w); "rollout" (n, N, N). Clear errors for unknown block or head
 * indices, a model without attention maps, maps that cannot be drawn and unreadable images. Returns 0, or -1 with e
 * set. */
int vt_attention_pictures(const vt_model_cfg *c, vt_params *P, const char *const *paths, int n,
                          const vt_attn_viz_opts *o, vt_err *e);

/* The (B, H, N, M) values of one image's exported map m (its batch entries: one image, or its windows) into out: a
 * copy of m->t, or computed from m's factors in double precision (m->form). Returns 0, or -1 when out of memory. */
int vt_attn_map_values(const vt_attn_map *m, float *out);

/* Doubles of scratch vt_attn_map_row needs for m. */
int64_t vt_attn_row_work(const vt_attn_map *m);

/* The drawn row of head h (h < 0: the mean over the heads) of m into v (the key grid kh × kw; the query grid gh × gw
 * for pooled keys, m->kpool; the whole win_h × win_w map for per-window maps): the class token's row when the
 * queries have a leading token, else the mean over the queries; keys before the grid dropped; pooled keys spread
 * over the tokens each pools, 0 on the tail no key pools; per-window maps: each window's mean over its queries from
 * the image (not the padding) over its keys, put back where the window took them (vt_window_partition: padding at
 * the bottom and right, then a roll by (−sh, −sw)). From values ((B, H, N, M), vt_attn_map_values) or, when values
 * is NULL, from m itself without forming the N×M map: t, or the factors in double precision, O((N + M)·d) per head
 * for linear and dot forms, softmax rows one at a time (O(M) memory). work: vt_attn_row_work(m) doubles. */
void vt_attn_map_row(const vt_attn_map *m, const float *values, int h, float *v, double *work);

/* Parses a comma-separated list of non-negative integers ("0,5,11") into out (at most max); returns the count, or -1
 * with e set naming `what` on anything else. */
int vt_parse_index_list(const char *s, const char *what, int *out, int max, vt_err *e);

#endif
