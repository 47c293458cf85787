/* vt_test_shrink (shrink.h): the registry sweep's small models, and the allocation-failure test's. */
#include "shrink.h"

/* c configured with ov's depths at the smallest of the sizes that builds; 0 if one does. */
static int smallest_size(const vt_model_cfg *base, vt_model_overrides *ov, vt_model_cfg *c) {
    static const int sizes[] = {28, 32, 64, 96, 192, 224};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && sizes[k] <= base->arch.img_size; k++) {
        ov->img_size = sizes[k];
        vt_err e1 = {0};
        vt_model_summary s;
        if (vt_model_configure(base, ov, c, &e1) == 0 && vt_model_summarize(c, &s, &e1) == 0) {
            vt_model_summary_free(&s);
            /* Refined-ViT's cos_reg term over as many pairs of block maps as the blocks have (its training graph
             * needs one block more than pairs) */
            if (c->arch.cos_reg >= c->arch.stages[0].depth) c->arch.cos_reg = c->arch.stages[0].depth - 1;
            return 0;
        }
    }
    return -1;
}

int vt_test_shrink(const vt_model_cfg *base, vt_model_cfg *c, vt_err *e) {
    vt_model_overrides ov = vt_model_no_overrides();
    ov.drop_path = 0.0f; /* named configs carry their recipes' stochastic depth: it would zero gradients by chance */
    const int n = base->arch.nstages;
    for (int depth = 1; depth <= 2; depth++) {
        for (int i = 0; i < n; i++) ov.depths[i] = depth;
        if (smallest_size(base, &ov, c) == 0) return 0;
    }
    for (int i = 0; i < n; i++)
        for (int d = 3; d <= 5; d++) {
            for (int j = 0; j < n; j++) ov.depths[j] = j == i ? d : 1;
            if (smallest_size(base, &ov, c) == 0) return 0;
        }
    ov.img_size = 0;
    return vt_model_configure(base, &ov, c, e);
}
