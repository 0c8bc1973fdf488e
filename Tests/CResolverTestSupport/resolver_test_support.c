#include "CResolverTestSupport.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <resolv.h>
#include <string.h>

int pushizo_test_use_name_server(uint16_t port, int timeout_seconds) {
    if (res_init() != 0) return -1;
    struct sockaddr_in server;
    memset(&server, 0, sizeof server);
    server.sin_family = AF_INET;
    server.sin_port = htons(port);
    server.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    _res.nsaddr_list[0] = server;
    _res.nscount = 1;
    _res.retrans = timeout_seconds;
    _res.retry = 1;
    _res.options &= ~(unsigned long)RES_ROTATE;
    return 0;
}
