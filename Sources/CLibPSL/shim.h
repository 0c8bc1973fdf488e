#ifndef PUSHIZO_CLIBPSL_SHIM_H
#define PUSHIZO_CLIBPSL_SHIM_H
#include <libpsl.h>
#endif
