/* futex_floor: the C floor of a wake after idle (bench/idle_anchors.py builds and runs it).

   usage: futex_floor [-w WAITERS] GAP_S [GAP_S ...]

   WAITERS + 1 processes (fork) share one anonymous mapping. For each GAP_S in order,
   the waiters (1 unless -w says more, up to MAX_WAITERS) are blocked in FUTEX_WAIT on
   one 32-bit word; the waker sleeps GAP_S seconds, stamps CLOCK_MONOTONIC, stores the
   stamp and then the word (release) and calls FUTEX_WAKE for all of them, as the
   library's writer wakes its sleeping readers; each waiter stamps on return. Then the
   waker waits (a futex too) until every waiter has recorded the sample and is about to
   block again. Prints one JSON object on stdout:
   {"gaps_s": [...], "waiters": W, "one_way_ns": [...]}, W latencies per gap (waiter 0
   first), the gaps in the given order. Exit status 2 on bad arguments, 1 on a failed
   system call. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_GAPS 4096
#define MAX_WAITERS 8

struct shared {
    uint32_t word;  /* the sample number published; the waiter blocks on it */
    uint32_t done;  /* the samples the waiters have recorded; the waker blocks on it */
    int64_t stamp;  /* the waker's CLOCK_MONOTONIC just before the store */
    int64_t late[MAX_GAPS * MAX_WAITERS];
};

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void futex_wait(uint32_t *addr, uint32_t seen) {
    /* returns once *addr != seen (a spurious wake or EINTR loops back) */
    while (__atomic_load_n(addr, __ATOMIC_ACQUIRE) == seen) {
        if (syscall(SYS_futex, addr, FUTEX_WAIT, seen, NULL, NULL, 0) == -1 &&
            errno != EAGAIN && errno != EINTR) {
            perror("futex_floor: FUTEX_WAIT");
            exit(1);
        }
    }
}

static void wake(uint32_t *addr) {
    if (syscall(SYS_futex, addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0) == -1) {
        perror("futex_floor: FUTEX_WAKE");
        exit(1);
    }
}

static void publish(uint32_t *addr, uint32_t value) {
    __atomic_store_n(addr, value, __ATOMIC_RELEASE);
    wake(addr);
}

static void waiter(struct shared *s, int n, int w, int waiters) {
    for (uint32_t i = 1; i <= (uint32_t)n; i++) {
        futex_wait(&s->word, i - 1);
        int64_t t = now_ns();
        s->late[(i - 1) * (uint32_t)waiters + (uint32_t)w] = t - s->stamp;
        if (__atomic_add_fetch(&s->done, 1, __ATOMIC_ACQ_REL) == i * (uint32_t)waiters) {
            wake(&s->done);  /* the last waiter of this sample */
        }
    }
}

static void all_done(struct shared *s, uint32_t target) {
    /* returns once every waiter has recorded its sample: done == target */
    uint32_t seen;
    while ((seen = __atomic_load_n(&s->done, __ATOMIC_ACQUIRE)) != target) {
        futex_wait(&s->done, seen);
    }
}

static void waker(struct shared *s, const double *gaps, int n, int waiters) {
    for (uint32_t i = 1; i <= (uint32_t)n; i++) {
        double g = gaps[i - 1];
        struct timespec d = {(time_t)g, (long)((g - (double)(time_t)g) * 1e9)};
        while (nanosleep(&d, &d) == -1 && errno == EINTR) {
        }
        s->stamp = now_ns();
        publish(&s->word, i);  /* the release store orders the stamp before the word */
        all_done(s, i * (uint32_t)waiters);
    }
}

int main(int argc, char **argv) {
    int first = 1, waiters = 1;
    if (argc > 2 && argv[1][0] == '-' && argv[1][1] == 'w' && argv[1][2] == '\0') {
        char *end;
        long w = strtol(argv[2], &end, 10);
        if (*end != '\0' || w < 1 || w > MAX_WAITERS) {
            fprintf(stderr, "futex_floor: -w wants 1..%d waiters, got %s\n", MAX_WAITERS,
                    argv[2]);
            return 2;
        }
        waiters = (int)w;
        first = 3;
    }
    int n = argc - first;
    if (n < 1 || n > MAX_GAPS) {
        fprintf(stderr, "usage: futex_floor [-w WAITERS] GAP_S [GAP_S ...] (1..%d gaps)\n",
                MAX_GAPS);
        return 2;
    }
    static double gaps[MAX_GAPS];
    for (int i = 0; i < n; i++) {
        char *end;
        gaps[i] = strtod(argv[first + i], &end);
        if (*end != '\0' || !(gaps[i] >= 0.0)) {
            fprintf(stderr, "futex_floor: not a gap in seconds: %s\n", argv[first + i]);
            return 2;
        }
    }
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) {
        perror("futex_floor: mmap");
        return 1;
    }
    pid_t pids[MAX_WAITERS];
    for (int w = 0; w < waiters; w++) {
        pids[w] = fork();
        if (pids[w] == -1) {
            perror("futex_floor: fork");
            return 1;
        }
        if (pids[w] == 0) {
            waiter(s, n, w, waiters);
            _exit(0);
        }
    }
    waker(s, gaps, n, waiters);
    for (int w = 0; w < waiters; w++) {
        int status;
        if (waitpid(pids[w], &status, 0) == -1 || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "futex_floor: waiter %d did not exit cleanly\n", w);
            return 1;
        }
    }
    printf("{\"gaps_s\": [");
    for (int i = 0; i < n; i++) {
        printf("%s%.6g", i ? ", " : "", gaps[i]);
    }
    printf("], \"waiters\": %d, \"one_way_ns\": [", waiters);
    for (int i = 0; i < n * waiters; i++) {
        printf("%s%lld", i ? ", " : "", (long long)s->late[i]);
    }
    printf("]}\n");
    return 0;
}
