/*
 * main.c — the `ckptfs` command: argument parsing, the help of each
 * subcommand, and dispatch to the subcommands (commands.h) and the mount
 * daemon (mount.h).  Exit statuses (commands.h): 0 ok, 1 failure, 2 usage,
 * 3 damaged packed data (verify), 4 differs from the source (verify).
 */
#include "ckptfs_version.h"
#include "cmd_common.h"
#include "commands.h"
#include "container.h"
#include "mount.h"
#include "mount_opts.h"
#include "progress.h"
#include "remote.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROGRESS_HELP                                                                                  \
    "  --progress=WHEN         auto (a bar on a terminal, plain lines every 5 s otherwise),\n"             \
    "                          bar, plain or none; a summary is printed at the end in any case\n"
#define COMMON_HELP                                                                                    \
    "  -q, --quiet             errors only (no progress, no summary)\n"                                   \
    "  -v, --verbose           a line per file as well\n"                                                \
    "  -V, --version           the program's and the format's versions\n"
#define SPACE_HELP                                                                                     \
    "  --no-space-check        go ahead even if the free space looks too small (the check\n"            \
    "                          before writing anything uses an estimate with a margin)\n"

#define S3_HELP                                                                          \
    "  -o endpoint=URL,region=R,profile=P,s3_timeout=SECONDS\n"                             \
    "                          s3:// PACKED only (as ckptfs mount takes them): the\n"         \
    "                          server, the region, the profile of ~/.aws to use (over\n"      \
    "                          AWS_ENDPOINT_URL, AWS_REGION, AWS_PROFILE), and how long each\n" \
    "                          request retries a failing server before the command fails\n"  \
    "                          (1-3600, default 30 s); -v says what is in use\n"

/* One subcommand's help: synopsis line, what it does, options, an example. */
typedef struct {
    const char *name, *synopsis, *text;
} cmd_help;

static const cmd_help helps[] = {
    {"pack", "ckptfs pack [--format k15|bytesplit|archive] [--jobs N] [--delete-source] [--force]\n"
             "       [--progress=WHEN] [--no-space-check] [--skip-bad] [--dry-run]\n"
             "       [--json] [-q|-v] [-o OPTIONS] SRC PACKED",
     "Store SRC (a model directory, or one .safetensors file) losslessly packed\n"
     "in the new directory PACKED.  Every packed file is read back and compared\n"
     "with its source before it counts as done.  If it is interrupted, run the\n"
     "same command again: finished files are kept, the rest is packed.\n"
     "PACKED may be s3://BUCKET/PREFIX: each file is packed in a local staging\n"
     "directory ($CKPTFS_STAGE_DIR, else /var/tmp), uploaded in parts and removed,\n"
     "the next packed meanwhile: at most 2 packed files are staged at once\n"
     "($CKPTFS_STAGE_FILES=N for N); the manifest goes last.  --delete-source\n"
     "deletes a source only once its object is complete and read back from the\n"
     "server equal to it.  Credentials, region and endpoint come from the AWS\n"
     "environment (AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_ENDPOINT_URL, ...;\n"
     "endpoint, region and profile also by -o, below).\n"
     "\n"
     "  --format k15|bytesplit|archive\n"
     "                          BF16 encoding (default k15, which the GPU loader reads;\n"
     "                          bytesplit: faster; archive: smallest, CPU only)\n"
     "  --jobs N                threads (default: the number of CPUs)\n"
     "  --delete-source         remove each source file once its packed copy is\n"
     "                          written, synced and read back equal (s3://: its\n"
     "                          object complete and read back from the server)\n"
     "  --force                 replace PACKED if it holds another pack (never a\n"
     "                          directory holding files that ckptfs did not write)\n"
PROGRESS_HELP
COMMON_HELP
SPACE_HELP
     "  --skip-bad              store a .safetensors file that is not a valid one as an\n"
     "                          opaque file (byte for byte) instead of refusing the pack\n"
     "  --dry-run               list each file with its encoding and estimated packed size,\n"
     "                          the bad files, and the free-space check; write nothing\n"
     "  --json                  the summary as one JSON object on stdout\n"
S3_HELP
     "\n"
     "Example:  ckptfs pack /srv/models/llama /srv/models/llama.packed\n"},
    {"unpack", "ckptfs unpack [--jobs N] [--progress=WHEN] [--no-space-check] [--json] [-q|-v] [-o OPTIONS] PACKED OUT",
     "Rebuild the original files of PACKED in the new directory OUT, checking\n"
     "every chunk and each file's SHA-256.  Damaged data leaves no output (exit 3).\n"
     "PACKED may be s3://BUCKET/PREFIX (credentials, region and endpoint from\n"
     "the AWS environment: AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_ENDPOINT_URL, ...;\n"
     "endpoint, region and profile also by -o, below).\n"
     "\n"
     "  --jobs N                threads (default: the number of CPUs)\n"
PROGRESS_HELP
COMMON_HELP
SPACE_HELP
     "  --json                  the summary as one JSON object on stdout\n"
S3_HELP
     "\n"
     "Example:  ckptfs unpack /srv/models/llama.packed /tmp/llama\n"},
    {"verify", "ckptfs verify [--against SRC] [--jobs N] [--progress=WHEN] [--json] [-q|-v]\n"
               "       [-o OPTIONS] PACKED",
     "Check every chunk and every file's SHA-256 in PACKED; with --against,\n"
     "compare every byte with the source too.\n"
     "PACKED may be s3://BUCKET/PREFIX (credentials, region and endpoint from\n"
     "the AWS environment: AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_ENDPOINT_URL, ...;\n"
     "endpoint, region and profile also by -o, below).\n"
     "Exit status: 0 all good, 3 a packed file is damaged, 4 the pack is intact\n"
     "but differs from SRC, 1 other failures (an s3:// object that could not be\n"
     "read: the server down or timing out, access denied), 2 usage.\n"
     "\n"
     "  --against SRC           the directory (or the one file) that was packed\n"
     "  --jobs N                threads (default: the number of CPUs)\n"
PROGRESS_HELP
COMMON_HELP
     "  --json                  the outcome as one JSON object on stdout (also on failure)\n"
S3_HELP
     "\n"
     "Example:  ckptfs verify --against /srv/models/llama /srv/models/llama.packed\n"},
    {"repack", "ckptfs repack --format k15|bytesplit|archive [--jobs N] PACKED",
     "Convert the BF16 tensors of PACKED to another encoding in place, one file\n"
     "at a time, without the original files: each file is decoded, encoded\n"
     "again, synced and read back against the SHA-256 the manifest records\n"
     "before it replaces the old one.  If it is interrupted, run it again.\n"
     "Keep archive on disk and repack to k15 for the GPU loader.  Unmount\n"
     "PACKED first: a mount refuses (EIO) the files replaced under it.\n"
     "\n"
     "  --format k15|bytesplit|archive   the encoding to convert to\n"
     "  --jobs N                threads (default: the number of CPUs)\n"
     "\n"
     "Example:  ckptfs repack --format k15 /srv/models/llama.packed\n"},
    {"stat", "ckptfs stat [--json] [-q|-v] [-o OPTIONS] PACKED|MOUNTPOINT",
     "Sizes of PACKED: original, packed and saved, bits per BF16 weight and\n"
     "escape rate for each file and in total, and by dtype and encoding.\n"
     "Given the MOUNTPOINT of a running `ckptfs mount`: the daemon's counters\n"
     "(reads, decoded bytes, cache hits and misses, prefetches, decode errors),\n"
     "read from the extended attribute user.ckptfs.stats of the mount's root.\n"
     "PACKED may be s3://BUCKET/PREFIX (credentials, region and endpoint from\n"
     "the AWS environment: AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_ENDPOINT_URL, ...;\n"
     "endpoint, region and profile also by -o, below).\n"
     "\n"
     "  --json                  the same figures as JSON (per file under \"by_file\")\n"
COMMON_HELP
S3_HELP
     "\n"
     "Example:  ckptfs stat /srv/models/llama.packed; ckptfs stat /models/llama\n"},
};

static const cmd_help *find_help(const char *name)
{
    for (size_t i = 0; i < sizeof helps / sizeof *helps; i++)
        if (!strcmp(helps[i].name, name))
            return &helps[i];
    return NULL;
}

static void usage(FILE *f)
{
    fputs("usage: ckptfs COMMAND [options] ARGS   (ckptfs COMMAND --help for its options)\n", f);
    for (size_t i = 0; i < sizeof helps / sizeof *helps; i++)
        fprintf(f, "  %s\n", helps[i].synopsis + strlen("ckptfs "));
    fputs("  mount [-f] [-d] [-q|-v] [-o OPTIONS] PACKED MOUNTPOINT\n"
          "  --version\n"
          "Exit status: 0 ok, 1 failure, 2 usage error, 3 damaged (verify, unpack), 4 differs (verify).\n",
          f);
}

/* The help of one command (on stdout for --help, stderr after a usage error). */
static int cmd_usage(const char *name, FILE *f, int status)
{
    const cmd_help *h = find_help(name);
    if (f == stderr)
        fprintf(f, "usage: %s\n(ckptfs %s --help for more)\n", h->synopsis, name);
    else
        fprintf(f, "usage: %s\n\n%s", h->synopsis, h->text);
    return status;
}

int ckpt_print_version(void)
{
    printf("ckptfs %s\nformat %d.%d (reads %d.0-%d.%d, writes %d.%d)\n", CKPTFS_VERSION, CKP_VERSION_MAJOR,
           CKP_VERSION_MINOR, CKP_VERSION_MAJOR, CKP_VERSION_MAJOR, CKP_VERSION_MINOR, CKP_VERSION_MAJOR,
           CKP_VERSION_MINOR);
    return 0;
}

/* -q: errors only. */
static void quiet(void)
{
    ckpt_verbosity = 0;
    cku_progress_set_mode(CKU_PROGRESS_NONE);
}

static int default_jobs(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* --progress=WHEN: sets the mode of this process; -1 after saying what is wrong. */
static int parse_progress(const char *cmd, const char *arg)
{
    int m = cku_progress_parse(arg);
    if (m < 0) {
        fprintf(stderr, "ckptfs %s: --progress takes auto, bar, plain or none, not \"%s\"\n", cmd, arg);
        return -1;
    }
    cku_progress_set_mode((cku_progress_mode)m);
    return 0;
}

/* --jobs N: 1..1024, or -1 after saying what is wrong. */
static int parse_jobs(const char *cmd, const char *arg)
{
    char *end;
    long j = strtol(arg, &end, 10);
    if (*end || j < 1 || j > 1024) {
        fprintf(stderr, "ckptfs %s: --jobs needs a number from 1 to 1024, not \"%s\"\n", cmd, arg);
        return -1;
    }
    return (int)j;
}

static uint32_t parse_format(const char *cmd, const char *arg);

static int cmd_pack(int argc, char **argv)
{
    ckpt_pack_opts o = {.encoding = CKC_ENC_K15, .jobs = default_jobs()};
    static const struct option lo[] = {{"format", 1, 0, 'F'}, {"jobs", 1, 0, 'j'},
                                       {"delete-source", 0, 0, 'D'}, {"force", 0, 0, 'f'},
                                       {"progress", 1, 0, 'P'}, {"no-space-check", 0, 0, 'S'},
                                       {"dry-run", 0, 0, 'n'}, {"json", 0, 0, 'J'}, {"quiet", 0, 0, 'q'},
                                       {"skip-bad", 0, 0, 'B'},
                                       {"verbose", 0, 0, 'v'}, {"version", 0, 0, 'V'},
                                       {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    argv[0] = (char *)"ckptfs pack"; /* getopt's own messages begin with it */
    while ((c = getopt_long(argc, argv, "j:fhqvVo:", lo, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (ckpt_remote_options("pack", optarg))
                return cmd_usage("pack", stderr, CKPT_EXIT_USAGE);
            break;
        case 'F':
            if ((o.encoding = parse_format("pack", optarg)) == UINT32_MAX)
                return CKPT_EXIT_USAGE;
            break;
        case 'j':
            if ((o.jobs = parse_jobs("pack", optarg)) < 0)
                return CKPT_EXIT_USAGE;
            break;
        case 'D': o.delete_source = 1; break;
        case 'S': ckpt_space_check = 0; break;
        case 'n': o.dry_run = 1; break;
        case 'B': o.skip_bad = 1; break;
        case 'J': ckpt_json = 1; break;
        case 'q': quiet(); break;
        case 'v': ckpt_verbosity = 2; break;
        case 'V': return ckpt_print_version();
        case 'f': o.force = 1; break;
        case 'P':
            if (parse_progress("pack", optarg))
                return CKPT_EXIT_USAGE;
            break;
        case 'h': return cmd_usage("pack", stdout, 0);
        default: return cmd_usage("pack", stderr, CKPT_EXIT_USAGE);
        }
    }
    if (argc - optind != 2)
        return cmd_usage("pack", stderr, CKPT_EXIT_USAGE);
    o.src = argv[optind];
    o.dst = argv[optind + 1];
    if (ckpt_remote_options_check("pack", o.dst))
        return cmd_usage("pack", stderr, CKPT_EXIT_USAGE);
    if (ckpt_is_packed(o.src)) {
        fprintf(stderr, "ckptfs pack: %s is a packed directory already: pack takes the model (SRC) first, then "
                "the new packed directory.\nThe order is: ckptfs pack SRC PACKED (to get the files back: "
                "ckptfs unpack PACKED OUT, or ckptfs mount PACKED MOUNTPOINT)\n", o.src);
        return CKPT_EXIT_USAGE;
    }
    ckpt_on_interrupt("ckptfs pack: interrupted. The files packed so far are kept: run the same command again "
                      "to resume.");
    return ckpt_pack(&o);
}

/* A --format argument, or UINT32_MAX after saying what is wrong. */
static uint32_t parse_format(const char *cmd, const char *arg)
{
    if (!strcmp(arg, "k15"))
        return CKC_ENC_K15;
    if (!strcmp(arg, "bytesplit") || !strcmp(arg, "byte-split"))
        return CKC_ENC_BSPLIT;
    if (!strcmp(arg, "archive"))
        return CKC_ENC_ARCHIVE;
    fprintf(stderr, "ckptfs %s: unknown format \"%s\" (k15, bytesplit or archive)\n", cmd, arg);
    return UINT32_MAX;
}

static int cmd_repack(int argc, char **argv)
{
    uint32_t enc = UINT32_MAX;
    int c, jobs = default_jobs();
    static const struct option lo[] = {{"format", 1, 0, 'F'}, {"jobs", 1, 0, 'j'}, {"help", 0, 0, 'h'},
                                       {0, 0, 0, 0}};
    argv[0] = (char *)"ckptfs repack";
    while ((c = getopt_long(argc, argv, "j:h", lo, NULL)) != -1) {
        switch (c) {
        case 'F':
            if ((enc = parse_format("repack", optarg)) == UINT32_MAX)
                return CKPT_EXIT_USAGE;
            break;
        case 'j':
            if ((jobs = parse_jobs("repack", optarg)) < 0)
                return CKPT_EXIT_USAGE;
            break;
        case 'h': return cmd_usage("repack", stdout, 0);
        default: return cmd_usage("repack", stderr, CKPT_EXIT_USAGE);
        }
    }
    if (enc == UINT32_MAX) {
        fprintf(stderr, "ckptfs repack: --format is required (k15, bytesplit or archive)\n");
        return cmd_usage("repack", stderr, CKPT_EXIT_USAGE);
    }
    if (argc - optind != 1)
        return cmd_usage("repack", stderr, CKPT_EXIT_USAGE);
    return ckpt_repack(argv[optind], enc, jobs);
}

/* unpack, verify and stat: the options each takes are in its help. */
static int cmd_simple(const char *name, int argc, char **argv)
{
    const char *against = NULL;
    int json = 0, c, jobs = default_jobs(), idx = 0;
    static const struct option lo[] = {{"against", 1, 0, 'a'}, {"json", 0, 0, 'J'}, {"jobs", 1, 0, 'j'},
                                       {"progress", 1, 0, 'P'}, {"no-space-check", 0, 0, 'S'},
                                       {"quiet", 0, 0, 'q'}, {"verbose", 0, 0, 'v'}, {"version", 0, 0, 'V'},
                                       {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    char prog[32];
    snprintf(prog, sizeof prog, "ckptfs %s", name);
    argv[0] = prog; /* getopt's own messages begin with it */
    while ((c = getopt_long(argc, argv, "hqvVo:", lo, &idx)) != -1) {
        if (c == 'a' && !strcmp(name, "verify"))
            against = optarg;
        else if (c == 'o') {
            if (ckpt_remote_options(name, optarg))
                return cmd_usage(name, stderr, CKPT_EXIT_USAGE);
        }
        else if (c == 'J')
            json = ckpt_json = 1;
        else if (c == 'q')
            quiet();
        else if (c == 'v')
            ckpt_verbosity = 2;
        else if (c == 'V')
            return ckpt_print_version();
        else if (c == 'j' && (!strcmp(name, "unpack") || !strcmp(name, "verify"))) {
            if ((jobs = parse_jobs(name, optarg)) < 0)
                return CKPT_EXIT_USAGE;
        } else if (c == 'S' && !strcmp(name, "unpack")) {
            ckpt_space_check = 0;
        } else if (c == 'P' && strcmp(name, "stat")) {
            if (parse_progress(name, optarg))
                return CKPT_EXIT_USAGE;
        } else if (c == 'h') {
            return cmd_usage(name, stdout, 0);
        } else {
            if (c != '?') /* getopt named an unknown option itself */
                fprintf(stderr, "ckptfs %s: option --%s does not apply to %s\n", name, lo[idx].name, name);
            return cmd_usage(name, stderr, CKPT_EXIT_USAGE);
        }
    }
    int want = !strcmp(name, "unpack") ? 2 : 1;
    if (argc - optind != want)
        return cmd_usage(name, stderr, CKPT_EXIT_USAGE);
    if (ckpt_remote_options_check(name, argv[optind]))
        return cmd_usage(name, stderr, CKPT_EXIT_USAGE);
    if (!strcmp(name, "unpack")) {
        ckpt_on_interrupt("ckptfs unpack: interrupted. Nothing is in OUT yet: run the same command again to "
                          "start over (it removes what this run left in OUT.ckptfs-partial).");
        return ckpt_unpack(argv[optind], argv[optind + 1], jobs);
    }
    if (!strcmp(name, "verify"))
        return ckpt_verify(argv[optind], against, jobs);
    return ckpt_stat(argv[optind], json);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CKPT_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version") || !strcmp(cmd, "-V"))
        return ckpt_print_version();
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        if (argc > 2 && find_help(argv[2]))
            return cmd_usage(argv[2], stdout, 0);
        if (argc > 2 && !strcmp(argv[2], "mount")) {
            fputs(ckfs_mount_usage(), stdout);
            return 0;
        }
        if (argc > 2) {
            fprintf(stderr, "ckptfs help: no command \"%s\"\n", argv[2]);
            usage(stderr);
            return CKPT_EXIT_USAGE;
        }
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "pack"))
        return cmd_pack(argc - 1, argv + 1);
    if (!strcmp(cmd, "repack"))
        return cmd_repack(argc - 1, argv + 1);
    if (!strcmp(cmd, "unpack") || !strcmp(cmd, "verify") || !strcmp(cmd, "stat"))
        return cmd_simple(cmd, argc - 1, argv + 1);
    if (!strcmp(cmd, "mount"))
        return ckptfs_mount_main(argc - 1, argv + 1);
    fprintf(stderr, "ckptfs: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return CKPT_EXIT_USAGE;
}
