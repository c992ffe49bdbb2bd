// DTSIM_CHECK: a programmer-error assertion that stays on in Release and names file and line.
#pragma once

#include <cstdio>
#include <cstdlib>

#define DTSIM_CHECK(cond)                                                           \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)
