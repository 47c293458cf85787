/* Reading input files whole (regular files, pipes, FIFOs), and output files written atomically: a temporary file beside the target (a short mkstemp name, so any legal target
 * name works), fsync'ed, then renamed over the target and the folder fsync'ed. A crash leaves the old file or the
 * new one, never a mix. Targets that exist and are not regular files (device nodes, FIFOs, folders) are refused,
 * and so is a target that is one of the command's own inputs. */
#define _GNU_SOURCE /* realpath, fopencookie */
#include "vitc/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

void vt_path_dir(const char *path, char *dir, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, n, ".");
    else if (slash == path)
        snprintf(dir, n, "/");
    else
        snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

static const char *out_target(const char *path, char *real);

int vt_output_check(const char *path, const char *const *inputs, int ninputs, vt_err *e) {
    if (!path || !path[0]) return vt_seterr(e, "empty output file name");
    struct stat st;
    char dir[4096], real[PATH_MAX];
    vt_path_dir(out_target(path, real), dir, sizeof dir); /* (a link's: the folder its file goes into) */
    if (stat(path, &st) != 0) { /* a new file: its folder must be there (checked before any work, as a full one is) */
        if (errno != ENOENT) return vt_seterr_code(e, VT_E_IO, "%s: %s", path, strerror(errno));
        struct stat sd;
        if (stat(dir, &sd) != 0)
            return vt_seterr_code(e, VT_E_IO, "cannot write %s: folder %s: %s", path, dir, strerror(errno));
        if (!S_ISDIR(sd.st_mode)) return vt_seterr(e, "cannot write %s: %s is not a folder", path, dir);
        return 0;
    }
    if (!S_ISREG(st.st_mode))
        return vt_seterr(e, "refusing to write %s: it exists and is not a regular file (%s)", path,
                         S_ISDIR(st.st_mode)   ? "a folder"
                         : S_ISCHR(st.st_mode) ? "a character device"
                         : S_ISBLK(st.st_mode) ? "a block device"
                         : S_ISFIFO(st.st_mode) ? "a FIFO"
                                                : "a special file");
    if (access(path, W_OK) != 0 && errno == EACCES) /* write-protected: the shell's `>` refuses it too */
        return vt_seterr_code(e, VT_E_IO, "refusing to write %s: it is write-protected (mode %04o); make it writable "
                              "(chmod u+w) or remove it first", path, (unsigned)(st.st_mode & 07777));
    for (int i = 0; i < ninputs; i++) {
        struct stat si;
        if (inputs[i] && stat(inputs[i], &si) == 0 && si.st_dev == st.st_dev && si.st_ino == st.st_ino)
            return vt_seterr(e, "refusing to write %s: it is the input %s (the output would destroy it)", path,
                             inputs[i]);
    }
    return 0;
}

/* The file an output path writes: a symlink's destination (the file it points to is replaced, not the link; one not
 * there yet is created, as a shell's `>` does), else path itself; real holds PATH_MAX bytes. */
static const char *out_target(const char *path, char *real) {
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode)) return path;
    if (realpath(path, real)) return real;
    char at[PATH_MAX], to[PATH_MAX], dir[PATH_MAX];
    snprintf(at, sizeof at, "%s", path);
    for (int hop = 0; hop < 40; hop++) { /* a dangling chain, followed link by link (40: the kernel's limit) */
        const ssize_t n = readlink(at, to, sizeof to - 1);
        if (n < 0) return path;
        to[n] = '\0';
        vt_path_dir(at, dir, sizeof dir);
        const int len = to[0] != '/' ? snprintf(real, PATH_MAX, "%s/%s", dir, to) : snprintf(real, PATH_MAX, "%s", to);
        if (len < 0 || len >= PATH_MAX) return path;
        if (lstat(real, &st) != 0 || !S_ISLNK(st.st_mode)) return real;
        memcpy(at, real, sizeof at);
    }
    return path;
}

int vt_same_output(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char la[PATH_MAX], lb[PATH_MAX], da[PATH_MAX], db[PATH_MAX], pa[PATH_MAX], pb[PATH_MAX];
    const char *ra = out_target(a, la), *rb = out_target(b, lb);
    const char *na = strrchr(ra, '/') ? strrchr(ra, '/') + 1 : ra, *nb = strrchr(rb, '/') ? strrchr(rb, '/') + 1 : rb;
    if (strcmp(na, nb) != 0) return 0;
    vt_path_dir(ra, da, sizeof da);
    vt_path_dir(rb, db, sizeof db);
    return realpath(da, pa) && realpath(db, pb) ? strcmp(pa, pb) == 0 : strcmp(da, db) == 0;
}

/* The mode a new file of this process gets from open(..., 0666): 0666 less the umask (read from /proc, as umask()
 * cannot be read without setting it for every thread); 0644 where /proc is not there. */
static mode_t new_file_mode(void) {
    FILE *f = fopen("/proc/self/status", "r");
    unsigned mask = 022;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Umask: %o", &mask) == 1) break;
    if (f) fclose(f);
    return (mode_t)(0666 & ~mask);
}

/* The stream's writes (fopencookie): write(2) to the temporary file, keeping the first failure's errno in o->err. stdio
 * keeps only an error flag: a large write that went past its buffer and was refused (a 64 KiB fputs on a full disk)
 * left nothing to report but EIO. Returns the bytes written, 0 on an error (the cookie interface's). */
static ssize_t out_write(void *cookie, const char *buf, size_t n) {
    vt_out *o = cookie;
    size_t done = 0;
    while (done < n) {
        const ssize_t w = write(o->fd, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (!o->err) o->err = w < 0 ? errno : EIO;
            return (ssize_t)done;
        }
        done += (size_t)w;
    }
    return (ssize_t)n;
}

/* fclose's end of the stream: the file's descriptor closed, its error kept as a write's. */
static int out_close(void *cookie) {
    vt_out *o = cookie;
    const int rc = close(o->fd);
    if (rc != 0 && !o->err) o->err = errno;
    o->fd = -1;
    return rc;
}

int vt_out_open(vt_out *o, const char *path, vt_err *e) {
    memset(o, 0, sizeof *o);
    if (vt_output_check(path, NULL, 0, e)) return -1;
    char real[PATH_MAX];
    const char *target = out_target(path, real);
    if (snprintf(o->path, sizeof o->path, "%s", target) >= (int)sizeof o->path)
        return vt_seterr(e, "output path too long: %s", path);
    char dir[sizeof o->path];
    vt_path_dir(o->path, dir, sizeof dir);
    char prefix[64];
    vt_temp_prefix(prefix, sizeof prefix);
    if (snprintf(o->tmp, sizeof o->tmp, "%s/%s-XXXXXX", dir, prefix) >= (int)sizeof o->tmp)
        return vt_seterr(e, "output path too long: %s", path);
    const int fd = mkstemp(o->tmp);
    if (fd < 0) return vt_seterr_code(e, VT_E_IO, "cannot create a file in %s for %s: %s", dir, path, strerror(errno));
    /* mkstemp makes it 0600: a file replaced keeps its mode, a new one gets the umask's (as open would give it) */
    struct stat st;
    fchmod(fd, stat(o->path, &st) == 0 ? st.st_mode & 07777 : new_file_mode());
    o->fd = fd;
    o->f = fopencookie(o, "wb", (cookie_io_functions_t){NULL, out_write, NULL, out_close});
    if (!o->f) { /* (it allocates only) */
        close(fd);
        remove(o->tmp);
        return vt_seterr_code(e, VT_E_NOMEM, "out of memory writing %s", path);
    }
    return 0;
}

int vt_out_commit(vt_out *o, vt_err *e) {
    if (!o->f) return vt_seterr(e, "%s: output not open", o->path);
    int ok = fflush(o->f) == 0 && !ferror(o->f) && o->err == 0;
    if (ok && fsync(o->fd) != 0) {
        ok = 0;
        o->err = errno;
    }
    ok = fclose(o->f) == 0 && ok; /* closes the descriptor: a deferred error (NFS, quotas) lands in o->err */
    const int err = o->err ? o->err : EIO; /* the first failure's cause (a write's, fsync's or close's) */
    o->f = NULL;
    if (!ok) {
        remove(o->tmp);
        return vt_seterr_code(e, VT_E_IO, "cannot write %s: %s", o->path, strerror(err));
    }
    if (rename(o->tmp, o->path) != 0) {
        const int rerr = errno;
        remove(o->tmp);
        return vt_seterr_code(e, VT_E_IO, "cannot move the new %s into place: %s", o->path, strerror(rerr));
    }
    char dir[sizeof o->path];
    vt_path_dir(o->path, dir, sizeof dir);
    const int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) { /* makes the rename durable (best effort: some file systems refuse to fsync a folder) */
        (void)fsync(dfd);
        close(dfd);
    }
    return 0;
}

/* This machine's name as a temporary file's tag: the letters and digits of the node name, at most 16 ("host" when it
 * has none). */
static void host_tag(char *tag, size_t n) {
    struct utsname u;
    size_t k = 0;
    for (const char *c = uname(&u) == 0 ? u.nodename : ""; *c && k + 1 < n && k < 16; c++)
        if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')) tag[k++] = *c;
    tag[k] = '\0';
    if (k == 0) snprintf(tag, n, "host");
}

void vt_temp_prefix(char *buf, size_t n) {
    char tag[24];
    host_tag(tag, sizeof tag);
    snprintf(buf, n, ".vitc-%s-%ld", tag, (long)getpid());
}

int vt_remove_stale_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    char host[24];
    host_tag(host, sizeof host);
    int removed = 0;
    for (struct dirent *de; (de = readdir(d));) {
        char *end;
        const char *name = de->d_name, *last = strrchr(name, '-'), *p = name + 6;
        if (strncmp(name, ".vitc-", 6) != 0 || !last || last <= p || strlen(last) != 7) continue;
        const char *dash = memchr(p, '-', (size_t)(last - p)); /* .vitc-HOST-PID-XXXXXX; before 2026-12-02 no HOST */
        if (dash) {
            if ((size_t)(dash - p) != strlen(host) || strncmp(p, host, strlen(host)) != 0) continue; /* not ours */
            p = dash + 1;
        }
        const long pid = strtol(p, &end, 10);
        if (end == p || end != last || pid <= 0 || pid > INT_MAX) continue;
        /* the writer lives, or is not ours to judge (a machine sharing the folder names its files by its own name) */
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) < (int)sizeof path && remove(path) == 0) removed++;
    }
    closedir(d);
    return removed;
}

void vt_out_abort(vt_out *o) {
    if (o->f) {
        fclose(o->f);
        o->f = NULL;
        remove(o->tmp);
    }
}

int vt_write_text(const char *path, const char *text, vt_err *e) {
    vt_out o;
    if (vt_out_open(&o, path, e)) return -1;
    fputs(text, o.f);
    return vt_out_commit(&o, e);
}

int vt_copy_file(const char *src, const char *dst, vt_err *e) {
    unsigned char *buf;
    size_t n;
    vt_out o;
    if (vt_read_file(src, (size_t)1 << 40, &buf, &n, e)) return -1;
    int rc = vt_out_open(&o, dst, e);
    if (rc == 0 && fwrite(buf, 1, n, o.f) != n) {
        rc = vt_seterr_code(e, VT_E_IO, "cannot write %s: %s", dst, strerror(o.err ? o.err : EIO));
        vt_out_abort(&o);
    } else if (rc == 0) {
        rc = vt_out_commit(&o, e);
    }
    free(buf);
    return rc;
}

int vt_read_file(const char *path, size_t max, unsigned char **buf, size_t *n, vt_err *e) {
    return vt_read_sized(path, max, NULL, NULL, buf, n, e);
}

int vt_open_read(const char *path, int regular, struct stat *st, vt_err *e) {
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO without a writer must not block the open */
    if (fd < 0) return vt_seterr_code(e, VT_E_IO, "cannot open %s: %s", path, strerror(errno));
    const int stat_err = fstat(fd, st) != 0 ? errno : 0;
    if (stat_err || S_ISDIR(st->st_mode)) {
        close(fd);
        return vt_seterr_code(e, VT_E_IO, "cannot read %s: %s", path, stat_err ? strerror(stat_err) : "it is a folder");
    }
    if (regular && !S_ISREG(st->st_mode)) {
        close(fd);
        return vt_seterr(e, "refusing to read %s: it is %s, not a regular file", path,
                         S_ISFIFO(st->st_mode)   ? "a FIFO or pipe"
                         : S_ISCHR(st->st_mode)  ? "a character device"
                         : S_ISBLK(st->st_mode)  ? "a block device"
                         : S_ISSOCK(st->st_mode) ? "a socket"
                                                 : "a special file");
    }
    if (!S_ISREG(st->st_mode)) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK); /* pipes: blocking reads */
    return fd;
}

int vt_read_sized(const char *path, size_t max, vt_size_fn size, void *arg, unsigned char **buf, size_t *n,
                  vt_err *e) {
    *buf = NULL;
    *n = 0;
    struct stat st;
    const int fd = vt_open_read(path, 0, &st, e);
    if (fd < 0) return -1;
    const int reg = S_ISREG(st.st_mode);
    if (reg && (uint64_t)st.st_size > max) {
        close(fd);
        return vt_seterr(e, "%s is %lld bytes (at most %zu are read)", path, (long long)st.st_size, max);
    }
    size_t cap = reg ? (size_t)st.st_size + 1 : (size_t)1 << 16, len = 0;
    size_t want = reg || !size ? SIZE_MAX : size(NULL, 0, arg); /* a stream with a size function: read to there */
    unsigned char *b = malloc(cap);
    int rc = b ? 0 : vt_seterr_code(e, VT_E_NOMEM, "out of memory reading %s", path);
    while (rc == 0) {
        if (len >= want) {
            const size_t w = size(b, len, arg);
            if (w <= len) break;
            want = w;
        }
        if (len == cap) {
            if (cap > max) {
                rc = vt_seterr(e, "%s is longer than %zu bytes", path, max);
                break;
            }
            const size_t ncap = cap <= max / 2 ? cap * 2 : max + 1; /* a stream past the limit: one byte shows it */
            unsigned char *nb = realloc(b, ncap);
            if (!nb) {
                rc = vt_seterr_code(e, VT_E_NOMEM, "out of memory reading %s", path);
                break;
            }
            b = nb;
            cap = ncap;
        }
        const size_t room = cap - len < want - len ? cap - len : want - len;
        const ssize_t r = read(fd, b + len, room);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) rc = vt_seterr_code(e, VT_E_IO, "cannot read %s: %s", path, strerror(errno));
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    if (rc == 0 && len > max) rc = vt_seterr(e, "%s is longer than %zu bytes", path, max);
    if (rc == 0 && !reg && len == 0) /* e.g. a FIFO whose writer is not there: said so, not "an empty file" */
        rc = vt_seterr_code(e, VT_E_IO, "cannot read %s: no data came from it (%s)", path,
                            S_ISFIFO(st.st_mode)   ? "a FIFO or pipe, not a regular file: is its writer running?"
                            : S_ISCHR(st.st_mode)  ? "a character device, not a regular file"
                            : S_ISSOCK(st.st_mode) ? "a socket, not a regular file"
                                                   : "not a regular file");
    if (rc) {
        free(b);
        return rc;
    }
    *buf = b;
    *n = len;
    return 0;
}
