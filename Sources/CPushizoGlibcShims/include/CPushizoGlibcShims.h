#ifndef PUSHIZO_GLIBC_SHIMS_H
#define PUSHIZO_GLIBC_SHIMS_H
// glibc and Linux calls that Swift's Glibc module map leaves out (epoll, eventfd, accept4, mallopt,
// pthread_setname_np) or that must run inside a signal handler, which Swift code cannot be.
#include <stdint.h>

// MARK: Linux event APIs
/// epoll event bits (fixed by the Linux ABI; checked against <sys/epoll.h> in GlibcShims.c).
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

// MARK: malloc
/// mallopt(M_ARENA_MAX, count): glibc creates at most `count` malloc arenas from now on (<malloc.h> is not in
/// Swift's Glibc module). Returns 1 on success, 0 on failure.
int pz_set_malloc_arena_limit(int count);

// MARK: Signals and threads
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
