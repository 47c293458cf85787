/* classify: the top-5 classes of image files with a vitc model, through the installed library's public API only.
 *
 *   cc classify.c -o classify $(pkg-config --cflags --libs vitc)
 *   ./classify deit_tiny_patch16_224 deit_tiny.safetensors cat.png dog.jpg
 *
 * Prints what `vitc predict MODEL --weights W IMAGE...` prints; exit status 1 when an image could not be read. */
#include <stdio.h>
#include <stdlib.h>

#include <vitc/vitc.h>

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL WEIGHTS.safetensors IMAGE...\n(libvitc %s)\n", argv[0], vitc_version());
        return 2;
    }
    const int n = argc - 3, k = 5;
    vitc_error err;
    vitc_options opt;
    vitc_options_init(&opt);
    opt.threads = 0; /* 0: OMP_NUM_THREADS or every core */

    vitc_model *m = vitc_open(argv[1], argv[2], &opt, &err);
    if (!m) {
        fprintf(stderr, "classify: %s\n", err.msg);
        return err.code == VITC_E_MODEL || err.code == VITC_E_ARGUMENT ? 2 : 1; /* 2: usage, as `vitc` */
    }
    vitc_result *res = calloc((size_t)n, sizeof *res);
    if (!res) {
        vitc_close(m);
        return 1;
    }
    const int bad = vitc_classify_files(m, (const char *const *)(argv + 3), n, k, res, &err);
    if (bad < 0) fprintf(stderr, "classify: %s\n", err.msg);
    for (int i = 0; bad >= 0 && i < n; i++) {
        if (!res[i].ok) {
            fprintf(stderr, "classify: %s\n", res[i].error);
            continue;
        }
        printf("%s\n", argv[3 + i]);
        for (int j = 0; j < res[i].k; j++) {
            const char *label = res[i].label[j] ? res[i].label[j] : "";
            int cols = 0; /* padded to 12 characters, not UTF-8 bytes, as `vitc predict` pads */
            for (const unsigned char *q = (const unsigned char *)label; *q; q++) cols += (*q & 0xC0) != 0x80;
            printf("  %d. class %-5d %s%*s %7.3f%%\n", j + 1, res[i].index[j], label, cols < 12 ? 12 - cols : 0, "",
                   100.0 * res[i].prob[j]);
        }
    }
    free(res);
    vitc_close(m);
    if (fflush(stdout) != 0 || ferror(stdout)) { /* results redirected to a full disk: not lost silently */
        fprintf(stderr, "classify: error writing standard output\n");
        return 1;
    }
    return bad != 0;
}
