/* DeiT train transforms: knob checks and their messages, shapes and edge cases (1×1 and 2×2 images, every op, one
 * channel), identities (flip twice, resize to the same size, magnitude 0), determinism of the composed transform,
 * draws skipped when a stage is off, and bad arguments. Pixel values against PIL/torchvision and the draws'
 * statistics are in tests/reference/test_transforms.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vitc/transforms.h"

static void fill_pattern(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 37u + seed * 101u + (i * i) % 13u) & 255u);
}

static void check_params(vt_test *T) {
    vt_err e = {0};
    const vt_tf_params d = vt_tf_deit(224);
    T_CHECK(T, vt_tf_params_check(&d, &e) == 0, "%s", e.msg);
    char buf[1024];
    vt_tf_params_format(&d, buf, sizeof buf);
    T_CHECK(T, strstr(buf, "size=224") && strstr(buf, "randaugment=rand-m9-mstd0.5-inc1") &&
                   strstr(buf, "interpolation=bicubic") && strstr(buf, "reprob=0.25") &&
                   strstr(buf, "fill=124,116,104"),
            "%s", buf);
    struct {
        const char *word;
        vt_tf_params p;
    } bad[10];
    for (int i = 0; i < 10; i++) bad[i].p = d;
    bad[0].word = "size", bad[0].p.size = 0;
    bad[1].word = "scale", bad[1].p.scale[0] = 0.0f;
    bad[2].word = "ratio", bad[2].p.ratio[1] = 0.5f;
    bad[3].word = "interpolation", bad[3].p.ra_interp = 1;
    bad[4].word = "probabilities", bad[4].p.hflip = 1.5f;
    bad[5].word = "magnitude", bad[5].p.ra_magnitude = 11.0f;
    bad[6].word = "translate_pct", bad[6].p.translate_pct = NAN;
    bad[7].word = "normalisation", bad[7].p.std[2] = 0.0f;
    bad[8].word = "erasing", bad[8].p.re_min_area = 0.5f;
    bad[9].word = "layers", bad[9].p.ra_layers = 17;
    for (int i = 0; i < 10; i++) {
        vt_clearerr(&e);
        T_CHECK(T, vt_tf_params_check(&bad[i].p, &e) == -1 && strstr(e.msg, bad[i].word), "%s: %s", bad[i].word,
                e.msg);
    }
}

static void check_resize(vt_test *T) {
    vt_err e = {0};
    unsigned char pix[9 * 7 * 3], out[40 * 40 * 3];
    fill_pattern(pix, sizeof pix, 1);
    vt_image im = {9, 7, 3, pix};
    /* the same size: PIL's weights are exactly one at the centre */
    T_CHECK(T, vt_image_resize(&im, 0, 0, 9, 7, 9, 7, VT_INTERP_BICUBIC, out, &e) == 0, "%s", e.msg);
    T_CHECK(T, memcmp(out, pix, sizeof pix) == 0, "9x7 -> 9x7 is not the identity");
    /* a constant image stays constant at any scale (normalised weights) */
    unsigned char flat[5 * 3 * 3];
    memset(flat, 77, sizeof flat);
    vt_image fl = {5, 3, 3, flat};
    for (int f = VT_INTERP_BILINEAR; f <= VT_INTERP_BICUBIC; f++) {
        T_CHECK(T, vt_image_resize(&fl, 1, 0, 3, 3, 40, 40, (vt_interp)f, out, &e) == 0, "%s", e.msg);
        int same = 1;
        for (int i = 0; i < 40 * 40 * 3; i++) same &= out[i] == 77;
        T_CHECK(T, same, "constant image changed by filter %d", f);
    }
    /* a 1×1 crop */
    T_CHECK(T, vt_image_resize(&im, 8, 6, 1, 1, 3, 2, VT_INTERP_BICUBIC, out, &e) == 0, "%s", e.msg);
    const unsigned char *last = pix + (6 * 9 + 8) * 3;
    T_CHECK(T, out[0] == last[0] && out[5 * 3 + 2] == last[2], "1x1 crop not replicated");
    /* bad arguments */
    const int boxes[4][4] = {{-1, 0, 2, 2}, {0, 0, 10, 7}, {8, 6, 2, 1}, {0, 0, 0, 3}};
    for (int i = 0; i < 4; i++) {
        vt_clearerr(&e);
        T_CHECK(T, vt_image_resize(&im, boxes[i][0], boxes[i][1], boxes[i][2], boxes[i][3], 4, 4, VT_INTERP_BICUBIC, out,
                                &e) == -1 && strstr(e.msg, "not inside"),
                "box %d: %s", i, e.msg);
    }
    vt_clearerr(&e);
    T_CHECK(T, vt_image_resize(&im, 0, 0, 9, 7, 0, 4, VT_INTERP_BICUBIC, out, &e) == -1 && strstr(e.msg, "target"),
            "%s", e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_image_resize(&im, 0, 0, 9, 7, 4, 4, VT_INTERP_RANDOM, out, &e) == -1 && strstr(e.msg, "filter"), "%s",
            e.msg);
    vt_image two = {3, 3, 2, pix};
    vt_clearerr(&e);
    T_CHECK(T, vt_image_resize(&two, 0, 0, 3, 3, 4, 4, VT_INTERP_BICUBIC, out, &e) == -1 && strstr(e.msg, "channels"),
            "%s", e.msg);
}

static void check_crop_flip(vt_test *T) {
    vt_err e = {0};
    vt_rng r;
    vt_rng_seed(&r, 3);
    const vt_tf_params p = vt_tf_deit(224);
    int box[4];
    for (int i = 0; i < 200; i++) { /* tiny and elongated images: boxes stay inside, never empty */
        const int w = 1 + i % 7, h = 1 + (i * 5) % 300;
        T_CHECK(T, vt_tf_rrc_box(w, h, p.scale, p.ratio, &r, box, &e) == 0, "%s", e.msg);
        T_CHECK(T, box[0] >= 0 && box[1] >= 0 && box[2] >= 1 && box[3] >= 1 && box[0] + box[2] <= w &&
                       box[1] + box[3] <= h,
                "%dx%d: box %d %d %d %d", w, h, box[0], box[1], box[2], box[3]);
    }
    /* torchvision's fallback: a 5×1000 image no attempt fits (any box of area >= 0.08·5000 and aspect <= 4/3 is
     * wider than 5), so after its 10 attempts (two draws each: area, log-ratio) the centre crop of the full width,
     * height round(5 / (3/4)) = round(6.67) = 7, at row (1000 - 7) // 2 = 496; likewise 1000×5: width
     * round(5 · 4/3) = 7 at column 496 */
    vt_rng_seed(&r, 11);
    vt_rng twenty = r;
    for (int i = 0; i < 20; i++) vt_rng_uniform(&twenty);
    T_CHECK(T, vt_tf_rrc_box(5, 1000, p.scale, p.ratio, &r, box, &e) == 0 && box[0] == 0 && box[1] == 496 &&
                   box[2] == 5 && box[3] == 7,
            "5×1000 fallback box %d %d %d %d, want 0 496 5 7", box[0], box[1], box[2], box[3]);
    T_CHECK(T, vt_rng_u64(&r) == vt_rng_u64(&twenty), "the fallback follows exactly 10 attempts of two draws");
    T_CHECK(T, vt_tf_rrc_box(1000, 5, p.scale, p.ratio, &r, box, &e) == 0 && box[0] == 496 && box[1] == 0 &&
                   box[2] == 7 && box[3] == 5,
            "1000×5 fallback box %d %d %d %d, want 496 0 7 5", box[0], box[1], box[2], box[3]);
    vt_clearerr(&e);
    T_CHECK(T, vt_tf_rrc_box(0, 5, p.scale, p.ratio, &r, box, &e) == -1 && strstr(e.msg, "0×5"), "%s", e.msg);
    const float bad_scale[2] = {0.5f, 0.1f};
    vt_clearerr(&e);
    T_CHECK(T, vt_tf_rrc_box(5, 5, bad_scale, p.ratio, &r, box, &e) == -1 && strstr(e.msg, "scale"), "%s", e.msg);
    unsigned char pix[5 * 2 * 3], ref[5 * 2 * 3];
    fill_pattern(pix, sizeof pix, 2);
    memcpy(ref, pix, sizeof pix);
    vt_image im = {5, 2, 3, pix};
    vt_tf_hflip(&im);
    T_CHECK(T, pix[0] == ref[4 * 3] && pix[2] == ref[4 * 3 + 2] && pix[6] == ref[6] && pix[5 * 3] == ref[9 * 3],
            "flip moved the wrong pixels");
    vt_tf_hflip(&im);
    T_CHECK(T, memcmp(pix, ref, sizeof pix) == 0, "flip twice is not the identity");
}

static void check_ops(vt_test *T) {
    vt_err e = {0};
    const unsigned char fill[3] = {124, 116, 104};
    /* every op on 1×1, 2×2, 2×5, 1-channel and 3-channel images, at magnitudes 0, 5, 10, both signs: no failure */
    const int sizes[3][2] = {{1, 1}, {2, 2}, {2, 5}};
    unsigned char pix[2 * 5 * 3], ref[2 * 5 * 3];
    for (int s = 0; s < 3; s++)
        for (int C = 1; C <= 3; C += 2)
            for (int op = 0; op < VT_RA_NUM_OPS; op++)
                for (int m = 0; m <= 10; m += 5)
                    for (int neg = 0; neg < 2; neg++) {
                        fill_pattern(pix, sizeof pix, (unsigned)(op + m));
                        vt_image im = {sizes[s][0], sizes[s][1], C, pix};
                        T_CHECK(T, vt_ra_apply(&im, op, m, neg, VT_INTERP_BILINEAR, 0.45, fill, &e) == 0,
                                "op %d %dx%dx%d: %s", op, im.w, im.h, C, e.msg);
                    }
    /* magnitude 0 leaves geometric and enhancement ops without effect; invert twice is the identity */
    const int noop[] = {VT_RA_ROTATE,     VT_RA_SOLARIZE_ADD,  VT_RA_COLOR_INC,       VT_RA_CONTRAST_INC,
                        VT_RA_SHEAR_X,    VT_RA_SHEAR_Y,       VT_RA_BRIGHTNESS_INC,  VT_RA_SHARPNESS_INC,
                        VT_RA_SHEAR_X,    VT_RA_TRANSLATE_X_REL, VT_RA_TRANSLATE_Y_REL};
    for (size_t i = 0; i < sizeof noop / sizeof noop[0]; i++) {
        fill_pattern(pix, sizeof pix, 5);
        memcpy(ref, pix, sizeof pix);
        vt_image im = {5, 2, 3, pix};
        T_CHECK(T, vt_ra_apply(&im, noop[i], 0.0, 1, VT_INTERP_BICUBIC, 0.45, fill, &e) == 0, "%s", e.msg);
        T_CHECK(T, memcmp(pix, ref, sizeof pix) == 0, "op %d at magnitude 0 changed the image", noop[i]);
    }
    fill_pattern(pix, sizeof pix, 6);
    memcpy(ref, pix, sizeof pix);
    vt_image im = {5, 2, 3, pix};
    vt_ra_apply(&im, VT_RA_INVERT, 3.0, 0, 0, 0.45, fill, &e);
    T_CHECK(T, pix[0] == 255 - ref[0], "invert");
    vt_ra_apply(&im, VT_RA_INVERT, 3.0, 0, 0, 0.45, fill, &e);
    T_CHECK(T, memcmp(pix, ref, sizeof pix) == 0, "invert twice is not the identity");
    /* a full translation leaves only the fill colour */
    vt_ra_apply(&im, VT_RA_TRANSLATE_X_REL, 10.0, 0, VT_INTERP_BICUBIC, 1.0, fill, &e);
    T_CHECK(T, pix[0] == 124 && pix[1] == 116 && pix[2] == 104 && pix[29] == 104, "translate by the width: %d %d %d",
            pix[0], pix[1], pix[2]);
    /* bad arguments */
    vt_clearerr(&e);
    T_CHECK(T, vt_ra_apply(&im, VT_RA_NUM_OPS, 5.0, 0, 2, 0.45, fill, &e) == -1 && strstr(e.msg, "op 15"), "%s",
            e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_ra_apply(&im, VT_RA_ROTATE, 10.5, 0, 2, 0.45, fill, &e) == -1 && strstr(e.msg, "magnitude"), "%s",
            e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_ra_apply(&im, VT_RA_ROTATE, NAN, 0, 2, 0.45, fill, &e) == -1 && strstr(e.msg, "magnitude"), "%s",
            e.msg);
    vt_clearerr(&e);
    T_CHECK(T, vt_ra_apply(&im, VT_RA_SHEAR_X, 5.0, 0, VT_INTERP_RANDOM, 0.45, fill, &e) == -1 &&
                   strstr(e.msg, "filter"),
            "%s", e.msg);
    vt_image none = {5, 2, 3, NULL};
    vt_clearerr(&e);
    T_CHECK(T, vt_ra_apply(&none, VT_RA_INVERT, 5.0, 0, 2, 0.45, fill, &e) == -1 && strstr(e.msg, "bad image"), "%s",
            e.msg);
}

static void check_randaugment_erasing(vt_test *T) {
    vt_err e = {0};
    vt_tf_params p = vt_tf_deit(16);
    vt_rng r, r0;
    vt_rng_seed(&r, 9);
    unsigned char pix[16 * 16 * 3], ref[16 * 16 * 3];
    fill_pattern(pix, sizeof pix, 7);
    memcpy(ref, pix, sizeof pix);
    vt_image im = {16, 16, 3, pix};
    /* no layers: no draws, no change */
    p.ra_layers = 0;
    r0 = r;
    T_CHECK(T, vt_randaugment(&im, &p, &r, NULL, &e) == 0, "%s", e.msg);
    T_CHECK(T, memcmp(&r, &r0, sizeof r) == 0 && memcmp(pix, ref, sizeof pix) == 0, "0 layers drew or changed");
    /* prob 1, no noise: every op applied at exactly the magnitude */
    p.ra_layers = 4, p.ra_prob = 1.0f, p.ra_mstd = 0.0f, p.ra_interp = VT_INTERP_RANDOM;
    vt_ra_step st[4];
    T_CHECK(T, vt_randaugment(&im, &p, &r, st, &e) == 0, "%s", e.msg);
    for (int i = 0; i < 4; i++)
        T_CHECK(T, st[i].applied && st[i].magnitude == 9.0 && st[i].op >= 0 && st[i].op < VT_RA_NUM_OPS,
                "step %d: op %d applied %d magnitude %g", i, st[i].op, st[i].applied, st[i].magnitude);
    /* erasing: probability 0 leaves x alone, 1 always erases a box inside */
    float x[3 * 16 * 16], x0[3 * 16 * 16];
    for (int i = 0; i < 3 * 16 * 16; i++) x[i] = x0[i] = (float)i;
    int box[4];
    p.re_prob = 0.0f;
    T_CHECK(T, vt_random_erasing(x, 3, 16, 16, &p, &r, box, &e) == 0, "%s", e.msg);
    T_CHECK(T, memcmp(x, x0, sizeof x) == 0 && box[2] == 0, "probability 0 erased");
    p.re_prob = 1.0f;
    for (int k = 0; k < 50; k++) {
        T_CHECK(T, vt_random_erasing(x, 3, 16, 16, &p, &r, box, &e) == 0, "%s", e.msg);
        T_CHECK(T, box[2] >= 1 && box[3] >= 1 && box[0] + box[2] <= 16 && box[1] + box[3] <= 16, "box %d %d %d %d",
                box[0], box[1], box[2], box[3]);
    }
    /* mode pixel: the box holds standard normal values (timm's torch.empty(...).normal_()), per channel and pixel, and
     * nothing outside it changes: a quarter of a 3×64×64 zero image at aspect 1, one 32×32 box */
    static float z[3 * 64 * 64];
    memset(z, 0, sizeof z);
    vt_tf_params q1 = p;
    q1.re_min_area = q1.re_max_area = 0.25f, q1.re_min_aspect = 1.0f, q1.re_count = 1;
    T_CHECK(T, vt_random_erasing(z, 3, 64, 64, &q1, &r, box, &e) == 0 && box[2] == 32 && box[3] == 32, "box %d×%d",
            box[2], box[3]);
    double zs = 0, zs2 = 0;
    int outside = 0, inside = 0;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 64; y++)
            for (int xx = 0; xx < 64; xx++) {
                const float v = z[(c * 64 + y) * 64 + xx];
                if (xx >= box[0] && xx < box[0] + 32 && y >= box[1] && y < box[1] + 32)
                    zs += v, zs2 += (double)v * v, inside++;
                else
                    outside += v != 0.0f;
            }
    const double zm = zs / inside, zsd = sqrt(zs2 / inside - zm * zm);
    T_CHECK(T, outside == 0 && fabs(zm) < 0.1 && fabs(zsd - 1.0) < 0.1,
            "erased values: mean %g, std %g over %d (want N(0, 1)); %d changed outside", zm, zsd, inside, outside);
    /* timm's RandomErasing keeps a box only when w < img_w and h < img_h: an area of exactly the image at aspect 1
     * is the whole 16×16, so all 10 attempts fail and nothing is erased */
    vt_tf_params q = p;
    q.re_min_area = q.re_max_area = 1.0f, q.re_min_aspect = 1.0f;
    memcpy(x, x0, sizeof x);
    T_CHECK(T, vt_random_erasing(x, 3, 16, 16, &q, &r, box, &e) == 0 && box[2] == 0 && memcmp(x, x0, sizeof x) == 0,
            "a box as large as the image erased: %d×%d", box[2], box[3]);
    /* re_count 2: timm draws randint(1, 2) boxes, which share the area (target area·uniform(min, max)/count): a
     * quarter of 16×16 is one 8×8 box, or two of 32 pixels at aspect 1, round(sqrt(32)) = 6 a side */
    q.re_min_area = q.re_max_area = 0.25f, q.re_count = 2;
    int one = 0, two = 0, other = 0;
    for (int k = 0; k < 200; k++) {
        if (vt_random_erasing(x, 3, 16, 16, &q, &r, box, &e) != 0) other++;
        one += box[2] == 8 && box[3] == 8, two += box[2] == 6 && box[3] == 6;
    }
    other += 200 - one - two;
    T_CHECK(T, other == 0 && one > 60 && two > 60, "re_count 2: %d one-box draws, %d two-box, %d other", one, two,
            other);
    vt_clearerr(&e);
    T_CHECK(T, vt_random_erasing(x, 3, 0, 16, &p, &r, box, &e) == -1 && strstr(e.msg, "erasing"), "%s", e.msg);
}

static void check_composed(vt_test *T) {
    vt_err e = {0};
    const vt_tf_params p = vt_tf_deit(24);
    const int W = 41, H = 30;
    unsigned char pix[41 * 30 * 3];
    fill_pattern(pix, sizeof pix, 8);
    const vt_image im = {W, H, 3, pix};
    float *a = malloc(sizeof(float) * 3 * 24 * 24), *b = malloc(sizeof(float) * 3 * 24 * 24);
    vt_rng r1, r2;
    vt_rng_seed(&r1, 42);
    vt_rng_seed(&r2, 42);
    T_CHECK(T, vt_tf_deit_train(&im, &p, &r1, a, &e) == 0, "%s", e.msg);
    T_CHECK(T, vt_tf_deit_train(&im, &p, &r2, b, &e) == 0, "%s", e.msg);
    T_CHECK(T, memcmp(a, b, sizeof(float) * 3 * 24 * 24) == 0, "same seed, different outputs");
    int finite = 1;
    for (int i = 0; i < 3 * 24 * 24; i++) finite &= isfinite(a[i]);
    T_CHECK(T, finite, "non-finite output");
    T_CHECK(T, vt_tf_deit_train(&im, &p, &r1, b, &e) == 0, "%s", e.msg);
    T_CHECK(T, memcmp(a, b, sizeof(float) * 3 * 24 * 24) != 0, "the next draw gave the same output");
    /* one channel, a 1×1 image */
    unsigned char one = 200;
    const vt_image tiny = {1, 1, 1, &one};
    T_CHECK(T, vt_tf_deit_train(&tiny, &p, &r1, a, &e) == 0, "%s", e.msg);
    /* everything random off: resize + normalise only, exact against vt_image_resize */
    vt_tf_params q = p;
    q.scale[0] = q.scale[1] = 1.0f, q.ratio[0] = q.ratio[1] = (float)W / H, q.hflip = 0.0f, q.ra_layers = 0,
    q.re_prob = 0.0f;
    unsigned char res[24 * 24 * 3];
    T_CHECK(T, vt_image_resize(&im, 0, 0, W, H, 24, 24, VT_INTERP_BICUBIC, res, &e) == 0, "%s", e.msg);
    T_CHECK(T, vt_tf_deit_train(&im, &q, &r1, a, &e) == 0, "%s", e.msg);
    double err = 0;
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 24 * 24; i++)
            err = t_worse(err, fabs(a[c * 576 + i] - ((float)res[i * 3 + c] / 255.0f - q.mean[c]) / q.std[c]));
    T_CHECK(T, err == 0.0, "plain resize + normalise differs by %g", err);
    /* bad input */
    const vt_image two = {4, 4, 2, pix};
    vt_clearerr(&e);
    T_CHECK(T, vt_tf_deit_train(&two, &p, &r1, a, &e) == -1 && strstr(e.msg, "2 channels"), "%s", e.msg);
    q = p;
    q.size = -3;
    vt_clearerr(&e);
    T_CHECK(T, vt_tf_deit_train(&im, &q, &r1, a, &e) == -1 && strstr(e.msg, "size -3"), "%s", e.msg);
    free(a), free(b);
}

/* The three-augment (values against torchvision: tests/reference/test_transforms.py): the blur keeps a constant image
 * constant at every size, the reflection wrapping around sides shorter than its radius (1×1, 2×3, 5×4); solarize with
 * unit jitter inverts exactly the values >= 128; grayscale of an RGB image sets its channels equal; random draws run
 * on those sizes, 1 and 3 channels. */
static void check_three(vt_test *T) {
    vt_err e = {0};
    const int sizes[3][2] = {{1, 1}, {2, 3}, {5, 4}};
    int ok = 1, runs = 0;
    for (int k = 0; k < 3; k++)
        for (int C = 1; C <= 3; C += 2) {
            const int W = sizes[k][0], H = sizes[k][1];
            unsigned char pix[5 * 4 * 3];
            vt_image im = {W, H, C, pix};
            memset(pix, 77, sizeof pix);
            const vt_three_step blur = {2, 1.7, {3, 0, 1, 2}, {1.0, 1.0, 1.0}};
            ok &= vt_three_apply(&im, &blur, &e) == 0;
            for (int i = 0; i < W * H * C; i++) ok &= pix[i] == 77;
            vt_rng r;
            vt_rng_seed(&r, (uint64_t)(k * 4 + C));
            for (int j = 0; j < 40; j++, runs++) ok &= vt_three_augment(&im, &r, NULL, &e) == 0;
        }
    T_CHECK(T, ok, "three-augment: a constant image stays constant under the blur, %d draws ran: %s", runs, e.msg);
    unsigned char px[6] = {0, 127, 128, 200, 255, 30};
    vt_image im = {2, 1, 3, px};
    const vt_three_step sol = {1, 1.0, {0, 1, 2, 3}, {1.0, 1.0, 1.0}};
    T_CHECK(T, vt_three_apply(&im, &sol, &e) == 0 && px[0] == 0 && px[1] == 127 && px[2] == 127 && px[3] == 55 &&
                   px[4] == 0 && px[5] == 30,
            "solarize 128: %d %d %d %d %d %d", px[0], px[1], px[2], px[3], px[4], px[5]);
    const vt_three_step gray = {0, 1.0, {0, 1, 2, 3}, {1.0, 1.0, 1.0}};
    T_CHECK(T, vt_three_apply(&im, &gray, &e) == 0 && px[0] == px[1] && px[1] == px[2] && px[3] == px[4] &&
                   px[4] == px[5], "grayscale: channels equal");
    const vt_three_step bad = {3, 1.0, {0, 1, 2, 3}, {1.0, 1.0, 1.0}};
    T_CHECK(T, vt_three_apply(&im, &bad, &e) != 0 && strstr(e.msg, "choice 3"), "a bad choice refused: %s", e.msg);
}

void test_transforms(vt_test *T) {
    check_three(T);
    check_params(T);
    check_resize(T);
    check_crop_flip(T);
    check_ops(T);
    check_randaugment_erasing(T);
    check_composed(T);
}
