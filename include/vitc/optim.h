/* Optimisers over a vt_params store: AdamW (torch.optim.AdamW semantics) and global-norm gradient clipping. */
#ifndef VITC_OPTIM_H
#define VITC_OPTIM_H

#include <stdint.h>

#include "vitc/error.h"
#include "vitc/tensor.h"

/* AdamW state: one m and one v array per tracked parameter (every VT_PARAM with requires_grad), and the step count. */
typedef struct vt_adamw {
    float beta1, beta2, eps, weight_decay;
    int64_t step;      /* number of vt_adamw_step calls done (torch's state["step"]); save/restore with the arrays */
    int n;             /* number of tracked parameters */
    vt_tensor **p;     /* tracked parameters, in store order */
    float **m, **v;    /* first/second moments, m[i] and v[i] hold p[i]->numel floats */
    float *buf;        /* the single allocation behind all m and v arrays */
    vt_params *P;      /* the store the parameters belong to (each step marks it changed) */
} vt_adamw;

/* Allocates P's missing gradients (vt_params_alloc_grads) and tracks every VT_PARAM with requires_grad; moments
 * start at zero and step at 0. Parameters added to P later are not tracked. */
int vt_adamw_init(vt_adamw *o, vt_params *P, float beta1, float beta2, float eps, float weight_decay, vt_err *e);

/* Frees the state (a zeroed o is fine). */
void vt_adamw_free(vt_adamw *o);

/* One update with learning rate lr: p *= 1 - lr*wd (not for no_decay params), m,v updated, then
 * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps), exactly as torch.optim.AdamW. */
void vt_adamw_step(vt_adamw *o, float lr);

/* Number of state arrays to checkpoint: 2 per tracked parameter. */
int vt_adamw_nstate(const vt_adamw *o);

/* State array i in [0, vt_adamw_nstate): writes its name "optim/m/<param>" (i even) or "optim/v/<param>" (i odd)
 * into name (size len), returns its data (numel floats, shaped like *param); NULL if i is out of range. */
float *vt_adamw_state(const vt_adamw *o, int i, char *name, int len, int64_t *numel, const vt_tensor **param);

/* Global L2 norm of all parameter gradients (computed in double); if max_norm > 0 the gradients are scaled by
 * min(1, max_norm / (norm + 1e-6)) like torch.nn.utils.clip_grad_norm_. Returns the norm before clipping. */
double vt_clip_grad_norm(vt_params *P, double max_norm);

#endif
