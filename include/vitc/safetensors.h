/* Strict safetensors reader and atomic writer.
 *
 * File layout: u64 little-endian header length N, N bytes of UTF-8 JSON header, then the data
 * section. The reader accepts a file only if it passes every check below; each error message names
 * the offending tensor:
 *   - file >= 8 bytes; N <= VT_ST_MAX_HEADER and 8 + N <= file size;
 *   - the header is valid UTF-8 without NUL bytes, its FIRST byte is '{' (no leading whitespace),
 *     it is one JSON object, and only whitespace (the writer's space padding) may follow it;
 *   - no duplicate keys (at the top level, inside an entry, or inside __metadata__);
 *   - optional "__metadata__" is an object whose values are all strings;
 *   - every other entry is an object with exactly the fields "dtype" (one of F64 F32 F16 BF16 I64
 *     I32 I16 I8 U8 BOOL), "shape" (<= 8 non-negative integers) and "data_offsets" ([begin, end],
 *     non-negative integers, begin <= end); names are non-empty and shorter than VT_NAMELEN;
 *   - numbers are written as integers of at most 2^53: digits only, no leading zero (10.0, 1e1, -0,
 *     010 are refused, though JSON parsers read them as integers);
 *   - prod(shape) * dtype size (overflow-checked) == end - begin;
 *   - the offsets, sorted, tile the data section exactly: start at 0, no gap, no overlap, and the
 *     last end equals the data-section size (no trailing bytes).
 * Tensor data may be unaligned in the file; readers copy with memcpy. Hosts must be little-endian.
 */
#ifndef VITC_SAFETENSORS_H
#define VITC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "vitc/error.h"
#include "vitc/tensor.h"

#define VT_ST_MAXDIM 8
#define VT_ST_MAX_HEADER (100u * 1024u * 1024u) /* header length cap in bytes (100 MiB) */

typedef enum {
    VT_ST_F64 = 0, VT_ST_F32, VT_ST_F16, VT_ST_BF16, VT_ST_I64, VT_ST_I32, VT_ST_I16, VT_ST_I8, VT_ST_U8,
    VT_ST_BOOL, VT_ST_NDTYPE
} vt_st_dtype;

/* One tensor of an opened file; data points into the file's buffer (possibly unaligned). */
typedef struct vt_st_entry {
    char name[VT_NAMELEN];
    vt_st_dtype dtype;
    int ndim;
    int64_t shape[VT_ST_MAXDIM];
    int64_t numel;
    uint64_t begin, end; /* data_offsets, relative to the data section */
    const uint8_t *data; /* the bytes in memory; NULL: at offset off of the open file fd (vt_st_open), read on demand */
    int fd;
    uint64_t off;
} vt_st_entry;

/* An opened, validated file: its header in memory, and its data too unless it is an open regular file. entries are in
 * header order. */
typedef struct vt_st_file {
    uint8_t *buf;
    size_t len;
    int opened;       /* 1: fd is the regular file the tensors are read from (buf holds its header alone) */
    int fd;
    vt_st_entry *entries;
    int n;
    int *sorted;      /* entry indices sorted by name (for vt_st_find) */
    char **meta_keys; /* __metadata__ pairs (n_meta of each) */
    char **meta_vals;
    int n_meta;
} vt_st_file;

/* One tensor to write: data holds prod(shape) elements of dtype, row-major (NULL ok when empty). */
typedef struct vt_st_out {
    const char *name;
    vt_st_dtype dtype;
    int ndim;
    int64_t shape[VT_ST_MAXDIM];
    const void *data;
} vt_st_out;

/* Name of a dtype as written in headers ("F32"...), or "?" when out of range. */
const char *vt_st_dtype_name(vt_st_dtype d);

/* Opens the regular file at path, reads and validates its header into *f (zeroed on error) and keeps it open: tensors
 * are read from it when asked (vt_st_read_*), so a loader holds one tensor at a time; a file shortened meanwhile gives
 * a read error, one rewritten in place its new bytes (vitc replaces files by renaming: the open one keeps its data).
 * Anything else (a pipe) is read whole into memory, only as far as its header says it ends. */
int vt_st_open(const char *path, vt_st_file *f, vt_err *e);

/* Validates an in-memory file image into *f; buf is copied, the caller keeps it. */
int vt_st_parse(const uint8_t *buf, size_t len, vt_st_file *f, vt_err *e);

/* Frees everything held by f and zeroes it (safe on a zeroed or already closed file). */
void vt_st_close(vt_st_file *f);

/* The entry named name, or NULL when absent. */
const vt_st_entry *vt_st_find(const vt_st_file *f, const char *name);

/* The __metadata__ value for key, or NULL when absent. */
const char *vt_st_meta(const vt_st_file *f, const char *key);

/* Converts entry's n (== numel) elements to float into dst; accepts every dtype (BOOL -> 0/1). Entries of an open
 * file are read from it (an error where it ends before their data). */
int vt_st_read_f32(const vt_st_entry *t, float *dst, int64_t n, vt_err *e);

/* Copies entry's n (== numel) elements as int64 into dst; integer dtypes, or float dtypes whose
 * values are all integral and in range (error otherwise). */
int vt_st_read_i64(const vt_st_entry *t, int64_t *dst, int64_t n, vt_err *e);

/* The offset of the first escaped NUL (\u0000) in the JSON text s[0..n), or -1 when none: cJSON's strings end there,
 * so a name or value holding one would be read cut short (readers refuse it). */
long vt_json_escaped_nul(const unsigned char *s, size_t n);

/* 1 when s[0..n) is valid UTF-8 (no overlongs, surrogates or code points above U+10FFFF); else 0 with the offset of
 * the first bad byte in *bad. Header strings must be (the reader refuses anything else). */
int vt_utf8_valid(const uint8_t *s, size_t n, size_t *bad);

/* The bytes of the valid UTF-8 sequence at s[0..n) (1 to 4; its code point in *cp), or 0 where none starts there. */
size_t vt_utf8_next(const uint8_t *s, size_t n, uint32_t *cp);

/* Writes n tensors to path atomically (vt_out_open: a temporary file beside it, fsync, rename; removed on error).
 * metadata_json is NULL or a JSON object of string values stored as __metadata__. The header is
 * space-padded so the data section starts at a multiple of 8. Names must be unique; names, metadata
 * keys and values must be valid UTF-8 (the reader refuses anything else). */
int vt_st_write(const char *path, const vt_st_out *tensors, int n, const char *metadata_json, vt_err *e);

#endif
