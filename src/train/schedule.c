/* timm CosineLRScheduler (cycle_limit 1, cycle_mul 1, k_decay 1) evaluated per step, or per epoch in steps. */
#include "vitc/schedule.h"

#include <math.h>

double vt_sched_lr(const vt_sched *s, int64_t step) {
    if (step < 0) step = 0;
    if (s->update != VT_SCHED_STEP && s->epoch_steps > 0) { /* the epoch's value: its first step's */
        int64_t epoch = step / s->epoch_steps - (s->update == VT_SCHED_DEIT);
        step = (epoch > 0 ? epoch : 0) * s->epoch_steps;
    }
    if (step < s->warmup_steps)
        return s->warmup_lr + (double)step * ((s->base_lr - s->warmup_lr) / (double)s->warmup_steps);
    const int64_t t = s->warmup_prefix ? step - s->warmup_steps : step;
    if (t >= s->total_steps) return s->min_lr; /* also a cosine of no steps: a warm-up as long as the run */
    const double pi = 3.14159265358979323846;
    return s->min_lr + 0.5 * (s->base_lr - s->min_lr) * (1.0 + cos(pi * (double)t / (double)s->total_steps));
}
