/* Fashion-MNIST reader: IDX3 (images) and IDX1 (labels) uint8 files, gzip-compressed or plain, read with zlib. */
#include "vitc/dataset.h"
#include "vitc/fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define IDX3_U8_MAGIC 0x00000803u
#define IDX1_U8_MAGIC 0x00000801u
#define MAX_COUNT 100000000
#define MAX_BYTES ((size_t)1 << 32)

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* Opens the regular file at path for gzread (gzip or plain); a FIFO or device is refused, not waited on. */
static gzFile open_gz(const char *path, vt_err *e) {
    struct stat st;
    const int fd = vt_open_read(path, 1, &st, e);
    if (fd < 0) return NULL;
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        vt_seterr_code(e, VT_E_NOMEM, "cannot open %s: out of memory", path);
    }
    return f;
}

/* Reads exactly n bytes of `what`; truncated or corrupt input gives an error naming the file. */
static int read_exact(gzFile f, void *buf, size_t n, const char *path, const char *what, vt_err *e) {
    unsigned char *p = buf;
    size_t got = 0;
    while (got < n) {
        size_t want = n - got;
        if (want > (1u << 30)) want = 1u << 30;
        int r = gzread(f, p + got, (unsigned)want);
        int zerr = Z_OK;
        const char *zmsg = gzerror(f, &zerr);
        if (zerr == Z_ERRNO) /* the system's read failed: not the data */
            return vt_seterr_code(e, VT_E_IO, "%s: cannot read %s: %s", path, what, strerror(errno));
        if (r < 0 || (zerr != Z_OK && zerr != Z_BUF_ERROR))
            return vt_seterr(e, "%s: corrupt gzip data while reading %s (zlib: %s)", path, what, zmsg);
        if (r == 0)
            return vt_seterr(e, "%s: truncated file: %s needs %zu bytes, only %zu present", path, what, n, got);
        got += (size_t)r;
    }
    return 0;
}

/* Checks that the stream ends exactly here (no extra bytes, intact gzip trailer). */
static int expect_eof(gzFile f, const char *path, const char *what, vt_err *e) {
    unsigned char c;
    int r = gzread(f, &c, 1);
    int zerr = Z_OK;
    const char *zmsg = gzerror(f, &zerr);
    if (r < 0 || (zerr != Z_OK && zerr != Z_BUF_ERROR))
        return vt_seterr(e, "%s: corrupt gzip data after %s (zlib: %s)", path, what, zmsg);
    if (zerr == Z_BUF_ERROR)
        return vt_seterr(e, "%s: truncated gzip stream after %s (zlib: %s)", path, what, zmsg);
    if (r > 0) return vt_seterr(e, "%s: unexpected trailing data after %s", path, what);
    return 0;
}

static int check_magic(uint32_t magic, uint32_t want, const char *path, const char *kind, vt_err *e) {
    if (magic == want) return 0;
    const char *hint = "";
    if (magic == IDX1_U8_MAGIC) hint = " (this is an IDX1 label file)";
    else if (magic == IDX3_U8_MAGIC) hint = " (this is an IDX3 image file)";
    else if ((magic >> 16) == 0x1f8b) hint = " (still gzip-compressed after decompression)";
    else if ((magic >> 8) == 0x000008) hint = " (IDX, but not uint8 of the expected rank)";
    return vt_seterr(e, "%s: bad magic number 0x%08x, expected 0x%08x for an %s file%s", path, (unsigned)magic,
                     (unsigned)want, kind, hint);
}

/* Loads an IDX3 uint8 image file of side × side images and an IDX1 uint8 label file (gzip or plain) with labels
 * < nclasses into ds; the image size is checked from the header, before any pixel is read. */
static int load_idx(const char *images_path, const char *labels_path, int side, int nclasses, vt_dataset *ds,
                    vt_err *e) {
    int rc = -1;
    gzFile fi = NULL, fl = NULL;
    uint8_t *img = NULL, *lab = NULL;
    unsigned char h[16];

    if (!(fi = open_gz(images_path, e))) goto done;
    if (read_exact(fi, h, 16, images_path, "the IDX3 header", e)) goto done;
    if (check_magic(be32(h), IDX3_U8_MAGIC, images_path, "IDX3 uint8 image", e)) goto done;
    uint32_t n = be32(h + 4), rows = be32(h + 8), cols = be32(h + 12);
    if (n == 0 || n > MAX_COUNT) {
        vt_seterr(e, "%s: image count %u not in [1, %d]", images_path, (unsigned)n, MAX_COUNT);
        goto done;
    }
    if (rows != (uint32_t)side || cols != (uint32_t)side) {
        vt_seterr(e, "%s: Fashion-MNIST images must be %dx%d, file has %ux%u", images_path, side, side,
                  (unsigned)rows, (unsigned)cols);
        goto done;
    }
    size_t npix;
    if (vt_mul_overflow((size_t)n, (size_t)rows * cols, &npix) || npix > MAX_BYTES) {
        vt_seterr(e, "%s: %u images of %ux%u is implausibly large", images_path, (unsigned)n, (unsigned)rows,
                  (unsigned)cols);
        goto done;
    }

    if (!(fl = open_gz(labels_path, e))) goto done;
    if (read_exact(fl, h, 8, labels_path, "the IDX1 header", e)) goto done;
    if (check_magic(be32(h), IDX1_U8_MAGIC, labels_path, "IDX1 uint8 label", e)) goto done;
    uint32_t nl = be32(h + 4);
    if (nl != n) {
        vt_seterr(e, "count mismatch: %s holds %u images but %s holds %u labels", images_path, (unsigned)n,
                  labels_path, (unsigned)nl);
        goto done;
    }

    if (!(img = vt_alloc(npix, e)) || !(lab = vt_alloc(n, e))) goto done;
    char what[96];
    snprintf(what, sizeof what, "%u images of %ux%u", (unsigned)n, (unsigned)rows, (unsigned)cols);
    if (read_exact(fi, img, npix, images_path, what, e) || expect_eof(fi, images_path, what, e)) goto done;
    snprintf(what, sizeof what, "%u labels", (unsigned)n);
    if (read_exact(fl, lab, n, labels_path, what, e) || expect_eof(fl, labels_path, what, e)) goto done;
    for (uint32_t i = 0; i < n; i++)
        if (lab[i] >= nclasses) {
            vt_seterr(e, "%s: label %u of item %u is out of range (expected < %d)", labels_path, (unsigned)lab[i],
                      (unsigned)i, nclasses);
            goto done;
        }

    ds->n = (int)n;
    ds->h = (int)rows;
    ds->w = (int)cols;
    ds->nclasses = nclasses;
    ds->images = img;
    ds->labels = lab;
    img = lab = NULL;
    rc = 0;
done:
    if (fi) gzclose(fi);
    if (fl) gzclose(fl);
    vt_free(img);
    vt_free(lab);
    return rc;
}

const char *vt_fmnist_dir(void) {
    const char *d = getenv("VITC_FMNIST_DIR");
    return d && d[0] ? d : VT_FMNIST_DEFAULT_DIR;
}

/* Builds dir/base.gz, falling back to dir/base when only the uncompressed file exists. */
static int fmnist_path(char *out, size_t len, const char *dir, const char *base, vt_err *e) {
    int k = snprintf(out, len, "%s/%s", dir, base);
    if (k < 0 || (size_t)k + 4 >= len) return vt_seterr(e, "Fashion-MNIST directory path too long: %s", dir);
    strcat(out, ".gz");
    if (access(out, F_OK) != 0) {
        out[k] = '\0';
        if (access(out, F_OK) != 0) {
            out[k] = '.';
            return vt_seterr(e,
                             "cannot find %s in %s (install the Debian package dataset-fashion-mnist, or point "
                             "VITC_FMNIST_DIR at a directory holding the IDX files)",
                             base, dir);
        }
    }
    return 0;
}

int vt_dataset_load_fmnist(const char *dir, int train, vt_dataset *ds, vt_err *e) {
    if (!ds) return vt_seterr(e, "vt_dataset_load_fmnist: NULL dataset");
    if (!dir || !dir[0]) dir = vt_fmnist_dir();
    const char *split = train ? "train" : "t10k";
    char ipath[4096], lpath[4096], base[64];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", split);
    if (fmnist_path(ipath, sizeof ipath, dir, base, e)) return -1;
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", split);
    if (fmnist_path(lpath, sizeof lpath, dir, base, e)) return -1;
    vt_dataset d = {0};
    if (load_idx(ipath, lpath, 28, 10, &d, e)) return -1;
    *ds = d;
    return 0;
}

int vt_dataset_subset(vt_dataset *ds, int k, vt_err *e) {
    if (!ds || !ds->images) return vt_seterr(e, "vt_dataset_subset: empty dataset");
    if (k < 1) return vt_seterr(e, "dataset subset size must be >= 1, got %d", k);
    if (k >= ds->n) return 0;
    size_t per = (size_t)ds->h * (size_t)ds->w;
    uint8_t *img = vt_alloc((size_t)k * per, e);
    uint8_t *lab = img ? vt_alloc((size_t)k, e) : NULL;
    if (!lab) {
        vt_free(img);
        return -1;
    }
    memcpy(img, ds->images, (size_t)k * per);
    memcpy(lab, ds->labels, (size_t)k);
    vt_free(ds->images);
    vt_free(ds->labels);
    ds->images = img;
    ds->labels = lab;
    ds->n = k;
    return 0;
}

void vt_dataset_free(vt_dataset *ds) {
    if (!ds) return;
    vt_free(ds->images);
    vt_free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

const char *vt_fmnist_class_name(int c) {
    static const char *const names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                          "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
    return c >= 0 && c < 10 ? names[c] : "?";
}
