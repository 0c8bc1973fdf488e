#ifndef PUSHIZO_CLIBPQ_SHIM_H
#define PUSHIZO_CLIBPQ_SHIM_H
#include <libpq-fe.h>
#endif
