/* Files: reading inputs whole (also from pipes and FIFOs), writing outputs safely: atomically (temporary file +
 * fsync + rename), never onto special files or inputs. */
#ifndef VITC_FILEIO_H
#define VITC_FILEIO_H

#include <stdio.h>
#include <sys/stat.h>

#include "vitc/error.h"

/* An output file being written: write to f, then vt_out_commit (or vt_out_abort). f's writes go through this struct
 * (it must not move while open). */
typedef struct vt_out {
    FILE *f;
    int fd;          /* the temporary file's descriptor (f writes to it) */
    int err;         /* the errno of the first write, fsync or close that failed (0: none) */
    char path[4096]; /* the target (a symlink's destination) */
    char tmp[4096];  /* the temporary file beside it */
} vt_out;

/* Checks that path may be written: not empty, not an existing non-regular file (device, FIFO, folder), and not
 * the same file as any of the ninputs paths in inputs (NULL entries skipped). */
int vt_output_check(const char *path, const char *const *inputs, int ninputs, vt_err *e);

/* 1 when output paths a and b name one file, written or not (the same device and inode, or the same folder and
 * name: "x.png", "./x.png" and a symlink to it are one), else 0. */
int vt_same_output(const char *a, const char *b);

/* Opens a temporary file beside path for writing (vt_output_check applies; an existing symlink's destination is the
 * target), named .vitc-HOST-PID-XXXXXX after the writing machine and process (vt_temp_prefix). */
int vt_out_open(vt_out *o, const char *path, vt_err *e);

/* The name a temporary file of this process starts with: ".vitc-HOST-PID" (HOST: up to 16 letters and digits of the
 * node name), into buf (n bytes). */
void vt_temp_prefix(char *buf, size_t n);

/* The folder of path into dir (n bytes): "." when path names none, "/" for a file at the root. */
void vt_path_dir(const char *path, char *dir, size_t n);

/* Removes the temporary files in dir whose writing process on this machine has ended (killed between vt_out_open and
 * the commit; names without a HOST, from before 2026-12-02, count as this machine's); returns how many. Another
 * machine's (a folder shared over the network) are never judged, nor a living writer's (a training run's folder is
 * cleaned under its lock, an output's folder before the command writes there). */
int vt_remove_stale_temps(const char *dir);

/* Flushes, fsyncs and renames the temporary file over the target; on any error the target is unchanged. */
int vt_out_commit(vt_out *o, vt_err *e);

/* Closes and removes the temporary file (no-op after a commit). */
void vt_out_abort(vt_out *o);

/* Writes text to path atomically. */
int vt_write_text(const char *path, const char *text, vt_err *e);

/* Copies the regular file src to dst atomically (whole, read into memory). */
int vt_copy_file(const char *src, const char *dst, vt_err *e);

/* Opens path for reading without blocking on a FIFO that has no writer, its fstat into st (reads block as usual);
 * a folder, or with `regular` anything but a regular file, is refused: the descriptor, or -1 with the reason in e. */
int vt_open_read(const char *path, int regular, struct stat *st, vt_err *e);

/* Reads the whole file at path (a regular file, a pipe or a FIFO; opening never blocks on a FIFO without a writer)
 * into a new malloc'd buffer (free with free()); more than max bytes, a folder or a read error is an error. */
int vt_read_file(const char *path, size_t max, unsigned char **buf, size_t *n, vt_err *e);

/* How many bytes a file holds in all, as far as its first len bytes b tell (b is NULL when len is 0); at most len
 * when they tell no more (the reading stops there). */
typedef size_t (*vt_size_fn)(const unsigned char *b, size_t len, void *arg);

/* vt_read_file, but a stream (a pipe, a FIFO, a character device such as /dev/zero) is read only as far as size
 * says its content ends, asked again each time that far is read (NULL: to the end); regular files are read whole. */
int vt_read_sized(const char *path, size_t max, vt_size_fn size, void *arg, unsigned char **buf, size_t *n,
                  vt_err *e);

#endif
