/* Unit tests of runtime/watchdog.c: LOCKSTEP_STEP_TIMEOUT parsing (default, off, fractions, the
 * limits, bad values named), and the thread's three outcomes, each in a child process: an armed
 * section older than the timeout ends the process with status 3 and a line naming the section;
 * a probe that reports an error ends it at once; a section disarmed in time, or a timeout of 0,
 * lets the process finish. */
#include "log.h"
#include "watchdog.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cunit_tap.h"

static char err[256];

static double parse(const char *v)
{
    if (v)
        setenv("LOCKSTEP_STEP_TIMEOUT", v, 1);
    else
        unsetenv("LOCKSTEP_STEP_TIMEOUT");
    err[0] = 0;
    return ls_watchdog_timeout(err, sizeof err);
}

static void test_timeout_values(void)
{
    CU_ASSERT_DOUBLE_EQUAL(parse(NULL), 60.0, 0.0);
    CU_ASSERT_DOUBLE_EQUAL(parse(""), 60.0, 0.0);
    CU_ASSERT_DOUBLE_EQUAL(parse("0"), 0.0, 0.0);
    CU_ASSERT_DOUBLE_EQUAL(parse("2.5"), 2.5, 0.0);
    CU_ASSERT_DOUBLE_EQUAL(parse("86400"), 86400.0, 0.0);
    const char *bad[] = {"86401", "-1", "soon", "3s", "nan", "1e9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(parse(bad[i]), -1.0);
        char want[64];
        snprintf(want, sizeof want, "found '%s'", bad[i]);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "LOCKSTEP_STEP_TIMEOUT: expected seconds in [0, 86400]"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    }
    unsetenv("LOCKSTEP_STEP_TIMEOUT");
}

static const char *probe_ok(void *arg)
{
    (void)arg;
    return NULL;
}

static const char *probe_fails(void *arg)
{
    return (const char *)arg;
}

enum child_mode {
    STUCK,       /* stuck in an armed section */
    PROBE_FAILS, /* a probe that reports an error */
    IN_TIME,     /* many short sections, disarmed in time, with a quiet probe */
};

/* runs mode in a child with LOCKSTEP_STEP_TIMEOUT=timeout; returns its exit status (-1: killed
 * or not exited), its stderr in out, and the seconds it took */
static int child(const char *timeout, enum child_mode mode, char *out, size_t outlen,
                 double *took)
{
    int fd[2];
    if (pipe(fd) != 0) return -1;
    const double t0 = ls_now_s();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], STDERR_FILENO);
        close(fd[0]);
        setenv("LOCKSTEP_STEP_TIMEOUT", timeout, 1);
        switch (mode) {
        case STUCK:
            ls_watchdog_arm("decode step at position", 41);
            sleep(5);
            break;
        case PROBE_FAILS:
            ls_watchdog_set_probe(probe_fails, "peer 3 is gone");
            ls_watchdog_arm("decode step at position", 7);
            sleep(5);
            break;
        case IN_TIME:
            ls_watchdog_set_probe(probe_ok, NULL);
            for (int i = 0; i < 20; i++) {
                ls_watchdog_arm("decode step at position", i);
                usleep(20000);
                ls_watchdog_disarm();
                usleep(30000);
            }
            break;
        }
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < outlen && (r = read(fd[0], out + n, outlen - 1 - n)) > 0) n += (size_t)r;
    out[n] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    *took = ls_now_s() - t0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* the child ends with status 3 within 2 s, its line holding both strings */
static void expect_ended(const char *timeout, enum child_mode mode, const char *want1,
                         const char *want2)
{
    char out[1024];
    double took;
    CU_ASSERT_EQUAL(child(timeout, mode, out, sizeof out, &took), 3);
    CU_ASSERT(took < 2.0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want1));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want2));
}

static void test_stuck_section_ends_the_process(void)
{
    expect_ended("0.3", STUCK, "decode step at position 41: no progress in 0.",
                 "(LOCKSTEP_STEP_TIMEOUT=0.3)");
}

static void test_probe_error_ends_the_process(void)
{
    expect_ended("60", PROBE_FAILS, "decode step at position 7: the communicator reports",
                  "peer 3 is gone");
}

static void test_sections_in_time_finish(void)
{
    char out[1024];
    double took;
    /* 20 sections of 20 ms under a 0.3 s timeout, 30 ms apart: 1 s in all, never stale */
    CU_ASSERT_EQUAL(child("0.3", IN_TIME, out, sizeof out, &took), 0);
    CU_ASSERT_STRING_EQUAL(out, "");
    /* timeout 0: off, even for a section that stays armed */
    CU_ASSERT_EQUAL(child("0", STUCK, out, sizeof out, &took), 0);
    CU_ASSERT(took >= 4.5);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("watchdog", NULL, NULL);
    CU_add_test(s, "LOCKSTEP_STEP_TIMEOUT values and errors", test_timeout_values);
    CU_add_test(s, "a stuck section ends the process", test_stuck_section_ends_the_process);
    CU_add_test(s, "a probe's error ends the process", test_probe_error_ends_the_process);
    CU_add_test(s, "sections disarmed in time, or timeout 0, finish", test_sections_in_time_finish);
    return ls_cunit_run_tap();
}
