/**
 * @file api.h
 * @brief The embedding API of libvitc: open a named model with its weights, classify images or tensors, get top-k
 * classes and features, close. The only symbols libvitc.so exports; all start with `vitc_`.
 *
 * Every fallible function returns 0 (or a count / a handle) on success and -1 (or NULL) on error, with the message
 * and its kind (VITC_E_*) in the caller's vitc_error (which may be NULL); nothing is printed and nothing exits. The
 * library keeps no mutable global state: a vitc_model holds everything, including its thread count. A vitc_model
 * runs one call at a time (a call while another thread's runs on it fails, "in use"; vitc_get_info, vitc_input_size
 * and vitc_load_image, which only read what opening the model fixed, run beside any call; vitc_close is the caller's
 * to order after every call on the model has returned, as free()); separate models may run in separate threads.
 */
#ifndef VITC_API_H
#define VITC_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Marks a function exported by libvitc.so (the library is built with -fvisibility=hidden); define
 * VITC_NO_VISIBILITY to leave the attribute out (a compiler that rejects it). */
#if defined(__GNUC__) && !defined(VITC_NO_VISIBILITY)
#define VITC_API __attribute__((visibility("default")))
#else
#define VITC_API
#endif

/** Major version: changes when the API or ABI breaks (it is the shared library's SONAME version). */
#define VITC_VERSION_MAJOR 0
/** Minor version: new functions, compatible. */
#define VITC_VERSION_MINOR 6
/** Patch version: fixes only. */
#define VITC_VERSION_PATCH 10

/** Most classes a vitc_result holds. */
#define VITC_MAX_TOPK 64
/** Most stage maps a model gives (vitc_stage_features). */
#define VITC_MAX_STAGES 4

/** What kind of failure a vitc_error or a vitc_result reports (its `code`), for callers that act on it: retry, ask
 * for another file, give up. The message says the rest. Since 0.4.0. */
enum {
    VITC_OK = 0,             /**< no error */
    VITC_E_ARGUMENT = 1,     /**< an argument or option the call cannot take: NULL, out of range, an unknown dtype or
                                  model option, a size the model refuses, NaN or Inf in an input tensor, features
                                  the model has not (stage maps of a plain ViT), an unknown VITC_GEMM library */
    VITC_E_MODEL = 2,        /**< an unknown model name */
    VITC_E_FILE = 3,         /**< the system could not open or read a file (missing, no permission, a folder, an I/O
                                  error) */
    VITC_E_WEIGHTS = 4,      /**< a weights file that does not hold this model: not safetensors, truncated or malformed,
                                  missing or extra tensors, wrong shapes or dtypes, non-finite values, the other form */
    VITC_E_IMAGE = 5,        /**< an image that cannot be decoded (corrupt, truncated, unknown format) or has sides
                                  out of bounds (an image's logits that are not finite: VITC_E_FAILED) */
    VITC_E_BUSY = 6,         /**< the model is running another thread's call */
    VITC_E_MEMORY = 7,       /**< out of memory */
    VITC_E_UNSUPPORTED = 8,  /**< this CPU or build cannot run what was asked (bf16 without native kernels, or with
                                  VITC_GEMM forcing OpenBLAS) */
    VITC_E_FAILED = 9        /**< any other failure (logits, features or maps that are not finite: weights that
                                  overflow on an input) */
};

/** The message of a failed call (empty when none) and its kind. */
typedef struct vitc_error {
    char msg[508]; /**< NUL-terminated English message naming the model, file or argument at fault */
    int code;      /**< VITC_E_*, VITC_OK when none (since 0.4.0: it took the last 4 bytes of 0.3's msg[512], so
                        the struct's size and msg's offset are 0.3's, messages are cut at 507 bytes, and the struct
                        is 4-byte aligned; a program built against 0.4 and run on a 0.3 library finds message
                        bytes there: check vitc_version() if that can happen) */
} vitc_error;

/** An opened model: configuration, weights, thread count and its cached graph (opaque). The graph is kept for the
 *  next call with the same images per pass (min(n, batch)), size and thread count; stage maps and logits need graphs
 *  of their own (logits reuse pooled features' graph), so alternating such calls builds one each time. */
typedef struct vitc_model vitc_model;

/** Options of vitc_open; zero (or vitc_options_init) means every default. */
typedef struct vitc_options {
    int threads;    /**< threads of this model's calls (clamped to the cores the process may run on); 0: the
                         caller's OpenMP setting at each call */
    int img_size;   /**< input size; 0: the model's own (another only where the weights allow it) */
    int batch;      /**< most images per forward pass; 0: 16 */
    float crop_pct; /**< eval resize to floor(size / crop_pct) then centre crop; 0: the model's pretrained value */
} vitc_options;

/** What vitc_get_info reports about an opened model. */
typedef struct vitc_info {
    const char *name;    /**< registered model name, e.g. "deit_tiny_patch16_224" */
    const char *family;  /**< host family, e.g. "vit", "swin" */
    int img_size;        /**< input height (= width, unless opened with --img-size HxW: vitc_input_size) in pixels */
    int in_chans;        /**< input channels (1 or 3 for images) */
    int num_classes;     /**< classes of the head (logits per image) */
    int any_size;        /**< 1: the weights fit any input size (tensor calls may pass another size; PVT v1's may
                              too, 0 here: it resizes its position embeddings to the input) */
    int64_t params;      /**< learnable parameters */
    double gmacs;        /**< multiply-adds of one image at img_size, in billions */
} vitc_info;

/** One image's top-k classes, most probable first, or the error that kept it from being classified. */
typedef struct vitc_result {
    int ok;                            /**< 1: classified; 0: see error */
    int k;                             /**< classes listed */
    int index[VITC_MAX_TOPK];          /**< class indices */
    double prob[VITC_MAX_TOPK];        /**< softmax probabilities */
    const char *label[VITC_MAX_TOPK];  /**< class names: those of W.classes.json for weights W.safetensors (what
                                            `vitc deploy` writes), else of the classes.json beside the weights (a
                                            vitc train run folder's), when it names every class, else the model's
                                            dataset's (Fashion-MNIST's for its 10-class models) unless the weights
                                            record that an image folder trained them, else NULL; they live as long as
                                            the model */
    char error[508];                   /**< why the image failed (empty when ok) */
    int code;                          /**< VITC_E_* of the failure (VITC_E_FILE, VITC_E_IMAGE, VITC_E_ARGUMENT for a
                                            bad vitc_pixels or a NaN in a tensor, ...), VITC_OK when ok (since
                                            0.4.0, in the last 4 bytes of 0.3's error[512]) */
} vitc_result;

/** A decoded image: width × height pixels of `channels` interleaved 8-bit channels, rows top to bottom. */
typedef struct vitc_pixels {
    const unsigned char *data; /**< width · height · channels bytes */
    int width;                 /**< pixels per row */
    int height;                /**< rows */
    int channels;              /**< 1 (L), 2 (LA), 3 (RGB) or 4 (RGBA); converted to the model's as PIL does */
} vitc_pixels;

/** A float32 tensor, row-major, allocated by the library (free with vitc_tensor_free). */
typedef struct vitc_tensor {
    int ndim;     /**< dimensions used in shape */
    int shape[4]; /**< sizes, outermost first */
    float *data;  /**< shape[0] · ... · shape[ndim-1] values */
} vitc_tensor;

/** The library version as "MAJOR.MINOR.PATCH". */
VITC_API const char *vitc_version(void);

/** Number of registered model names. */
VITC_API int vitc_model_count(void);

/** The i-th registered model name (0 <= i < vitc_model_count()), or NULL. */
VITC_API const char *vitc_model_name(int i);

/** Sets every option to its default (the same as zeroing the struct). */
VITC_API void vitc_options_init(vitc_options *opt);

/** Opens model `name` with weights from the safetensors file `weights` (official state_dict names), built with the
 * model options and the form the file records (vitc's weight files: `vitc_model_options`, `vitc_form`; a record
 * holding --dtype, --train-form or --no-prepack, which vitc never writes there, or options that cannot make the model
 * is refused with VITC_E_WEIGHTS); opt may be NULL. Returns the model, or NULL with the reason in err. */
VITC_API vitc_model *vitc_open(const char *name, const char *weights, const vitc_options *opt, vitc_error *err);

/** vitc_open of model `name` changed by `model_options`, which win over those the file records, spelt as on vitc's
 * command line ("--num-classes 3 --in-chans 3 --attn flatten --dims 32,64 --train-form", or --name=value; unquoted;
 * what `vitc train` records as `model-options` in its checkpoints; NULL or "": none), for weights trained or made
 * with them: a file holding the training form (said by the `vitc_form` record of a Next-ViT file, by the branch
 * tensors of a cFFN file) opens in it, a Next-ViT file without the record needs --train-form (what `vitc deploy`
 * makes is faster); a --dtype must be fp32, bf16 or int8 and is otherwise ignored (vitc_set_dtype sets it); an
 * --img-size must equal opt's img_size where both are given; --no-prepack keeps no packed or bf16 weight copies for
 * the kernels (int8's quantised ones stay): less memory, slower at small batches. Since 0.3.0. */
VITC_API vitc_model *vitc_open_with(const char *name, const char *weights, const vitc_options *opt,
                                    const char *model_options, vitc_error *err);

/** Sets the arithmetic of the model's linear layers for later calls: "fp32" (the default), "bf16" (as `vitc forward
 * --dtype bf16`; refused where the CPU has no native bf16) or "int8" (dynamic quantisation, as `vitc forward --dtype
 * int8`; layers stay fp32 where the CPU has no fast int8 kernel). */
VITC_API int vitc_set_dtype(vitc_model *m, const char *dtype, vitc_error *err);

/** The linear layers of the model's last call that ran it and how many of them ran int8 (*int8 < *linears: the others
 * ran fp32, e.g. every one on a CPU without a fast int8 kernel); both 0 before the first. It reads what that call
 * wrote: call it between calls on m, not while another thread's call runs. Since 0.3.0. */
VITC_API void vitc_int8_layers(const vitc_model *m, int *linears, int *int8);

/** Frees a model and everything it holds (NULL is fine; as with free(), a model closed once must not be used or
 * closed again, and it must not be closed while a call on it runs in another thread). */
VITC_API void vitc_close(vitc_model *m);

/** Fills info with the model's name, input geometry, classes and size (strings live as long as the model); m NULL: info
 * zeroed. */
VITC_API void vitc_get_info(const vitc_model *m, vitc_info *info);

/** The input height and width in pixels: what images are read at and size-0 tensor calls take (vitc_info's img_size
 * both, unless opened with model options --img-size HxW; size buffers for vitc_load_image by it); m NULL: 0, 0. */
VITC_API void vitc_input_size(const vitc_model *m, int *height, int *width);

/** Classifies n image files (PNG, JPEG, BMP, GIF, TGA, PSD, HDR, binary PNM) with the model's eval transform: out[i]
 * gets the top-k of image i or its own error. Returns the number of images that failed (n when all did, each result
 * saying why), or -1 (err set; out not written) when the call could not run (a bad argument, a model of other than
 * 1 or 3 channels, out of memory). */
VITC_API int vitc_classify_files(vitc_model *m, const char *const *paths, int n, int k, vitc_result *out,
                                 vitc_error *err);

/** Classifies n decoded images with the model's eval transform, as vitc_classify_files. */
VITC_API int vitc_classify_pixels(vitc_model *m, const vitc_pixels *images, int n, int k, vitc_result *out,
                                  vitc_error *err);

/** Classifies n preprocessed images x (n, in_chans, size, size); size 0: the model's size (its H x W where opened
 * with --img-size HxW). As vitc_classify_files. */
VITC_API int vitc_classify_tensor(vitc_model *m, const float *x, int n, int size, int k, vitc_result *out,
                                  vitc_error *err);

/** Reads an image file and applies the model's eval transform into out (in_chans · H · W floats, vitc_input_size:
 * img_size², or H x W where opened with --img-size HxW). */
VITC_API int vitc_load_image(vitc_model *m, const char *path, float *out, vitc_error *err);

/** Logits of n preprocessed images x (n, in_chans, size, size; size 0: the model's size, as vitc_classify_tensor) into
 * logits (n, num_classes). */
VITC_API int vitc_logits(vitc_model *m, const float *x, int n, int size, float *logits, vitc_error *err);

/** vitc_logits of n images x (n, in_chans, h, w): non-square where the model takes it (its weights fit any size and
 * its official code takes H != W; vitc_info's any_size); h = w = 0: the model's size. */
VITC_API int vitc_logits_hw(vitc_model *m, const float *x, int n, int h, int w, float *logits, vitc_error *err);

/** Pooled features (timm's pre-logits: the classifier head's input) of n images x into a new tensor (n, D); out is
 * zeroed first, so vitc_tensor_free is safe on it whatever the return. */
VITC_API int vitc_pooled_features(vitc_model *m, const float *x, int n, int size, vitc_tensor *out,
                                  vitc_error *err);

/** vitc_pooled_features of n images x (n, in_chans, h, w), as vitc_logits_hw. */
VITC_API int vitc_pooled_features_hw(vitc_model *m, const float *x, int n, int h, int w, vitc_tensor *out,
                                     vitc_error *err);

/** Stage maps (n, C_i, H_i, W_i) of a hierarchical backbone for n images x into new tensors; returns their number.
 * All VITC_MAX_STAGES entries are zeroed first (those past the number, and all on error, stay so: safe to free). */
VITC_API int vitc_stage_features(vitc_model *m, const float *x, int n, int size, vitc_tensor maps[VITC_MAX_STAGES],
                                 vitc_error *err);

/** vitc_stage_features of n images x (n, in_chans, h, w), as vitc_logits_hw: dense tasks' non-square inputs. */
VITC_API int vitc_stage_features_hw(vitc_model *m, const float *x, int n, int h, int w,
                                    vitc_tensor maps[VITC_MAX_STAGES], vitc_error *err);

/** Frees a tensor's data and zeroes it (a zeroed tensor is fine). */
VITC_API void vitc_tensor_free(vitc_tensor *t);

#ifdef __cplusplus
}
#endif

#endif
