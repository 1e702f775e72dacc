/* Hostfile parsing and mpirun composition (launcher/hostfile.c). Each malformation is checked
 * for the file, line, problem and found text in its message, because a launcher error is only
 * useful if it says where to look. Composition is checked on made-up node facts (GPUs, cores,
 * root, environment), so every branch runs on any machine. */
#include "hostfile.h"
#include "cunit_tap.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char err[1024];

static int parse(const char *text, struct ls_hostfile *hf)
{
    strcpy(err, "(untouched)");
    return ls_hostfile_parse_string(text, "hf.txt", hf, err, sizeof err);
}

/* the parse fails and its message holds every one of the needles */
static int fails_with(const char *text, const char *n1, const char *n2, const char *n3)
{
    struct ls_hostfile hf;
    memset(&hf, 0xab, sizeof hf); /* poison: a failed parse must leave it empty */
    int rc = parse(text, &hf);
    int ok = rc == -1 && hf.hosts == NULL && hf.nhosts == 0 && hf.path == NULL;
    const char *needles[] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i] && !strstr(err, needles[i])) ok = 0;
    if (!ok) printf("# got rc %d, err: %s\n", rc, err);
    if (rc == 0) ls_hostfile_free(&hf);
    return ok;
}

/* ---- parsing ---- */

static void test_parses_slots_and_max_slots(void)
{
    struct ls_hostfile hf;
    CU_ASSERT_EQUAL_FATAL(parse("node1 slots=8 max_slots=16\nnode2 max-slots=9 slots=4\n", &hf), 0);
    CU_ASSERT_STRING_EQUAL(hf.path, "hf.txt");
    CU_ASSERT_EQUAL(hf.nhosts, 2);
    CU_ASSERT_STRING_EQUAL(hf.hosts[0].name, "node1");
    CU_ASSERT_EQUAL(hf.hosts[0].slots, 8);
    CU_ASSERT_EQUAL(hf.hosts[0].max_slots, 16);
    CU_ASSERT_EQUAL(hf.hosts[0].line, 1);
    CU_ASSERT_EQUAL(hf.hosts[1].slots, 4);
    CU_ASSERT_EQUAL(hf.hosts[1].max_slots, 9);
    CU_ASSERT_EQUAL(hf.hosts[1].line, 2);
    CU_ASSERT_EQUAL(hf.hosts[1].colon_form, 0);
    ls_hostfile_free(&hf);
    CU_ASSERT_PTR_NULL(hf.hosts);
}

static void test_parses_colon_form(void)
{
    struct ls_hostfile hf;
    CU_ASSERT_EQUAL_FATAL(parse("gpu-a.cluster:4\n10.0.0.2:4 max_slots=4", &hf), 0);
    CU_ASSERT_EQUAL(hf.nhosts, 2);
    CU_ASSERT_STRING_EQUAL(hf.hosts[0].name, "gpu-a.cluster");
    CU_ASSERT_EQUAL(hf.hosts[0].slots, 4);
    CU_ASSERT_EQUAL(hf.hosts[0].colon_form, 1);
    CU_ASSERT_STRING_EQUAL(hf.hosts[1].name, "10.0.0.2");
    CU_ASSERT_EQUAL(hf.hosts[1].max_slots, 4);
    ls_hostfile_free(&hf);
}

static void test_skips_comments_blanks_and_crlf(void)
{
    struct ls_hostfile hf;
    const char *text = "# cluster A\n\n   \t\n  node_1   slots=2   # the first\r\n"
                       "#node9 slots=1\nnode2\tslots=2\r\n\n# end";
    CU_ASSERT_EQUAL_FATAL(parse(text, &hf), 0);
    CU_ASSERT_EQUAL(hf.nhosts, 2);
    CU_ASSERT_STRING_EQUAL(hf.hosts[0].name, "node_1");
    CU_ASSERT_EQUAL(hf.hosts[0].line, 4);
    CU_ASSERT_STRING_EQUAL(hf.hosts[1].name, "node2");
    CU_ASSERT_EQUAL(hf.hosts[1].slots, 2);
    CU_ASSERT_EQUAL(hf.hosts[1].line, 6);
    CU_ASSERT_EQUAL(hf.cr_line_ends, 1);
    ls_hostfile_free(&hf);
    /* a CR inside a comment is no CR for Open MPI's parser */
    CU_ASSERT_EQUAL_FATAL(parse("# CRLF comment\r\nnode1 slots=2\n", &hf), 0);
    CU_ASSERT_EQUAL(hf.cr_line_ends, 0);
    ls_hostfile_free(&hf);
}

static void test_host_without_slots_has_no_count(void)
{
    struct ls_hostfile hf;
    CU_ASSERT_EQUAL_FATAL(parse("localhost\n", &hf), 0);
    CU_ASSERT_EQUAL(hf.nhosts, 1);
    CU_ASSERT_EQUAL(hf.hosts[0].slots, 0);
    ls_hostfile_free(&hf);
}

static void test_rejects_empty_file(void)
{
    CU_ASSERT(fails_with("", "hostfile hf.txt:", "no hosts", "an empty file"));
    CU_ASSERT(fails_with("# nothing\n\n  \n", "no hosts", "only comments", NULL));
}

static void test_rejects_bad_host_names(void)
{
    CU_ASSERT(fails_with("node1 slots=1\nno!de slots=2\n", "hf.txt line 2", "bad host name",
                         "found 'no!de'"));
    CU_ASSERT(fails_with("-node slots=2\n", "line 1", "bad host name", "'-node'"));
    CU_ASSERT(fails_with("slots=2\n", "line 1", "bad host name", "'slots=2'"));
    char longname[300];
    memset(longname, 'a', 256);
    longname[256] = 0;
    CU_ASSERT(fails_with(longname, "bad host name", "at most 255", "...'"));
}

static void test_rejects_bad_slot_counts(void)
{
    CU_ASSERT(fails_with("a slots=0\n", "line 1", "bad slots value", "found '0'"));
    CU_ASSERT(fails_with("a slots=-2\n", "bad slots value", "positive integer", "'-2'"));
    CU_ASSERT(fails_with("a slots=8x\n", "bad slots value", "'8x'", NULL));
    CU_ASSERT(
        fails_with("a slots=99999999999999999999\n", "bad slots value", "up to 1048576", NULL));
    CU_ASSERT(fails_with("a slots=\n", "bad slots value", "found ''", NULL));
    CU_ASSERT(fails_with("a max_slots=x\n", "bad max_slots value", "'x'", NULL));
    CU_ASSERT(fails_with("a:0\n", "bad slot count after ':'", "found '0'", NULL));
    CU_ASSERT(fails_with("a:\n", "bad slot count after ':'", "found ''", NULL));
}

static void test_rejects_unknown_and_valueless_fields(void)
{
    CU_ASSERT(
        fails_with("a slots=2\nb slots=2 gpus=2\n", "line 2", "unknown field", "found 'gpus=2'"));
    CU_ASSERT(fails_with("a slots = 2\n", "field without a value", "slots=N", "found 'slots'"));
    CU_ASSERT(fails_with("a b\n", "field without a value", "found 'b'", NULL));
}

static void test_rejects_duplicate_hosts(void)
{
    CU_ASSERT(fails_with("n1 slots=8\nn2 slots=8\n\nN1 slots=8\n", "line 4", "duplicate host",
                         "already on line 1"));
}

static void test_rejects_counts_given_twice(void)
{
    CU_ASSERT(fails_with("a:4 slots=4\n", "slot count given twice", "host:N or slots=N, not both",
                         "found 'slots=4'"));
    CU_ASSERT(fails_with("a slots=2 slots=4\n", "slot count given twice", NULL, NULL));
    CU_ASSERT(fails_with("a max_slots=2 max-slots=4\n", "max_slots given twice", NULL, NULL));
    CU_ASSERT(fails_with("a slots=8 max_slots=4\n", "max_slots below slots",
                         "found 'slots=8 max_slots=4'", NULL));
}

static void test_parse_file_reads_and_names_the_file(void)
{
    char path[] = "/tmp/test_hostfile_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    const char text[] = "h1 slots=2\nh2 slots=2\n";
    CU_ASSERT_FATAL(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    struct ls_hostfile hf;
    CU_ASSERT_EQUAL(ls_hostfile_parse(path, &hf, err, sizeof err), 0);
    CU_ASSERT_EQUAL(hf.nhosts, 2);
    CU_ASSERT_STRING_EQUAL(hf.path, path);
    ls_hostfile_free(&hf);

    /* a NUL byte on line 2 */
    fd = open(path, O_WRONLY | O_TRUNC);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(write(fd, "h1 slots=2\nh\0 slots=2\n", 22) == 22);
    close(fd);
    CU_ASSERT_EQUAL(ls_hostfile_parse(path, &hf, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "line 2: NUL byte"));
    unlink(path);

    CU_ASSERT_EQUAL(ls_hostfile_parse(path, &hf, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "No such file"));
    CU_ASSERT_EQUAL(ls_hostfile_parse("/tmp", &hf, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "hostfile /tmp: expected a regular file, found a directory");
}

static void test_parse_file_refuses_a_fifo_without_blocking(void)
{
    /* mpirun reads the hostfile again, and a FIFO with no writer would block the parse */
    char dir[] = "/tmp/test_hostfile_XXXXXX", path[64];
    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/fifo", dir);
    CU_ASSERT_FATAL(mkfifo(path, 0600) == 0);
    struct ls_hostfile hf;
    CU_ASSERT_EQUAL(ls_hostfile_parse(path, &hf, err, sizeof err), -1);
    char want[128];
    snprintf(want, sizeof want, "hostfile %s: expected a regular file, found a FIFO", path);
    CU_ASSERT_STRING_EQUAL(err, want);
    unlink(path);
    rmdir(dir);
}

/* ---- words ---- */

static void test_split_words_follows_shell_quoting(void)
{
    char **w = NULL;
    int n = -1;
    CU_ASSERT_EQUAL_FATAL(ls_split_words("  --mca btl ^openib -x 'A=b c' \"d\\\"e\"f g\\ h ''", &w,
                                         &n, err, sizeof err),
                          0);
    CU_ASSERT_EQUAL_FATAL(n, 8);
    const char *want[] = {"--mca", "btl", "^openib", "-x", "A=b c", "d\"ef", "g h", ""};
    for (int i = 0; i < n; i++) CU_ASSERT_STRING_EQUAL(w[i], want[i]);
    CU_ASSERT_PTR_NULL(w[n]);
    ls_words_free(w);

    CU_ASSERT_EQUAL(ls_split_words("   ", &w, &n, err, sizeof err), 0);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_PTR_NULL(w[0]);
    /* no words print as an empty line, not as the NULL that means out of memory */
    struct ls_launch_cmd none = {.argv = w, .argc = 0};
    char *line0 = ls_launch_cmd_string(&none);
    CU_ASSERT_PTR_NOT_NULL_FATAL(line0);
    CU_ASSERT_STRING_EQUAL(line0, "");
    free(line0);
    ls_words_free(w);

    CU_ASSERT_EQUAL(ls_split_words("a 'b", &w, &n, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unterminated '"));
    CU_ASSERT_EQUAL(ls_split_words("a \"b", &w, &n, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unterminated \""));
    CU_ASSERT_EQUAL(ls_split_words("a\\", &w, &n, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "trailing \\"));
}

/* ---- compose ---- */

static char *info_args[] = {"info", NULL};
static char *no_env[] = {NULL};

static struct ls_launch_opts opts(void)
{
    struct ls_launch_opts o = {0};
    o.mpirun = "mpirun";
    o.lockstep = "/opt/ls/bin/lockstep";
    o.nargs = 1;
    o.args = info_args;
    return o;
}

static struct ls_launch_site site(int gpus, int cores)
{
    struct ls_launch_site s = {.gpus_visible = gpus, .cores = cores, .envp = no_env};
    return s;
}

static char line[8192];

/* compose and render; returns the rc and leaves the rendered line (or err) in line */
static int compose(const struct ls_launch_opts *o, const struct ls_hostfile *hf,
                   const struct ls_launch_site *s, struct ls_launch_cmd *c)
{
    strcpy(err, "(untouched)");
    int rc = ls_launch_compose(o, hf, s, c, err, sizeof err);
    if (rc == 0) {
        char *str = ls_launch_cmd_string(c);
        snprintf(line, sizeof line, "%s", str ? str : "(null)");
        free(str);
    } else {
        snprintf(line, sizeof line, "(failed: %s)", err);
    }
    return rc;
}

static void test_single_node_defaults_to_every_visible_gpu(void)
{
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(4, 32);
    struct ls_launch_cmd c;
    CU_ASSERT_EQUAL_FATAL(compose(&o, NULL, &s, &c), 0);
    CU_ASSERT_EQUAL(c.np, 4);
    CU_ASSERT_EQUAL(c.per_node, 4);
    CU_ASSERT_EQUAL(c.nnodes, 1);
    CU_ASSERT_STRING_EQUAL(line, "mpirun -np 4 --map-by ppr:4:node --rank-by slot --bind-to none "
                                 "-x NCCL_NVLS_ENABLE=0 /opt/ls/bin/lockstep info");
    CU_ASSERT_PTR_NULL(c.argv[c.argc]);
    CU_ASSERT_PTR_NULL(c.setenv[0]);
    ls_launch_cmd_free(&c);

    o.tp = 2;
    CU_ASSERT_EQUAL_FATAL(compose(&o, NULL, &s, &c), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "mpirun -np 2 --map-by ppr:2:node "));
    ls_launch_cmd_free(&c);
}

static void test_single_node_refuses_more_ranks_than_gpus(void)
{
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(2, 32);
    struct ls_launch_cmd c;
    o.tp = 4;
    CU_ASSERT_EQUAL(compose(&o, NULL, &s, &c), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--tp 4 needs 4 GPUs but this node has 2"));
    CU_ASSERT_PTR_NULL(c.argv);

    o.tp = 0;
    o.gpus_per_node = 8;
    CU_ASSERT_EQUAL(compose(&o, NULL, &s, &c), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--gpus-per-node 8 but this node has 2 GPUs"));

    o.gpus_per_node = 1; /* fewer than visible is fine: use the first one */
    CU_ASSERT_EQUAL_FATAL(compose(&o, NULL, &s, &c), 0);
    CU_ASSERT_EQUAL(c.np, 1);
    ls_launch_cmd_free(&c);

    s = site(0, 32);
    o.gpus_per_node = 0;
    CU_ASSERT_EQUAL(compose(&o, NULL, &s, &c), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "no GPU visible"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--cpu"));
}

static void test_cpu_run_passes_cpu_and_oversubscribes_past_the_cores(void)
{
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(0, 2);
    struct ls_launch_cmd c;
    o.cpu = 1;
    CU_ASSERT_EQUAL_FATAL(compose(&o, NULL, &s, &c), 0);
    CU_ASSERT_EQUAL(c.np, 1); /* --cpu on one node defaults to one rank */
    ls_launch_cmd_free(&c);

    o.tp = 2;
    char *args[] = {"info", "--bind", "none", NULL};
    o.args = args;
    o.nargs = 3;
    CU_ASSERT_EQUAL_FATAL(compose(&o, NULL, &s, &c), 0);
    CU_ASSERT_PTR_NULL(strstr(line, "--oversubscribe"));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, " /opt/ls/bin/lockstep info --cpu --bind none"));
    CU_ASSERT_STRING_EQUAL(c.argv[c.argc - 1], "none");
    ls_launch_cmd_free(&c);

    o.tp = 3;
    CU_ASSERT_EQUAL_FATAL(compose(&o, NULL, &s, &c), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "-np 3 --map-by ppr:3:node --rank-by slot --bind-to none "
                                        "--oversubscribe -x"));
    ls_launch_cmd_free(&c);

    char *args2[] = {"info", "--cpu", NULL}; /* given already: not twice */
    o.args = args2;
    o.nargs = 2;
    CU_ASSERT_EQUAL_FATAL(compose(&o, NULL, &s, &c), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "lockstep info --cpu"));
    CU_ASSERT_PTR_NULL(strstr(line, "--cpu --cpu"));
    ls_launch_cmd_free(&c);
}

static void test_two_nodes_of_eight_pack_sixteen_ranks(void)
{
    struct ls_hostfile hf;
    CU_ASSERT_EQUAL_FATAL(parse("node1 slots=8\nnode2 slots=8\n", &hf), 0);
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(0, 4); /* a login node: no GPU, few cores, neither matters */
    struct ls_launch_cmd c;
    o.tp = 16;
    CU_ASSERT_EQUAL_FATAL(compose(&o, &hf, &s, &c), 0);
    CU_ASSERT_EQUAL(c.np, 16);
    CU_ASSERT_EQUAL(c.per_node, 8);
    CU_ASSERT_EQUAL(c.nnodes, 2);
    CU_ASSERT_STRING_EQUAL(line, "mpirun -np 16 --hostfile hf.txt --map-by ppr:8:node --rank-by "
                                 "slot --bind-to none -x NCCL_NVLS_ENABLE=0 /opt/ls/bin/lockstep "
                                 "info");
    ls_launch_cmd_free(&c);

    o.tp = 0; /* every slot */
    CU_ASSERT_EQUAL_FATAL(compose(&o, &hf, &s, &c), 0);
    CU_ASSERT_EQUAL(c.np, 16);
    ls_launch_cmd_free(&c);

    o.tp = 8; /* fits on the first node */
    CU_ASSERT_EQUAL_FATAL(compose(&o, &hf, &s, &c), 0);
    CU_ASSERT_EQUAL(c.nnodes, 1);
    ls_launch_cmd_free(&c);

    o.tp = 17;
    CU_ASSERT_EQUAL(compose(&o, &hf, &s, &c), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(
        err, "--tp 17 needs 17 ranks but hostfile hf.txt has 16 (2 hosts x 8 ranks per node"));
    ls_hostfile_free(&hf);
}

static void test_ranks_per_node_is_min_of_slots_and_gpus(void)
{
    struct ls_hostfile hf;
    CU_ASSERT_EQUAL_FATAL(parse("a slots=64\nb slots=64\n", &hf), 0);
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(0, 4);
    struct ls_launch_cmd c;
    o.gpus_per_node = 8;
    CU_ASSERT_EQUAL_FATAL(compose(&o, &hf, &s, &c), 0);
    CU_ASSERT_EQUAL(c.np, 16);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "--map-by ppr:8:node"));
    ls_launch_cmd_free(&c);
    ls_hostfile_free(&hf);

    CU_ASSERT_EQUAL_FATAL(parse("a slots=4\nb slots=4\n", &hf), 0);
    CU_ASSERT_EQUAL_FATAL(compose(&o, &hf, &s, &c), 0); /* fewer slots than GPUs */
    CU_ASSERT_EQUAL(c.np, 8);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "--map-by ppr:4:node"));
    ls_launch_cmd_free(&c);
    ls_hostfile_free(&hf);
}

static void test_hosts_must_take_the_same_rank_count(void)
{
    struct ls_hostfile hf;
    CU_ASSERT_EQUAL_FATAL(parse("a slots=8\nb slots=4\n", &hf), 0);
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(0, 4);
    struct ls_launch_cmd c;
    CU_ASSERT_EQUAL(compose(&o, &hf, &s, &c), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "line 1 'a': 8, line 2 'b': 4"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--gpus-per-node 4"));
    o.gpus_per_node = 4; /* the suggested fix works */
    CU_ASSERT_EQUAL_FATAL(compose(&o, &hf, &s, &c), 0);
    CU_ASSERT_EQUAL(c.np, 8);
    ls_launch_cmd_free(&c);
    ls_hostfile_free(&hf);
}

static void test_host_without_slots_needs_gpus_per_node(void)
{
    struct ls_hostfile hf;
    CU_ASSERT_EQUAL_FATAL(parse("a\nb\n", &hf), 0);
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(0, 4);
    struct ls_launch_cmd c;
    CU_ASSERT_EQUAL(compose(&o, &hf, &s, &c), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "hostfile hf.txt line 1: no slot count for host 'a'"));
    o.gpus_per_node = 2;
    CU_ASSERT_EQUAL_FATAL(compose(&o, &hf, &s, &c), 0);
    CU_ASSERT_EQUAL(c.np, 4);
    ls_launch_cmd_free(&c);
    ls_hostfile_free(&hf);
}

static void test_colon_form_becomes_a_host_list(void)
{
    struct ls_hostfile hf;
    CU_ASSERT_EQUAL_FATAL(parse("a:8\nb slots=8\n", &hf), 0);
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(0, 4);
    struct ls_launch_cmd c;
    o.gpus_per_node = 4;
    CU_ASSERT_EQUAL_FATAL(compose(&o, &hf, &s, &c), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "mpirun -np 8 --host a:4,b:4 --map-by ppr:4:node "));
    CU_ASSERT_PTR_NULL(strstr(line, "--hostfile"));
    ls_launch_cmd_free(&c);
    ls_hostfile_free(&hf);
}

static void test_crlf_file_becomes_a_host_list(void)
{
    /* Open MPI's hostfile parser calls the CR a parse error; --host never sees it */
    struct ls_hostfile hf;
    CU_ASSERT_EQUAL_FATAL(parse("a slots=8\r\nb slots=8\r\n", &hf), 0);
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(0, 4);
    struct ls_launch_cmd c;
    CU_ASSERT_EQUAL_FATAL(compose(&o, &hf, &s, &c), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "mpirun -np 16 --host a:8,b:8 --map-by ppr:8:node "));
    CU_ASSERT_PTR_NULL(strstr(line, "--hostfile"));
    ls_launch_cmd_free(&c);
    ls_hostfile_free(&hf);
}

static void test_hostfile_ranks_past_the_job_limit(void)
{
    /* 2048 hosts x 1048576 slots is 2^31 ranks: an int would wrap to a negative -np */
    size_t cap = 2048 * 32;
    char *text = malloc(cap), *w = text;
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    for (int i = 0; i < 2048; i++) w += sprintf(w, "h%d slots=1048576\n", i);
    struct ls_hostfile hf;
    CU_ASSERT_EQUAL_FATAL(parse(text, &hf), 0);
    free(text);
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(0, 4);
    struct ls_launch_cmd c;
    CU_ASSERT_EQUAL(compose(&o, &hf, &s, &c), -1);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(err, "hostfile hf.txt has 2147483648 ranks (2048 hosts x 1048576 ranks per node)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "expected at most 65536"));
    CU_ASSERT_PTR_NULL(c.argv);
    o.tp = 16; /* --tp picks a part of it */
    CU_ASSERT_EQUAL_FATAL(compose(&o, &hf, &s, &c), 0);
    CU_ASSERT_EQUAL(c.np, 16);
    CU_ASSERT_EQUAL(c.nnodes, 1);
    ls_launch_cmd_free(&c);
    ls_hostfile_free(&hf);
}

static void test_forwards_only_set_variables_sorted(void)
{
    char *env[] = {"PATH=/usr/bin",
                   "NCCL_SOCKET_IFNAME=ib0",
                   "HOME=/root",
                   "CUDA_VISIBLE_DEVICES=0",
                   "NCCL_DEBUG=INFO",
                   "LOCKSTEP_X=1",
                   "NCCL_=odd",
                   "OMP_NUM_THREADS=4",
                   "XNCCL_FOO=1",
                   "NCCL_DEBUG=WARN",
                   "LD_LIBRARY_PATH=/l",
                   "PATHX=1",
                   "garbage",
                   NULL};
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(1, 4);
    s.envp = env;
    struct ls_launch_cmd c;
    CU_ASSERT_EQUAL_FATAL(compose(&o, NULL, &s, &c), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "--bind-to none -x CUDA_VISIBLE_DEVICES -x LD_LIBRARY_PATH "
                                        "-x LOCKSTEP_X -x NCCL_DEBUG -x NCCL_SOCKET_IFNAME "
                                        "-x OMP_NUM_THREADS -x PATH -x NCCL_NVLS_ENABLE=0 "
                                        "/opt/ls/bin/lockstep info"));
    ls_launch_cmd_free(&c);

    char *env2[] = {"NCCL_NVLS_ENABLE=1", NULL}; /* the user's choice is kept */
    s.envp = env2;
    CU_ASSERT_EQUAL_FATAL(compose(&o, NULL, &s, &c), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, " -x NCCL_NVLS_ENABLE /opt"));
    CU_ASSERT_PTR_NULL(strstr(line, "NCCL_NVLS_ENABLE=0"));
    ls_launch_cmd_free(&c);
}

static void test_root_gets_the_flag_and_the_environment(void)
{
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(1, 4);
    struct ls_launch_cmd c;
    s.is_root = 1;
    CU_ASSERT_EQUAL_FATAL(compose(&o, NULL, &s, &c), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "--bind-to none --allow-run-as-root -x"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c.setenv[0]);
    CU_ASSERT_STRING_EQUAL(c.setenv[0], "OMPI_ALLOW_RUN_AS_ROOT=1");
    CU_ASSERT_STRING_EQUAL(c.setenv[1], "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
    CU_ASSERT_PTR_NULL(c.setenv[2]);
    const char *want = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 1 ";
    CU_ASSERT_EQUAL(strncmp(line, want, strlen(want)), 0);
    ls_launch_cmd_free(&c);
}

static void test_extra_args_and_quoting(void)
{
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(1, 4);
    struct ls_launch_cmd c;
    char *args[] = {"run", "--prompt", "it's a \"test\"", "", NULL};
    o.args = args;
    o.nargs = 4;
    o.lockstep = "/opt/my dir/lockstep";
    o.extra_mpi_args = "--mca btl_tcp_if_include 'eth0'";
    CU_ASSERT_EQUAL_FATAL(compose(&o, NULL, &s, &c), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "NCCL_NVLS_ENABLE=0 --mca btl_tcp_if_include eth0 "
                                        "'/opt/my dir/lockstep' run --prompt "
                                        "'it'\\''s a \"test\"' ''"));
    CU_ASSERT_STRING_EQUAL(c.argv[c.argc - 2], "it's a \"test\"");
    CU_ASSERT_STRING_EQUAL(c.argv[c.argc - 1], "");
    ls_launch_cmd_free(&c);

    o.extra_mpi_args = "--mca 'oops";
    CU_ASSERT_EQUAL(compose(&o, NULL, &s, &c), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--extra-mpi-args: unterminated '"));
    CU_ASSERT_PTR_NULL(c.argv);
}

static void test_nothing_to_run_is_an_error(void)
{
    struct ls_launch_opts o = opts();
    struct ls_launch_site s = site(1, 4);
    struct ls_launch_cmd c;
    o.nargs = 0;
    CU_ASSERT_EQUAL(compose(&o, NULL, &s, &c), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "nothing to run"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "'--'"));
}

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite p = CU_add_suite("hostfile_parse", NULL, NULL);
    CU_add_test(p, "parses slots and max_slots", test_parses_slots_and_max_slots);
    CU_add_test(p, "parses host:N", test_parses_colon_form);
    CU_add_test(p, "skips comments, blank lines and CRLF", test_skips_comments_blanks_and_crlf);
    CU_add_test(p, "host without slots has no count", test_host_without_slots_has_no_count);
    CU_add_test(p, "rejects an empty file", test_rejects_empty_file);
    CU_add_test(p, "rejects bad host names", test_rejects_bad_host_names);
    CU_add_test(p, "rejects bad slot counts", test_rejects_bad_slot_counts);
    CU_add_test(p, "rejects unknown and valueless fields",
                test_rejects_unknown_and_valueless_fields);
    CU_add_test(p, "rejects duplicate hosts", test_rejects_duplicate_hosts);
    CU_add_test(p, "rejects counts given twice", test_rejects_counts_given_twice);
    CU_add_test(p, "parses a file and names it in errors",
                test_parse_file_reads_and_names_the_file);
    CU_add_test(p, "refuses a FIFO without blocking",
                test_parse_file_refuses_a_fifo_without_blocking);

    CU_pSuite w = CU_add_suite("words", NULL, NULL);
    CU_add_test(w, "split follows shell quoting", test_split_words_follows_shell_quoting);

    CU_pSuite c = CU_add_suite("launch_compose", NULL, NULL);
    CU_add_test(c, "one node defaults to every visible GPU",
                test_single_node_defaults_to_every_visible_gpu);
    CU_add_test(c, "one node refuses more ranks than GPUs",
                test_single_node_refuses_more_ranks_than_gpus);
    CU_add_test(c, "cpu run passes --cpu and oversubscribes past the cores",
                test_cpu_run_passes_cpu_and_oversubscribes_past_the_cores);
    CU_add_test(c, "two nodes of eight pack sixteen ranks",
                test_two_nodes_of_eight_pack_sixteen_ranks);
    CU_add_test(c, "ranks per node is min(slots, gpus)",
                test_ranks_per_node_is_min_of_slots_and_gpus);
    CU_add_test(c, "hosts must take the same rank count", test_hosts_must_take_the_same_rank_count);
    CU_add_test(c, "host without slots needs --gpus-per-node",
                test_host_without_slots_needs_gpus_per_node);
    CU_add_test(c, "host:N becomes a --host list", test_colon_form_becomes_a_host_list);
    CU_add_test(c, "CRLF file becomes a --host list", test_crlf_file_becomes_a_host_list);
    CU_add_test(c, "hostfile ranks past the job limit", test_hostfile_ranks_past_the_job_limit);
    CU_add_test(c, "forwards only set variables, sorted", test_forwards_only_set_variables_sorted);
    CU_add_test(c, "root gets the flag and the environment",
                test_root_gets_the_flag_and_the_environment);
    CU_add_test(c, "extra mpirun args and shell quoting", test_extra_args_and_quoting);
    CU_add_test(c, "nothing to run is an error", test_nothing_to_run_is_an_error);
    return ls_cunit_run_tap();
}
