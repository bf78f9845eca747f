#ifndef C_MULTIPEER_SODIUM_SHIM_H
#define C_MULTIPEER_SODIUM_SHIM_H
#include <sodium.h>
#endif
