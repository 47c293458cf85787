/* The fault-injection tests' shared fixture (faults.h). */
#include "faults.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stb_image_write.h>

int vt_faults_folder(const char *dir, char *data, size_t n) {
    char p[512];
    snprintf(data, n, "%s/data", dir);
    static const char *const sub[] = {"", "/train", "/val", "/train/a", "/train/b", "/val/a", "/val/b"};
    for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++) {
        snprintf(p, sizeof p, "%s%s", data, sub[i]);
        if (mkdir(p, 0755) != 0) return -1;
    }
    unsigned char px[28 * 28];
    for (int i = 0; i < 12; i++) { /* 4 + 4 training images, 2 + 2 validation images */
        for (int j = 0; j < 28 * 28; j++) px[j] = (unsigned char)((j * (i + 3) + (i % 2) * 128) % 256);
        snprintf(p, sizeof p, "%s/%s/%c/%d.png", data, i < 8 ? "train" : "val", i % 2 ? 'b' : 'a', i);
        if (!stbi_write_png(p, 28, 28, 1, px, 28)) return -1;
    }
    return 0;
}

int vt_faults_run(const char *data, const char *run, vt_model_cfg *c, vt_train_opts *o, vt_err *e) {
    vt_model_overrides ov = vt_model_no_overrides();
    ov.num_classes = 2;
    if (vt_model_configure(vt_model_find("vit_fmnist_tiny"), &ov, c, e)) return -1;
    vt_train_defaults(o);
    o->data = data;
    o->run_dir = run;
    o->epochs = 1;
    o->batch = 4;
    o->warmup_epochs = 0;
    o->workers = 2;
    o->overwrite = 1;
    return 0;
}

void vt_faults_quiet(int on, int saved[2]) {
    fflush(stdout);
    fflush(stderr);
    if (on) {
        const int null = open("/dev/null", O_WRONLY);
        saved[0] = dup(1);
        saved[1] = dup(2);
        dup2(null, 1);
        dup2(null, 2);
        close(null);
    } else {
        dup2(saved[0], 1);
        dup2(saved[1], 2);
        close(saved[0]);
        close(saved[1]);
    }
}
