#ifndef PUSHIZO_CSYSTEMD_SHIM_H
#define PUSHIZO_CSYSTEMD_SHIM_H
#include <systemd/sd-daemon.h>
#endif
