/* Runs every registered CUnit suite and reports each test as one TAP line, so the automake
 * harness counts tests one by one. Register suites with CU_add_suite/CU_add_test after
 * CU_initialize_registry, then return ls_cunit_run_tap(). */
#ifndef LOCKSTEP_CUNIT_TAP_H
#define LOCKSTEP_CUNIT_TAP_H

int ls_cunit_run_tap(void);

#endif
