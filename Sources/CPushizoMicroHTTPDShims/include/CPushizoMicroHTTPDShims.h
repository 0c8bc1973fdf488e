#ifndef PUSHIZO_MICROHTTPD_SHIMS_H
#define PUSHIZO_MICROHTTPD_SHIMS_H
// Functions standing in for libmicrohttpd's variadic start and info calls, which Swift cannot call.
#include <stdint.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// MHD_start_daemon with the options the metrics listener uses: a thread per connection
/// (MHD_USE_THREAD_PER_CONNECTION, with the best of poll/select), bound to `address` (IPv4 or IPv6,
/// `ipv6` set for the latter), at most `connection_limit` connections at once, each closed after
/// `timeout_seconds` of inactivity. Returns NULL when the daemon cannot start (e.g. the address is in use).
struct MHD_Daemon *pz_mhd_start(const struct sockaddr *address, int ipv6, unsigned int connection_limit,
                                unsigned int timeout_seconds, MHD_AccessHandlerCallback handler, void *context);
/// The port the daemon is bound to (MHD_get_daemon_info MHD_DAEMON_INFO_BIND_PORT), 0 when unknown.
uint16_t pz_mhd_bound_port(struct MHD_Daemon *daemon);

#endif
