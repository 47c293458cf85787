/* The fused FFNs (ffn.c) for matmul.c's residual fusion: x + FFN(x) added in the op's output pass. */
#ifndef VITC_FFN_H
#define VITC_FFN_H

#include "vitc/graph.h"

/* Whether n is a vt_dwffn_eval or vt_ffn_eval node with no residual yet. */
int vt_ffn_fusable(const vt_node *n);

/* Records n's last input (just added by the caller) as the residual its output adds. */
void vt_ffn_take_residual(vt_node *n);

#endif
