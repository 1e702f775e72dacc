/* See cunit_tap.h. CUnit's basic runner installs its own handlers and prints a summary that
 * is not TAP; we run the registry with CU_run_all_tests and print "ok N - suite: test" / "not ok N
 * - ..." from the completion handler, with each failed assertion as a TAP diagnostic line. */
#include "cunit_tap.h"

#include <CUnit/CUnit.h>
#include <CUnit/TestRun.h>
#include <stdio.h>

static unsigned tap_count;

static void on_test_complete(const CU_pTest test, const CU_pSuite suite,
                             const CU_pFailureRecord fail)
{
    tap_count++;
    printf("%sok %u - %s: %s\n", fail ? "not " : "", tap_count, suite->pName, test->pName);
    for (CU_pFailureRecord f = fail; f; f = f->pNext)
        printf("# %s:%u: %s\n", f->strFileName ? f->strFileName : "?", f->uiLineNumber,
               f->strCondition ? f->strCondition : "?");
    fflush(stdout);
}

static void on_suite_init_failure(const CU_pSuite suite)
{
    tap_count++;
    printf("not ok %u - %s: suite setup failed\n", tap_count, suite->pName);
}

int ls_cunit_run_tap(void)
{
    CU_pTestRegistry reg = CU_get_registry();
    unsigned total = reg ? reg->uiNumberOfTests : 0;
    printf("1..%u\n", total);
    CU_set_test_complete_handler(on_test_complete);
    CU_set_suite_init_failure_handler(on_suite_init_failure);
    CU_run_all_tests();
    unsigned failed = CU_get_number_of_tests_failed() + CU_get_number_of_suites_failed();
    unsigned run = CU_get_number_of_tests_run();
    printf("# CUnit: %u tests run, %u passed, %u failed\n", run,
           run - CU_get_number_of_tests_failed(), CU_get_number_of_tests_failed());
    CU_cleanup_registry();
    return failed || run != total ? 1 : 0;
}
