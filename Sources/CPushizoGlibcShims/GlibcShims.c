#define _GNU_SOURCE 1 // accept4, pipe2, pthread_setname_np
#include "CPushizoGlibcShims.h"

// MARK: Linux event APIs
#include <errno.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

_Static_assert(PZ_EPOLLIN == EPOLLIN && PZ_EPOLLOUT == EPOLLOUT && PZ_EPOLLERR == EPOLLERR && PZ_EPOLLHUP == EPOLLHUP,
               "epoll bits differ from <sys/epoll.h>");

int pz_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

static int pz_epoll_ctl(int epfd, int op, int fd, uint32_t events) {
    struct epoll_event event;
    event.events = events;
    event.data.u64 = 0;
    event.data.fd = fd;
    return epoll_ctl(epfd, op, fd, &event);
}

int pz_epoll_add(int epfd, int fd, uint32_t events) { return pz_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, events); }
int pz_epoll_mod(int epfd, int fd, uint32_t events) { return pz_epoll_ctl(epfd, EPOLL_CTL_MOD, fd, events); }
int pz_epoll_del(int epfd, int fd) { return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL); }

int pz_epoll_wait(int epfd, int *fds, uint32_t *events, int max, int timeout_ms) {
    struct epoll_event buffer[256];
    if (max > 256) max = 256;
    int n;
    do {
        n = epoll_wait(epfd, buffer, max, timeout_ms);
    } while (n < 0 && errno == EINTR);
    for (int i = 0; i < n; i++) {
        fds[i] = buffer[i].data.fd;
        events[i] = buffer[i].events;
    }
    return n;
}

int pz_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

int pz_accept_nonblocking(int fd) { return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC); }

// MARK: malloc
#include <malloc.h>

int pz_set_malloc_arena_limit(int count) { return mallopt(M_ARENA_MAX, count); }

// MARK: Signals
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t pz_signal_pipe_write_end = -1;

static void pz_forward_signal(int number, siginfo_t *info, void *context) {
    (void)context;
    int saved = errno;
    struct pz_signal_record record = {number, info ? info->si_code : 0, info ? (int32_t)info->si_pid : 0};
    if (pz_signal_pipe_write_end >= 0) {
        // At most PIPE_BUF bytes: written whole or not at all.
        ssize_t ignored = write(pz_signal_pipe_write_end, &record, sizeof record);
        (void)ignored;
    }
    errno = saved;
}

int pz_signals_forward_to_pipe(const int *signals, int count) {
    int ends[2];
    if (pipe2(ends, O_CLOEXEC) != 0) return -1;
    int flags = fcntl(ends[1], F_GETFL);
    if (flags < 0 || fcntl(ends[1], F_SETFL, flags | O_NONBLOCK) != 0) {
        close(ends[0]);
        close(ends[1]);
        return -1;
    }
    pz_signal_pipe_write_end = ends[1];
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = pz_forward_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&action.sa_mask);
    for (int i = 0; i < count; i++) {
        if (sigaction(signals[i], &action, NULL) != 0) return -1;
    }
    return ends[0];
}

int pz_set_current_thread_name(const char *name) { return pthread_setname_np(pthread_self(), name); }
