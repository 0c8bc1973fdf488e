#ifndef PUSHIZO_SHIMS_H
#define PUSHIZO_SHIMS_H
// Functions standing in for OpenSSL macros (Swift imports functions, not function-like macros).
// Modelled on swift-nio-ssl's old CNIOOpenSSL shim.
#include <openssl/ssl.h>

/// SSL_CTX_set_min_proto_version (a macro over SSL_CTX_ctrl). Returns 1 on success.
int pz_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version);
/// SSL_set_tlsext_host_name (a macro over SSL_ctrl): sets the SNI host name. Returns 1 on success.
int pz_SSL_set_tlsext_host_name(SSL *ssl, const char *name);
/// SSL_CTX_set_mode (macro): e.g. SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE.
long pz_SSL_CTX_set_mode(SSL_CTX *ctx, long mode);
/// SSL_CTX_set_options is a function in OpenSSL 3, kept here for symmetry with older releases.
unsigned long pz_SSL_CTX_set_options(SSL_CTX *ctx, unsigned long options);
/// SSL_CTX_add1_chain_cert (macro): appends an intermediate to the context's own chain (takes a reference).
/// Returns 1 on success. Added for HTTP2 (TLS client identities from memory).
long pz_SSL_CTX_add1_chain_cert(SSL_CTX *ctx, X509 *x509);

// MARK: Linux event APIs (Swift's Glibc module map leaves out epoll, eventfd and accept4). Added for HTTP2.
#include <stdint.h>
/// epoll event bits (fixed by the Linux ABI; checked against <sys/epoll.h> in shims.c).
#define PZ_EPOLLIN 0x001u
#define PZ_EPOLLOUT 0x004u
#define PZ_EPOLLERR 0x008u
#define PZ_EPOLLHUP 0x010u
/// epoll_create1(EPOLL_CLOEXEC). Returns the fd or -1 (errno set).
int pz_epoll_create(void);
/// epoll_ctl ADD / MOD / DEL with `events` and the fd itself as the event data. Returns 0 or -1.
int pz_epoll_add(int epfd, int fd, uint32_t events);
int pz_epoll_mod(int epfd, int fd, uint32_t events);
int pz_epoll_del(int epfd, int fd);
/// epoll_wait into parallel arrays of fds and event masks (`max` entries each). Returns the count, 0, or -1.
int pz_epoll_wait(int epfd, int *fds, uint32_t *events, int max, int timeout_ms);
/// eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC). Returns the fd or -1.
int pz_eventfd(void);
/// accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC). Returns the fd or -1 (errno set).
int pz_accept_nonblocking(int fd);

/// EVP_PKEY_PUBLIC_KEY (a macro over OSSL_KEYMGMT_SELECT_* bits): the selection for EVP_PKEY_fromdata
/// when importing a public key (e.g. a 65-byte uncompressed P-256 point).
int pz_EVP_PKEY_PUBLIC_KEY_selection(void);
/// OPENSSL_free (a macro over CRYPTO_free with file/line): frees memory OpenSSL allocated for the caller,
/// e.g. the buffer from EVP_PKEY_get1_encoded_public_key.
void pz_OPENSSL_free(void *ptr);
/// EVP_PKEY_KEYPAIR (a macro over OSSL_KEYMGMT_SELECT_* bits): the selection for EVP_PKEY_fromdata when
/// importing a private key together with its public point. Added for PushCrypto (RFC 8291 test keys).
int pz_EVP_PKEY_KEYPAIR_selection(void);

// MARK: libmicrohttpd (its start and info calls are variadic, which Swift cannot call). Added for MetricsServer.
#include <microhttpd.h>
/// MHD_start_daemon with the options the metrics listener uses: its own polling thread
/// (MHD_USE_INTERNAL_POLLING_THREAD with the best of epoll/poll/select), bound to `address` (IPv4 or IPv6,
/// `ipv6` set for the latter), at most `connection_limit` connections at once, each closed after
/// `timeout_seconds` of inactivity. Returns NULL when the daemon cannot start (e.g. the address is in use).
struct MHD_Daemon *pz_mhd_start(const struct sockaddr *address, int ipv6, unsigned int connection_limit,
                                unsigned int timeout_seconds, MHD_AccessHandlerCallback handler, void *context);
/// The port the daemon is bound to (MHD_get_daemon_info MHD_DAEMON_INFO_BIND_PORT), 0 when unknown.
uint16_t pz_mhd_bound_port(struct MHD_Daemon *daemon);

// MARK: glibc malloc. Added for pushizo-worker run.
/// mallopt(M_ARENA_MAX, count): glibc creates at most `count` malloc arenas from now on (<malloc.h> is not in
/// Swift's Glibc module). Returns 1 on success, 0 on failure.
int pz_set_malloc_arena_limit(int count);

// MARK: Signals. Added for Worker (SignalHandling).
/// One signal as the forwarding handler records it: the number, `si_code` (<= 0 when a process sent it:
/// SI_USER, SI_QUEUE, SI_TKILL) and `si_pid` (the sender, meaningful only then).
struct pz_signal_record {
    int32_t number;
    int32_t code;
    int32_t sender_pid;
};
/// Creates a pipe and installs, for each of `signals`, a handler (SA_SIGINFO | SA_RESTART, every signal
/// blocked while it runs) that writes one `pz_signal_record` to the pipe's non-blocking write end and does
/// nothing else (write(2) is async-signal-safe; errno is preserved). A record that does not fit (the pipe
/// holds thousands) is dropped. Returns the blocking read end, or -1 (errno set).
int pz_signals_forward_to_pipe(const int *signals, int count);
/// pthread_setname_np(pthread_self(), name) (a GNU extension Swift's Glibc module leaves out): the calling
/// thread's kernel name, at most 15 bytes (longer names are refused). Returns 0 or an error number.
int pz_set_current_thread_name(const char *name);

#endif
