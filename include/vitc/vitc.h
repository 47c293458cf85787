/**
 * @file vitc.h
 * @brief The umbrella header of libvitc: include this one (`#include <vitc/vitc.h>`), link with
 * `pkg-config --cflags --libs vitc`.
 */
#ifndef VITC_VITC_H
#define VITC_VITC_H

#include "api.h"

#endif
