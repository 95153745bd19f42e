/* A clock a test sets: LD_PRELOAD'ed into a redis-server of the test's own (tests/own_clock.py),
 * it answers gettimeofday() and clock_gettime(CLOCK_REALTIME) from 8 bytes (microseconds since the
 * epoch, little-endian) of the file SET_CLOCK_FILE names, mapped shared: the test writes the time
 * before each command, so the server's TIME, key expiry and stream ids read the same virtual clock
 * as the in-process stores. Other clocks go to the kernel (the event loop's monotonic timers). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *clock_us = 0;

static int64_t now_us(void) {
    if (clock_us == 0) {
        const char *path = getenv("SET_CLOCK_FILE");
        int fd = path ? open(path, O_RDONLY) : -1;
        if (fd < 0) return -1;
        void *p = mmap(0, 8, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) return -1;
        clock_us = (volatile int64_t *)p;
    }
    return *clock_us;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    if (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE) {
        int64_t us = now_us();
        if (us >= 0) {
            ts->tv_sec = us / 1000000;
            ts->tv_nsec = (us % 1000000) * 1000;
            return 0;
        }
    }
    return (int)syscall(SYS_clock_gettime, clk, ts);
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    int64_t us = now_us();
    if (us < 0) {
        struct timespec ts;
        syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
        us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    }
    tv->tv_sec = us / 1000000;
    tv->tv_usec = us % 1000000;
    return 0;
}

time_t time(time_t *out) {
    struct timeval tv;
    gettimeofday(&tv, 0);
    if (out) *out = tv.tv_sec;
    return tv.tv_sec;
}
