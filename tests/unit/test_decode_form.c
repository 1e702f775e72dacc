/* Unit tests of runtime/decode_form.h: the decode form the CUDA backend picks by context. Within
 * the cluster merge's reach, form 0 whatever the switches; past it, the streamed form (2) where
 * it applies from where the q heads' re-reads pass 16 MiB, else the no-cluster form (1) from
 * the earlier of 40 MB of re-reads and the measured start; the switches LOCKSTEP_ATT_CLUSTER_CTX
 * and LOCKSTEP_ATT_BULK_CTX as documented; and along any context the forms never step back. */
#include "decode_form.h"

#include <CUnit/CUnit.h>
#include <limits.h>

#include "cunit_tap.h"

#define UNSET_CLUSTER INT_MAX
#define UNSET_BULK    (-1)

/* the first context past `from` with form `form` for the given shape and switches (0: none up
 * to 1 << 20) */
static int first_of(int form, int hq, int hkv, int hd, int reach, int bulk_ok, int cf, int bf)
{
    for (int ctx = 1; ctx <= 1 << 20; ctx++)
        if (ls_decode_form_pick(ctx, hq, hkv, hd, reach, bulk_ok, cf, bf) == form) return ctx;
    return 0;
}

static void test_default_starts(void)
{
    /* the 8B at TP=1 (32 q / 8 KV of 128) and the 70B at TP=2 (32 / 4): 16 MiB at 1024 */
    CU_ASSERT_EQUAL(first_of(2, 32, 8, 128, 512, 1, UNSET_CLUSTER, UNSET_BULK), 1025);
    CU_ASSERT_EQUAL(first_of(2, 32, 4, 128, 512, 1, UNSET_CLUSTER, UNSET_BULK), 1025);
    CU_ASSERT_EQUAL(first_of(1, 32, 8, 128, 512, 1, UNSET_CLUSTER, UNSET_BULK), 0);
    /* the 8B at TP=2 (16 / 4): 2048; at TP=4 (8 / 2): 4096 */
    CU_ASSERT_EQUAL(first_of(2, 16, 4, 128, 512, 1, UNSET_CLUSTER, UNSET_BULK), 2049);
    CU_ASSERT_EQUAL(first_of(2, 8, 2, 128, 512, 1, UNSET_CLUSTER, UNSET_BULK), 4097);
    /* where the streamed form does not apply (hd 64, no Hopper): form 1 from the earlier of
     * 40 MB of re-reads (2441 at 32 q heads of 128, 4882 at 16) and 3072 (> 4 KV) / 6144 */
    CU_ASSERT_EQUAL(first_of(1, 32, 8, 128, 512, 0, UNSET_CLUSTER, UNSET_BULK), 2442);
    CU_ASSERT_EQUAL(first_of(1, 16, 4, 128, 512, 0, UNSET_CLUSTER, UNSET_BULK), 4883);
    CU_ASSERT_EQUAL(first_of(1, 9, 3, 64, 512, 0, UNSET_CLUSTER, UNSET_BULK), 6145);
    CU_ASSERT_EQUAL(first_of(2, 9, 3, 64, 512, 0, UNSET_CLUSTER, UNSET_BULK), 0);
}

static void test_cluster_reach_keeps_form_0(void)
{
    /* the bench's cache (401 positions, the whole cache within the reach) */
    for (int ctx = 1; ctx <= 401; ctx++)
        CU_ASSERT_EQUAL(ls_decode_form_pick(ctx, 32, 8, 128, 401, 1, UNSET_CLUSTER, UNSET_BULK), 0);
    /* a reach past the rule's start: form 0 up to it, then form 2 at once */
    CU_ASSERT_EQUAL(first_of(2, 32, 8, 128, 4096, 1, UNSET_CLUSTER, UNSET_BULK), 4097);
    CU_ASSERT_EQUAL(ls_decode_form_pick(4096, 32, 8, 128, 4096, 1, UNSET_CLUSTER, 1), 0);
}

static void test_switches(void)
{
    /* LOCKSTEP_ATT_CLUSTER_CTX=0: form 0 at every context */
    CU_ASSERT_EQUAL(first_of(1, 32, 8, 128, 512, 1, 0, UNSET_BULK), 0);
    CU_ASSERT_EQUAL(first_of(2, 32, 8, 128, 512, 1, 0, UNSET_BULK), 0);
    /* LOCKSTEP_ATT_BULK_CTX=0: never form 2; form 1 from the rule */
    CU_ASSERT_EQUAL(first_of(2, 32, 8, 128, 512, 1, UNSET_CLUSTER, 0), 0);
    CU_ASSERT_EQUAL(first_of(1, 32, 8, 128, 512, 1, UNSET_CLUSTER, 0), 2442);
    /* LOCKSTEP_ATT_BULK_CTX=8192 (stage attbulk's model: 8 q / 2 KV): form 1 from 6144, then 2 */
    CU_ASSERT_EQUAL(first_of(1, 8, 2, 128, 512, 1, UNSET_CLUSTER, 8192), 6145);
    CU_ASSERT_EQUAL(first_of(2, 8, 2, 128, 512, 1, UNSET_CLUSTER, 8192), 8193);
    CU_ASSERT_EQUAL(ls_decode_form_pick(8192, 8, 2, 128, 512, 1, UNSET_CLUSTER, 8192), 1);
    /* both set, as the session's measurements did: form 2 from N */
    CU_ASSERT_EQUAL(first_of(2, 32, 8, 128, 512, 1, 750, 750), 751);
    CU_ASSERT_EQUAL(first_of(1, 32, 8, 128, 512, 1, 750, 750), 0);
    /* LOCKSTEP_ATT_CLUSTER_CTX=N alone: form 1 from N where form 2 does not start earlier */
    CU_ASSERT_EQUAL(first_of(1, 32, 8, 128, 512, 0, 900, UNSET_BULK), 901);
    CU_ASSERT_EQUAL(first_of(1, 32, 8, 128, 512, 1, 900, UNSET_BULK), 901);
    CU_ASSERT_EQUAL(first_of(2, 32, 8, 128, 512, 1, 900, UNSET_BULK), 1025);
}

static void test_forms_never_step_back(void)
{
    static const int shapes[][3] = {{32, 8, 128}, {32, 4, 128}, {16, 4, 128}, {8, 2, 128},
                                    {64, 8, 128}, {9, 3, 64},   {15, 5, 64}};
    static const int reaches[] = {1, 512, 3000};
    static const int cfs[] = {UNSET_CLUSTER, 0, 600, 5000};
    static const int bfs[] = {UNSET_BULK, 0, 700, 9000};
    int bad = 0;
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (unsigned r = 0; r < sizeof reaches / sizeof reaches[0]; r++)
            for (unsigned c = 0; c < sizeof cfs / sizeof cfs[0]; c++)
                for (unsigned b = 0; b < sizeof bfs / sizeof bfs[0]; b++)
                    for (int ok = 0; ok <= 1; ok++) {
                        int last = 0;
                        for (int ctx = 1; ctx <= 20000; ctx++) {
                            const int f = ls_decode_form_pick(ctx, shapes[s][0], shapes[s][1],
                                                              shapes[s][2], reaches[r], ok, cfs[c],
                                                              bfs[b]);
                            bad += f < last || f < 0 || f > 2 || (f == 2 && !ok);
                            last = f;
                        }
                    }
    CU_ASSERT_EQUAL(bad, 0);
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("decode_form", NULL, NULL);
    CU_add_test(s, "the default starts of forms 1 and 2 by shape", test_default_starts);
    CU_add_test(s, "the cluster merge's reach keeps form 0", test_cluster_reach_keeps_form_0);
    CU_add_test(s, "LOCKSTEP_ATT_CLUSTER_CTX and LOCKSTEP_ATT_BULK_CTX", test_switches);
    CU_add_test(s, "along a context the forms never step back", test_forms_never_step_back);
    return ls_cunit_run_tap();
}
