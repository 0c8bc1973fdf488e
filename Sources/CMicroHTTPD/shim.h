#ifndef PUSHIZO_CMICROHTTPD_SHIM_H
#define PUSHIZO_CMICROHTTPD_SHIM_H
#include <microhttpd.h>
#endif
