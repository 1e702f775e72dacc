/* Bootstrap helpers that need no MPI job and no GPU: device selection per local rank, the
 * split of a node's cores into per-rank shares (on synthetic hwloc topologies), NUMA naming,
 * and the shared flag parsing. */
#include "config.h"
#include "args.h"
#include "bootstrap.h"
#include "cunit_tap.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

static void test_device_is_local_rank_when_enough_gpus(void)
{
    char err[256];
    for (int size = 1; size <= 8; size++)
        for (int r = 0; r < size; r++) {
            int dev = -7;
            CU_ASSERT_EQUAL(ls_select_device(r, size, 8, LS_DEV_AUTO, &dev, err, sizeof err), 0);
            CU_ASSERT_EQUAL(dev, r);
        }
}

static void test_more_ranks_than_gpus_fails_with_counts(void)
{
    char err[256] = "";
    int dev = -7;
    CU_ASSERT_EQUAL(ls_select_device(2, 3, 2, LS_DEV_AUTO, &dev, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "3 ranks but sees 2 GPUs"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--cpu"));
    /* the same layout is fine on CPUs */
    CU_ASSERT_EQUAL(ls_select_device(2, 3, 2, LS_DEV_CPU, &dev, err, sizeof err), 0);
    CU_ASSERT_EQUAL(dev, -1);
}

static void test_no_gpu_means_cpu_unless_gpu_required(void)
{
    char err[256] = "";
    int dev = -7;
    CU_ASSERT_EQUAL(ls_select_device(0, 2, 0, LS_DEV_AUTO, &dev, err, sizeof err), 0);
    CU_ASSERT_EQUAL(dev, -1);
    CU_ASSERT_EQUAL(ls_select_device(0, 2, 0, LS_DEV_GPU, &dev, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--gpu given but no CUDA device"));
}

static void test_cpu_forced_ignores_gpus(void)
{
    char err[256];
    int dev = -7;
    CU_ASSERT_EQUAL(ls_select_device(0, 1, 4, LS_DEV_CPU, &dev, err, sizeof err), 0);
    CU_ASSERT_EQUAL(dev, -1);
}

static hwloc_topology_t synthetic(const char *desc)
{
    hwloc_topology_t t;
    hwloc_topology_init(&t);
    CU_ASSERT_EQUAL_FATAL(hwloc_topology_set_synthetic(t, desc), 0);
    hwloc_topology_load(t);
    return t;
}

/* shares of `within` for count ranks: pairwise disjoint, inside, covering, sizes differ by <= 1
 * core */
static void check_shares(hwloc_topology_t t, hwloc_const_cpuset_t within, int count, int per_core)
{
    hwloc_cpuset_t uni = hwloc_bitmap_alloc(), s = hwloc_bitmap_alloc();
    int lo = 1 << 30, hi = 0;
    for (int i = 0; i < count; i++) {
        hwloc_bitmap_fill(s); /* poison: the helper must overwrite */
        ls_share_of_set(t, within, i, count, s);
        CU_ASSERT_FALSE(hwloc_bitmap_iszero(s));
        CU_ASSERT_TRUE(hwloc_bitmap_isincluded(s, within));
        CU_ASSERT_FALSE(hwloc_bitmap_intersects(s, uni));
        hwloc_bitmap_or(uni, uni, s);
        int w = hwloc_bitmap_weight(s);
        if (w < lo) lo = w;
        if (w > hi) hi = w;
    }
    CU_ASSERT_TRUE(hwloc_bitmap_isequal(uni, within));
    CU_ASSERT_TRUE(hi - lo <= per_core);
    hwloc_bitmap_free(uni);
    hwloc_bitmap_free(s);
}

static void test_cpu_shares_are_disjoint_and_cover_the_node(void)
{
    hwloc_topology_t t = synthetic("pack:2 numa:1 core:8 pu:2");
    hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(t);
    for (int count = 1; count <= 16; count++) check_shares(t, all, count, 2);
    /* more ranks than cores but not than PUs: split by PUs */
    check_shares(t, all, 32, 1);
    hwloc_topology_destroy(t);
}

static void test_cpu_shares_keep_whole_cores(void)
{
    hwloc_topology_t t = synthetic("pack:1 core:4 pu:2");
    hwloc_cpuset_t s = hwloc_bitmap_alloc();
    ls_share_of_set(t, hwloc_topology_get_topology_cpuset(t), 1, 4, s);
    CU_ASSERT_EQUAL(hwloc_bitmap_weight(s), 2);
    CU_ASSERT_TRUE(hwloc_bitmap_isset(s, 2) && hwloc_bitmap_isset(s, 3)); /* core 1 = PUs 2,3 */
    hwloc_bitmap_free(s);
    hwloc_topology_destroy(t);
}

static void test_cpu_shares_overlap_only_past_the_pus(void)
{
    hwloc_topology_t t = synthetic("pack:1 core:2 pu:1");
    hwloc_cpuset_t s = hwloc_bitmap_alloc();
    for (int i = 0; i < 5; i++) {
        ls_share_of_set(t, hwloc_topology_get_topology_cpuset(t), i, 5, s);
        CU_ASSERT_EQUAL(hwloc_bitmap_weight(s), 1);
        CU_ASSERT_TRUE(hwloc_bitmap_isset(s, (unsigned)(i % 2)));
    }
    hwloc_bitmap_free(s);
    hwloc_topology_destroy(t);
}

static void test_gpu_local_set_split_between_its_ranks(void)
{
    /* 4 GPUs near socket 0's CPUs: their 4 ranks split socket 0 and never touch socket 1 */
    hwloc_topology_t t = synthetic("pack:2 numa:1 core:8 pu:1");
    hwloc_obj_t pkg0 = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
    check_shares(t, pkg0->cpuset, 4, 1);
    hwloc_topology_destroy(t);
}

static void test_numa_of_set_names_the_nodes(void)
{
    hwloc_topology_t t = synthetic("pack:2 numa:1 core:4 pu:1");
    char out[64];
    hwloc_obj_t pkg1 = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 1);
    ls_numa_of_set(t, pkg1->cpuset, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "1");
    ls_numa_of_set(t, hwloc_topology_get_topology_cpuset(t), out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "0-1");
    hwloc_topology_destroy(t);
}

static void test_bind_values(void)
{
    enum ls_bind b = LS_BIND_NONE;
    CU_ASSERT_EQUAL(ls_parse_bind("auto", &b), 0);
    CU_ASSERT_EQUAL(b, LS_BIND_AUTO);
    CU_ASSERT_EQUAL(ls_parse_bind("gpu", &b), 0);
    CU_ASSERT_EQUAL(b, LS_BIND_GPU);
    CU_ASSERT_EQUAL(ls_parse_bind("none", &b), 0);
    CU_ASSERT_EQUAL(b, LS_BIND_NONE);
    CU_ASSERT_EQUAL(ls_parse_bind("socket", &b), -1);
    CU_ASSERT_EQUAL(ls_parse_bind("", &b), -1);
}

static void test_parse_long_bounds_and_junk(void)
{
    char err[128];
    long v = 0;
    CU_ASSERT_EQUAL(ls_parse_long("--tp", "8", 1, 64, &v, err, sizeof err), 0);
    CU_ASSERT_EQUAL(v, 8);
    CU_ASSERT_EQUAL(ls_parse_long("--tp", "0", 1, 64, &v, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "expected 1..64, found 0"));
    CU_ASSERT_EQUAL(ls_parse_long("--tp", "8x", 1, 64, &v, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "expected an integer, found '8x'"));
    CU_ASSERT_EQUAL(ls_parse_long("--tp", "", 1, 64, &v, err, sizeof err), -1);
    CU_ASSERT_EQUAL(ls_parse_long("--tp", "99999999999999999999", 1, 64, &v, err, sizeof err), -1);
    /* what strtol would forgive: leading blanks and a plus sign */
    CU_ASSERT_EQUAL(ls_parse_long("--tp", " 2", 1, 64, &v, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "expected an integer, found ' 2'"));
    CU_ASSERT_EQUAL(ls_parse_long("--tp", "+2", 1, 64, &v, err, sizeof err), -1);
    CU_ASSERT_EQUAL(ls_parse_long("--tp", "-", 1, 64, &v, err, sizeof err), -1);
    CU_ASSERT_EQUAL(ls_parse_long("--seed", "-1", -5, 5, &v, err, sizeof err), 0);
    CU_ASSERT_EQUAL(v, -1);
}

static void test_getopt_reports_unknown_and_missing(void)
{
    static const struct option lo[] = {
        LS_COMMON_LONGOPTS, {"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
    char err[128];
    int reset = 1;
    char *a1[] = {"info", "--json", "--bind=none", "--cpu", NULL};
    struct ls_common_opts o;
    ls_common_defaults(&o);
    int opt, seen_json = 0;
    while ((opt = ls_getopt(4, a1, "j", lo, &reset, err, sizeof err)) != -1) {
        if (opt == 'j')
            seen_json = 1;
        else
            CU_ASSERT_EQUAL(ls_common_opt(opt, optarg, &o, err, sizeof err), 0);
    }
    CU_ASSERT_TRUE(seen_json);
    CU_ASSERT_EQUAL(o.bind, LS_BIND_NONE);
    CU_ASSERT_EQUAL(o.device, LS_DEV_CPU);

    char *a2[] = {"info", "--nope", NULL};
    reset = 1;
    CU_ASSERT_EQUAL(ls_getopt(2, a2, "j", lo, &reset, err, sizeof err), '?');
    CU_ASSERT_STRING_EQUAL(err, "unknown flag '--nope'");
    char *a3[] = {"info", "--bind", NULL};
    reset = 1;
    CU_ASSERT_EQUAL(ls_getopt(2, a3, "j", lo, &reset, err, sizeof err), '?');
    CU_ASSERT_STRING_EQUAL(err, "flag '--bind' needs a value");
    char *a4[] = {"info", "-q", NULL};
    reset = 1;
    CU_ASSERT_EQUAL(ls_getopt(2, a4, "j", lo, &reset, err, sizeof err), '?');
    CU_ASSERT_STRING_EQUAL(err, "unknown flag '-q'");
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("device selection", NULL, NULL);
    CU_add_test(s, "local rank r drives GPU r", test_device_is_local_rank_when_enough_gpus);
    CU_add_test(s, "more ranks than GPUs fails with the counts",
                test_more_ranks_than_gpus_fails_with_counts);
    CU_add_test(s, "no GPU runs on CPU unless --gpu", test_no_gpu_means_cpu_unless_gpu_required);
    CU_add_test(s, "--cpu ignores GPUs", test_cpu_forced_ignores_gpus);
    s = CU_add_suite("binding", NULL, NULL);
    CU_add_test(s, "CPU shares are disjoint and cover the node",
                test_cpu_shares_are_disjoint_and_cover_the_node);
    CU_add_test(s, "CPU shares keep whole cores", test_cpu_shares_keep_whole_cores);
    CU_add_test(s, "CPU shares overlap only past the PUs",
                test_cpu_shares_overlap_only_past_the_pus);
    CU_add_test(s, "a GPU-local set is split between its ranks",
                test_gpu_local_set_split_between_its_ranks);
    CU_add_test(s, "NUMA nodes of a set are named", test_numa_of_set_names_the_nodes);
    s = CU_add_suite("flags", NULL, NULL);
    CU_add_test(s, "--bind values", test_bind_values);
    CU_add_test(s, "integer flags: bounds and junk", test_parse_long_bounds_and_junk);
    CU_add_test(s, "unknown flags and missing values are named",
                test_getopt_reports_unknown_and_missing);
    return ls_cunit_run_tap();
}
