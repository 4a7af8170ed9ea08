/* A controlled wall clock for redis-server, for the conformance suite only (never shipped).
 *
 * LD_PRELOAD it with RL_FAKE_CLOCK_FILE naming a file whose first 8 bytes are a Unix time
 * in microseconds (native-endian int64) that the test sets: clock_gettime(CLOCK_REALTIME*)
 * and gettimeofday then return that instant, so the module's clock and the library's TIME
 * read the same value. 0 means the real clock. Monotonic clocks (timers, the event loop)
 * are left alone. The real clock is read by system call, never through dlsym: libfaketime
 * clashes with jemalloc because dlsym allocates while the allocator initialises. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile const int64_t *fake_us;
static volatile int initialised;

static int64_t fake_now_us(void) {
    if (!initialised) {
        const char *path = getenv("RL_FAKE_CLOCK_FILE");
        if (path != NULL) {
            int fd = open(path, O_RDONLY);
            if (fd >= 0) {
                void *map = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
                close(fd);
                if (map != MAP_FAILED) fake_us = map;
            }
        }
        initialised = 1;
    }
    return fake_us != NULL ? *fake_us : 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) {
        int64_t us = fake_now_us();
        if (us > 0) {
            ts->tv_sec = (time_t)(us / 1000000);
            ts->tv_nsec = (long)(us % 1000000) * 1000;
            return 0;
        }
    }
    return (int)syscall(SYS_clock_gettime, id, ts);
}

int gettimeofday(struct timeval *tv, void *tz) {
    int64_t us = fake_now_us();
    if (us > 0 && tv != NULL) {
        tv->tv_sec = (time_t)(us / 1000000);
        tv->tv_usec = (suseconds_t)(us % 1000000);
        return 0;
    }
    return (int)syscall(SYS_gettimeofday, tv, tz);
}
