/* Driver of tests/reference/test_transforms.py: runs one of vitc's train transforms (include/vitc/transforms.h) on
 * raw uint8 HWC pixels or draws its random parameters many times. Compiled by the test against build/libvitc.a.
 * usage:
 *   transforms_driver resize IN OUT w h c x0 y0 cw ch ow oh filter      crop box resized (bytes)
 *   transforms_driver op IN OUT w h c op magnitude negate filter          one RandAugment op, translate_pct 0.45
 *   transforms_driver rrc OUT n w h seed                                  n crop boxes (int32 x0 y0 cw ch)
 *   transforms_driver ra OUT n seed                                       n DeiT RandAugment draws on an 8×8 image
 *                                                                         (float64 op applied magnitude negate interp
 *                                                                         per op, 2 per draw)
 *   transforms_driver erase OUT n h w seed                                n erasing boxes (int32 x0 y0 w h)
 *   transforms_driver three IN OUT w h c choice sigma o0 o1 o2 o3 f0 f1 f2  the MSF's three-augment with these draws
 *   transforms_driver threedraws OUT n seed                               n three-augment draws on a 16×16 image
 *                                                                         (float64 choice sigma order[4] factor[3])
 *   transforms_driver deit IN OUT LOG w h c S seed [W]                    the composed transform (float32 CHW) and
 *       its draws replayed from a copy of the generator (LOG: float64 box[4], interp, flip, 2 × (op applied
 *       magnitude negate interp), erase box[4]; then float32 CHW holding the erased values inside that box); output
 *       S×S, or S×W (height × width) where W is given.
 *   transforms_driver deit3 IN OUT LOG w h c S seed [W]                   the same with the three-augment instead of
 *       RandAugment (LOG[6..14]: choice sigma order[4] factor[3])
 * Fill colour (124, 116, 104) as DeiT's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vitc/transforms.h"

static unsigned char *read_all(const char *path, size_t n) {
    unsigned char *b = malloc(n ? n : 1);
    FILE *f = fopen(path, "rb");
    if (!b || !f || fread(b, 1, n, f) != n) {
        fprintf(stderr, "cannot read %zu bytes from %s\n", n, path);
        exit(1);
    }
    fclose(f);
    return b;
}

static void write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static int fail(const vt_err *e) {
    fprintf(stderr, "error: %s\n", e->msg);
    return 1;
}

int main(int argc, char **argv) {
    vt_err e = {0};
    vt_rng rng;
    const unsigned char fill[3] = {124, 116, 104};
    if (argc == 14 && !strcmp(argv[1], "resize")) {
        vt_image im = {atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), NULL};
        im.pix = read_all(argv[2], (size_t)im.w * im.h * im.chans);
        const int ow = atoi(argv[11]), oh = atoi(argv[12]);
        unsigned char *out = malloc((size_t)ow * oh * im.chans);
        if (vt_image_resize(&im, atoi(argv[7]), atoi(argv[8]), atoi(argv[9]), atoi(argv[10]), ow, oh,
                         (vt_interp)atoi(argv[13]), out, &e))
            return fail(&e);
        write_all(argv[3], out, (size_t)ow * oh * im.chans);
        free(out), free(im.pix);
        return 0;
    }
    if (argc == 11 && !strcmp(argv[1], "op")) {
        vt_image im = {atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), NULL};
        im.pix = read_all(argv[2], (size_t)im.w * im.h * im.chans);
        if (vt_ra_apply(&im, atoi(argv[7]), atof(argv[8]), atoi(argv[9]), atoi(argv[10]), 0.45, fill, &e))
            return fail(&e);
        write_all(argv[3], im.pix, (size_t)im.w * im.h * im.chans);
        free(im.pix);
        return 0;
    }
    if (argc == 7 && !strcmp(argv[1], "rrc")) {
        const int n = atoi(argv[3]);
        int *boxes = malloc(sizeof(int) * 4 * (size_t)n);
        const vt_tf_params p = vt_tf_deit(224);
        vt_rng_seed(&rng, strtoull(argv[6], NULL, 10));
        for (int i = 0; i < n; i++)
            if (vt_tf_rrc_box(atoi(argv[4]), atoi(argv[5]), p.scale, p.ratio, &rng, boxes + 4 * i, &e))
                return fail(&e);
        write_all(argv[2], boxes, sizeof(int) * 4 * (size_t)n);
        free(boxes);
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "ra")) {
        const int n = atoi(argv[3]);
        const vt_tf_params p = vt_tf_deit(8);
        double *rec = malloc(sizeof(double) * 10 * (size_t)n);
        unsigned char pix[8 * 8 * 3];
        vt_rng_seed(&rng, strtoull(argv[4], NULL, 10));
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < 8 * 8 * 3; j++) pix[j] = (unsigned char)(j * 7);
            vt_image im = {8, 8, 3, pix};
            vt_ra_step s[2];
            if (vt_randaugment(&im, &p, &rng, s, &e)) return fail(&e);
            for (int k = 0; k < 2; k++) {
                double *r = rec + 10 * i + 5 * k;
                r[0] = s[k].op, r[1] = s[k].applied, r[2] = s[k].magnitude, r[3] = s[k].negate, r[4] = s[k].interp;
            }
        }
        write_all(argv[2], rec, sizeof(double) * 10 * (size_t)n);
        free(rec);
        return 0;
    }
    if (argc == 7 && !strcmp(argv[1], "erase")) {
        const int n = atoi(argv[3]), H = atoi(argv[4]), W = atoi(argv[5]);
        const vt_tf_params p = vt_tf_deit(224);
        float *x = malloc(sizeof(float) * 3 * (size_t)H * W);
        int *boxes = malloc(sizeof(int) * 4 * (size_t)n);
        vt_rng_seed(&rng, strtoull(argv[6], NULL, 10));
        for (int i = 0; i < n; i++)
            if (vt_random_erasing(x, 3, H, W, &p, &rng, boxes + 4 * i, &e)) return fail(&e);
        write_all(argv[2], boxes, sizeof(int) * 4 * (size_t)n);
        free(x), free(boxes);
        return 0;
    }
    if (argc == 16 && !strcmp(argv[1], "three")) {
        vt_image im = {atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), NULL};
        im.pix = read_all(argv[2], (size_t)im.w * im.h * im.chans);
        const vt_three_step st = {atoi(argv[7]), atof(argv[8]),
                                  {atoi(argv[9]), atoi(argv[10]), atoi(argv[11]), atoi(argv[12])},
                                  {atof(argv[13]), atof(argv[14]), atof(argv[15])}};
        if (vt_three_apply(&im, &st, &e)) return fail(&e);
        write_all(argv[3], im.pix, (size_t)im.w * im.h * im.chans);
        free(im.pix);
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "threedraws")) {
        const int n = atoi(argv[3]);
        vt_image im = {16, 16, 3, calloc(16 * 16 * 3, 1)};
        double *rec = malloc(sizeof(double) * 9 * (size_t)n);
        vt_rng_seed(&rng, strtoull(argv[4], NULL, 10));
        for (int i = 0; i < n; i++) {
            vt_three_step st;
            if (vt_three_augment(&im, &rng, &st, &e)) return fail(&e);
            double *r = rec + 9 * (size_t)i;
            r[0] = st.choice, r[1] = st.sigma;
            for (int k = 0; k < 4; k++) r[2 + k] = st.order[k];
            for (int k = 0; k < 3; k++) r[6 + k] = st.factor[k];
        }
        write_all(argv[2], rec, sizeof(double) * 9 * (size_t)n);
        free(rec), free(im.pix);
        return 0;
    }
    const int three = argc >= 2 && !strcmp(argv[1], "deit3");
    if ((argc == 10 || argc == 11) && (three || !strcmp(argv[1], "deit"))) {
        vt_image im = {atoi(argv[5]), atoi(argv[6]), atoi(argv[7]), NULL};
        const int S = atoi(argv[8]), W = argc == 11 ? atoi(argv[10]) : S, C = im.chans;
        im.pix = read_all(argv[2], (size_t)im.w * im.h * C);
        vt_tf_params p = vt_tf_deit(S);
        p.width = W;
        if (three) p.ra_layers = 0, p.three = 1; /* the msf recipe's: no RandAugment */
        vt_rng_seed(&rng, strtoull(argv[9], NULL, 10));
        vt_rng replay = rng;
        float *out = malloc(sizeof(float) * (size_t)C * S * W);
        if (vt_tf_deit_train(&im, &p, &rng, out, &e)) return fail(&e);
        write_all(argv[3], out, sizeof(float) * (size_t)C * S * W);
        /* the same draws, step by step (the interpolation is fixed: no draw) */
        double log[20];
        int box[4];
        if (vt_tf_rrc_box(im.w, im.h, p.scale, p.ratio, &replay, box, &e)) return fail(&e);
        for (int k = 0; k < 4; k++) log[k] = box[k];
        log[4] = p.interp;
        log[5] = vt_rng_uniform(&replay) < p.hflip;
        unsigned char *tmp = malloc((size_t)S * W * C);
        memset(tmp, 0, (size_t)S * W * C);
        vt_image t = {W, S, C, tmp};
        vt_ra_step s[2];
        vt_three_step ts;
        if (three) { /* log[6..14]: choice sigma order[4] factor[3] */
            if (vt_three_augment(&t, &replay, &ts, &e)) return fail(&e);
            log[6] = ts.choice, log[7] = ts.sigma;
            for (int k = 0; k < 4; k++) log[8 + k] = ts.order[k];
            for (int k = 0; k < 3; k++) log[12 + k] = ts.factor[k];
            log[15] = 0;
        } else {
            if (vt_randaugment(&t, &p, &replay, s, &e)) return fail(&e);
            for (int k = 0; k < 2; k++) {
                double *r = log + 6 + 5 * k;
                r[0] = s[k].op, r[1] = s[k].applied, r[2] = s[k].magnitude, r[3] = s[k].negate, r[4] = s[k].interp;
            }
        }
        float *x = malloc(sizeof(float) * (size_t)C * S * W);
        if (vt_random_erasing(x, C, S, W, &p, &replay, box, &e)) return fail(&e);
        for (int k = 0; k < 4; k++) log[16 + k] = box[k];
        FILE *f = fopen(argv[4], "wb");
        if (!f || fwrite(log, sizeof(log), 1, f) != 1 || fwrite(x, sizeof(float) * C * S * W, 1, f) != 1 || fclose(f))
            return 1;
        free(x), free(tmp), free(out), free(im.pix);
        return 0;
    }
    fprintf(stderr, "usage: see the comment at the top of tests/reference/transforms_driver.c\n");
    return 2;
}
