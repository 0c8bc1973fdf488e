#ifndef PUSHIZO_CRESOLVERTESTSUPPORT_H
#define PUSHIZO_CRESOLVERTESTSUPPORT_H
#include <stdint.h>

/* Points the calling thread's resolver state (glibc's per-thread `_res`, a macro Swift cannot reach) at one name
   server, 127.0.0.1:`port` over UDP, waiting `timeout_seconds` for an answer, one try. getaddrinfo on this thread
   then asks that server alone: glibc keeps a `_res` the application changed after res_init(3) instead of reloading
   resolv.conf over it. Other threads are untouched. Returns 0, or -1 when res_init fails. */
int pushizo_test_use_name_server(uint16_t port, int timeout_seconds);

#endif
