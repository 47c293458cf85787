/* Exponential moving average of a model's weights (timm's ModelEmaV2): a second parameter store updated after each
 * optimiser step, evaluated and saved beside the model. */
#ifndef VITC_EMA_H
#define VITC_EMA_H

#include "vitc/error.h"
#include "vitc/tensor.h"

typedef struct vt_ema {
    vt_params *P; /* the averaged store: same names, kinds, shapes and order as the source */
    double decay;
} vt_ema;

/* Creates the average as a copy of src (every parameter and buffer), with the given decay in [0, 1]. */
int vt_ema_init(vt_ema *m, const vt_params *src, double decay, vt_err *e);

/* ema = decay·ema + (1-decay)·src for every parameter and float buffer (BatchNorm running stats included, as
 * ModelEmaV2 over the state_dict); integer buffers (num_batches_tracked) and fixed buffers are copied. src must be
 * the store m was made from. */
void vt_ema_update(vt_ema *m, const vt_params *src);

/* Frees the store (a zeroed m is fine). */
void vt_ema_free(vt_ema *m);

#endif
