/* Unit tests of kernels/bulk_shape.h: the streamed decode attention's shared memory a block, and
 * the carveout its launch asks for, which must hold one block and not two on a Hopper SM for
 * every ring, stage length and q heads a block the switches allow (one block a SM: in the step
 * two blocks paired up on the SMs that freed first, BENCHMARKS.md, forty-second session). */
#include "bulk_shape.h"

#include <CUnit/CUnit.h>

#include "cunit_tap.h"

#define WARPS 8 /* the streamed kernel's 256 threads */

/* Hopper: 228 KB of shared memory a SM at most, in these configurations (KB); a carveout
 * preference between two is rounded up to the larger (CUDA C++ Programming Guide, "Shared
 * Memory" of compute capabilities 7.x and 9.0) */
static const int hopper_kb[] = {0, 8, 16, 32, 64, 100, 132, 164, 196, 228};
#define HOPPER_SMEM_PER_SM (228 * 1024)

/* the configuration, in bytes, that a carveout of pct percent selects (-1: none holds it) */
static long hopper_config(int pct)
{
    const double want = (double)pct * HOPPER_SMEM_PER_SM / 100.0;
    for (unsigned i = 0; i < sizeof hopper_kb / sizeof hopper_kb[0]; i++)
        if (hopper_kb[i] * 1024.0 >= want) return hopper_kb[i] * 1024L;
    return -1;
}

static void test_smem(void)
{
    /* the default ring: 2 stages of 64 positions, K and V rows of 256 bytes */
    CU_ASSERT_EQUAL(ls_bulk_smem(2, 64, 4, WARPS), 65536);
    CU_ASSERT_EQUAL(ls_bulk_smem(6, 64, 8, WARPS), 196608);
    /* one stage of 32 positions (16 KB): the merge's warp states are larger at 2 q heads or
     * more (8 warps x gm x 130 floats) */
    CU_ASSERT_EQUAL(ls_bulk_smem(1, 32, 1, WARPS), 16384);
    CU_ASSERT_EQUAL(ls_bulk_smem(1, 32, 4, WARPS), 16640);
    CU_ASSERT_EQUAL(ls_bulk_smem(1, 32, 8, WARPS), 33280);
}

static void test_one_block_a_sm(void)
{
    static const int stages[] = {32, 64}, heads[] = {1, 2, 4, 8};
    int cases = 0;
    for (int ring = 1; ring <= 6; ring++)
        for (int s = 0; s < 2; s++)
            for (int h = 0; h < 4; h++) {
                const size_t smem = ls_bulk_smem(ring, stages[s], heads[h], WARPS);
                const long block = (long)smem + LS_SMEM_BLOCK_RESERVE;
                const int pct = ls_bulk_carveout(smem, HOPPER_SMEM_PER_SM);
                const long config = hopper_config(pct);
                CU_ASSERT(pct >= 0 && pct <= 100);
                CU_ASSERT(config >= block);    /* one block fits */
                CU_ASSERT(config < 2 * block); /* a second does not */
                cases++;
            }
    CU_ASSERT_EQUAL(cases, 48);
}

static void test_carveout_rounds_up(void)
{
    /* 64 KB + 1 KB of 228 KB is 28.5%: 29, which selects the 100 KB configuration */
    CU_ASSERT_EQUAL(ls_bulk_carveout(65536, HOPPER_SMEM_PER_SM), 29);
    CU_ASSERT_EQUAL(hopper_config(29), 100 * 1024);
    /* whole percents: the preference never falls short of the block, and exceeds it by less than
     * one percent */
    for (size_t smem = 0; smem <= 200 * 1024; smem += 128) {
        const int pct = ls_bulk_carveout(smem, HOPPER_SMEM_PER_SM);
        const double want = (double)pct * HOPPER_SMEM_PER_SM / 100.0;
        const double block = (double)smem + LS_SMEM_BLOCK_RESERVE;
        CU_ASSERT(want >= block && want < block + HOPPER_SMEM_PER_SM / 100.0);
    }
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("bulk_shape", NULL, NULL);
    CU_add_test(s, "a block's shared memory: the ring or the merge's warp states", test_smem);
    CU_add_test(s, "the carveout holds one block and not two, every ring", test_one_block_a_sm);
    CU_add_test(s, "the carveout rounds up", test_carveout_rounds_up);
    return ls_cunit_run_tap();
}
