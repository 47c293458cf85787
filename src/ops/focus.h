/* FLatten's focused kernel on single rows (focus.c), shared by the vt_focus op and the focused linear attention
 * (linattn.c), which applies it to q and k rows in cache instead of reading them from vt_focus outputs. */
#ifndef VITC_OPS_FOCUS_H
#define VITC_OPS_FOCUS_H

/* Per-call constants: C channels, exponent p, is_c = 1/softplus(scale_c) (NULL: no scale, u = x) and, for the
 * backward, sig_c = sigmoid(scale_c). */
typedef struct {
    int C;
    float p;
    const float *is, *sig;
} vt_focus_k;

/* is (C) and, when sig is not NULL, sig (C) from the raw scale (softplus with PyTorch's threshold 20). */
void vt_focus_consts(const float *scale, int C, float *is, float *sig);
/* yr = φ_p(u) of one row xr (C channels), u = (ReLU(xr + per) + 1e-6)·is (per: NULL or the row's pe); st (2 floats,
 * or NULL) gets the row's ‖u‖² and ‖u^p‖² (st[0] < 0: the row was rescaled, see focus.c). */
void vt_focus_row_fwd(const vt_focus_k *f, const float *xr, const float *per, float *yr, float *st);
/* Adds the gradients of one row given gr = d yr: to dxr and dper (each may be NULL) and, with a scale, to the
 * partial scale gradient dsc (C floats; may be NULL). yr and st: the forward's row and norms (saves a pass), or
 * NULL (recomputed). */
void vt_focus_row_bwd(const vt_focus_k *f, const float *xr, const float *per, const float *yr, const float *st,
                      const float *gr, float *dxr, float *dper, float *dsc);

/* The scale gradient's per-thread partial sums (nt threads, C channels) in a scratch of vt_focus_dsc_floats floats:
 * a float block per thread that a kernel adds a few rows into (vt_focus_row_bwd's dsc), flushed into the thread's
 * double sums (vt_focus_dsc_flush): summed over a whole batch in floats, a channel whose terms nearly cancel had lost
 * 1e-3 of its value. vt_focus_dsc_sums zeroes the sums; vt_focus_dsc_add adds them over the threads to dsc. */
static inline long long vt_focus_dsc_floats(int nt, int C) { return 3LL * nt * C + 1; }
double *vt_focus_dsc_sums(float *w, int nt, int C);
void vt_focus_dsc_flush(float *blk, double *sum, int C);
void vt_focus_dsc_add(const double *sums, int nt, int C, float *dsc);

#endif
