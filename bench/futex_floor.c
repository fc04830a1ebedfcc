/* futex_floor: the C floor of a wake after idle (bench/idle_anchors.py builds and runs it).

   usage: futex_floor GAP_S [GAP_S ...]

   Two processes (fork) share one anonymous mapping. For each GAP_S in order, the waiter
   is blocked in FUTEX_WAIT on a 32-bit word; the waker sleeps GAP_S seconds, stamps
   CLOCK_MONOTONIC, stores the stamp and then the word (release) and calls FUTEX_WAKE,
   as the library's writer does; the waiter stamps on return. Then the waker waits (a
   futex too) until the waiter has recorded the sample and is about to block again.
   Prints one JSON object on stdout: {"gaps_s": [...], "one_way_ns": [...]}, one
   latency per gap, in the given order. Exit status 2 on bad arguments, 1 on a failed
   system call. */
#define _GNU_SOURCE
#include <errno.h>
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

struct shared {
    uint32_t word;  /* the sample number published; the waiter blocks on it */
    uint32_t done;  /* the sample number the waiter has recorded; the waker blocks on it */
    int64_t stamp;  /* the waker's CLOCK_MONOTONIC just before the store */
    int64_t late[MAX_GAPS];
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

static void publish(uint32_t *addr, uint32_t value) {
    __atomic_store_n(addr, value, __ATOMIC_RELEASE);
    if (syscall(SYS_futex, addr, FUTEX_WAKE, 1, NULL, NULL, 0) == -1) {
        perror("futex_floor: FUTEX_WAKE");
        exit(1);
    }
}

static void waiter(struct shared *s, int n) {
    for (uint32_t i = 1; i <= (uint32_t)n; i++) {
        futex_wait(&s->word, i - 1);
        int64_t t = now_ns();
        s->late[i - 1] = t - s->stamp;
        publish(&s->done, i);
    }
}

static void waker(struct shared *s, const double *gaps, int n) {
    for (uint32_t i = 1; i <= (uint32_t)n; i++) {
        double g = gaps[i - 1];
        struct timespec d = {(time_t)g, (long)((g - (double)(time_t)g) * 1e9)};
        while (nanosleep(&d, &d) == -1 && errno == EINTR) {
        }
        s->stamp = now_ns();
        publish(&s->word, i);  /* the release store orders the stamp before the word */
        futex_wait(&s->done, i - 1);
    }
}

int main(int argc, char **argv) {
    int n = argc - 1;
    if (n < 1 || n > MAX_GAPS) {
        fprintf(stderr, "usage: futex_floor GAP_S [GAP_S ...] (1..%d gaps)\n", MAX_GAPS);
        return 2;
    }
    double gaps[MAX_GAPS];
    for (int i = 0; i < n; i++) {
        char *end;
        gaps[i] = strtod(argv[i + 1], &end);
        if (*end != '\0' || !(gaps[i] >= 0.0)) {
            fprintf(stderr, "futex_floor: not a gap in seconds: %s\n", argv[i + 1]);
            return 2;
        }
    }
    struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) {
        perror("futex_floor: mmap");
        return 1;
    }
    pid_t pid = fork();
    if (pid == -1) {
        perror("futex_floor: fork");
        return 1;
    }
    if (pid == 0) {
        waiter(s, n);
        _exit(0);
    }
    waker(s, gaps, n);
    int status;
    if (waitpid(pid, &status, 0) == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "futex_floor: the waiter did not exit cleanly\n");
        return 1;
    }
    printf("{\"gaps_s\": [");
    for (int i = 0; i < n; i++) {
        printf("%s%.6g", i ? ", " : "", gaps[i]);
    }
    printf("], \"one_way_ns\": [");
    for (int i = 0; i < n; i++) {
        printf("%s%lld", i ? ", " : "", (long long)s->late[i]);
    }
    printf("]}\n");
    return 0;
}
