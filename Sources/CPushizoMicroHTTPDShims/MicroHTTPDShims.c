#include "CPushizoMicroHTTPDShims.h"

struct MHD_Daemon *pz_mhd_start(const struct sockaddr *address, int ipv6, unsigned int connection_limit,
                                unsigned int timeout_seconds, MHD_AccessHandlerCallback handler, void *context) {
    // A thread per connection: a page that waits for the database holds up its own connection only.
    unsigned int flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO_INTERNAL_THREAD | (ipv6 ? MHD_USE_IPv6 : 0);
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, context,
                            MHD_OPTION_SOCK_ADDR, address,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds,
                            MHD_OPTION_END);
}

uint16_t pz_mhd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}
