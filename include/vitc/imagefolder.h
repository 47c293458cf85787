/* Image-folder datasets with torchvision ImageFolder semantics: DIR/train/<class>/... and DIR/val/<class>/...;
 * classes are the sorted names of train's subfolders (index = position), files are found recursively in each class
 * folder and sorted (os.walk order), extensions are torchvision's IMG_EXTENSIONS that vitc decodes (.jpg .jpeg .png
 * .ppm .bmp .pgm), case-insensitive. */
#ifndef VITC_IMAGEFOLDER_H
#define VITC_IMAGEFOLDER_H

#include "vitc/error.h"
#include "vitc/loader.h"

/* One split of an image folder: n image paths and their labels, and the class names. */
typedef struct vt_imagefolder {
    int nclasses;
    char **classes; /* nclasses names (the train split's) */
    int n;
    char **paths;   /* n file paths */
    int *labels;    /* n labels < nclasses */
    int unread;     /* files left out that torchvision's ImageFolder would read (.tif .tiff .webp) */
} vt_imagefolder;

/* Scans dir/train and dir/val into train and val (val uses train's class indices). Errors name the folder: a missing
 * train/ or val/, no class folder, a class folder without images, a val class that train lacks, a folder reached a
 * second time through symlinks (both paths named). */
int vt_imagefolder_open(const char *dir, vt_imagefolder *train, vt_imagefolder *val, vt_err *e);

/* Scans one split folder (e.g. dir/val) with the classes of `classes` (NULL: its own sorted subfolders); class folder
 * names with control characters are refused. */
int vt_imagefolder_scan(const char *split_dir, const vt_imagefolder *classes, vt_imagefolder *out, vt_err *e);

/* Writes the class index map as JSON {"0": "name0", "1": ...} to path atomically. */
int vt_imagefolder_write_classes(const vt_imagefolder *f, const char *path, vt_err *e);

/* Reads a class index map written by vt_imagefolder_write_classes into names (n malloc'd strings; free with
 * vt_classes_free): one JSON object and nothing after it, keys 0..n-1 once each, names distinct, not empty, without
 * control characters. */
int vt_classes_read(const char *path, char ***names, int *n, vt_err *e);

/* Frees names from vt_classes_read. */
void vt_classes_free(char **names, int n);

/* The class names of the run that wrote the weights file `weights`: W.classes.json for W.safetensors (written by
 * `vitc deploy` beside the deployed file), else classes.json beside it (a vitc train run folder holds one); its path
 * into path (n bytes). 1 with names (K of them; free with vt_classes_free) when it names K classes; 0 when there is
 * none; -1 when it is not used, e.g. unreadable or of another count (the reason in e). */
int vt_classes_beside(const char *weights, int K, char ***names, char *path, size_t n, vt_err *e);

/* The file vt_classes_beside reads for weights file `weights`, into path (n bytes): 1 when there is one, 0 when none,
 * -1 when it cannot be told (the reason in e). */
int vt_classes_beside_path(const char *weights, char *path, size_t n, vt_err *e);

/* W.classes.json for weights W.safetensors (W.classes.json beside any other name) into path (n bytes); -1 if it does
 * not fit. */
int vt_classes_sidecar(const char *weights, char *path, size_t n);

/* A source reading and decoding f's files on demand (f must outlive it); errors name the file. */
vt_source vt_source_imagefolder(const vt_imagefolder *f);

/* Frees f's arrays and zeroes it (a zeroed f is fine). */
void vt_imagefolder_free(vt_imagefolder *f);

#endif
