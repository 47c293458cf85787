/* A named model configured small for tests: one block per stage at the smallest image size it accepts. */
#ifndef VITC_TEST_SHRINK_H
#define VITC_TEST_SHRINK_H

#include "vitc/model.h"

/* Configures c from base with one block per stage (two where a host needs pairs, the Refiner's; one stage raised up
 * to 5 where a host builds it in groups, Next-ViT's stage 3) at the smallest of 28, 32, 64, 96, 192, 224 px (up to
 * base's own size) that builds, without stochastic depth, Refined-ViT's cos_reg over the pairs of maps its blocks
 * have; 0, or -1 with e set. */
int vt_test_shrink(const vt_model_cfg *base, vt_model_cfg *c, vt_err *e);

#endif
