/* vitc command-line interface: parses arguments and calls the library. `vitc help` lists the subcommands.
 * This file holds the command table, usage and main; the commands live in tools/cli/ (cli.h): options.c (the option
 * table and parser), common.c (messages, the model from the options), model.c (list, info, init, forward, grad,
 * deploy), train.c, infer.c (eval, predict, attention) and bench.c. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vitc/api.h"
#include "vitc/dist.h"
#include "vitc/imagefolder.h"

#include "cli/cli.h"

/* Every command: its name, usage line, summary, the options it takes (ARCH_OPTS and SIZE_OPTS, cli.h: those that
 * change a model's architecture and its input geometry), its function and whether it takes image files. */
static const command commands[] = {
    {"list", "vitc list [--csv]", "every model name with params and GMACs", "--csv", cmd_list, 0},
    {"info", "vitc info MODEL [--img-size S] [--attn A] [--ffn F] [--dims ...] [--json]",
     "params, buffers, MACs of one image, per-block breakdown", SIZE_OPTS ARCH_OPTS "--json --train-form", cmd_info,
     0},
    {"init", "vitc init MODEL -o W.safetensors [--seed N] [model options]", "write the official initialisation",
     "--output -o --seed " SIZE_OPTS ARCH_OPTS "--train-form", cmd_init, 0},
    {"forward", "vitc forward MODEL --weights W --input X --output Y [model options]",
     "eval-mode logits (B, K) for `input` (B, C, H, W)",
     "--weights -w --input --output -o --threads --train-form --features --dtype --no-prepack " SIZE_OPTS ARCH_OPTS, cmd_forward, 0},
    {"grad", "vitc grad MODEL --weights W --input X --output G [--steps N --lr LR --weight-decay WD]",
     "train-mode loss and every parameter gradient (grad/<name>) on `input` and `labels`",
     "--weights -w --input --output -o --steps --lr --weight-decay --threads --dtype --cos-reg " SIZE_OPTS ARCH_OPTS,
     cmd_grad,
     0},
    {"train",
     "vitc train MODEL --data fashion-mnist|DIR --epochs E --batch-size B --lr LR --out RUN_DIR; to continue a run: "
     "vitc train MODEL --resume RUN_DIR [--epochs E]",
     "train with AdamW, warm-up + cosine, label smoothing, crop + flip (a recipe's DeiT transforms on image folders), "
     "Mixup/CutMix, weight EMA, gradient accumulation, named recipes (--recipe), fine-tuning (--init-from), "
     "data-parallel under mpirun; checkpoints, metrics.csv, curves.png; Ctrl-C, SIGTERM or SIGUSR1 (to mpirun) stops "
     "at the end of the optimiser step with a checkpoint that --resume continues from",
     "--data --epochs --cooldown-epochs --batch-size --lr --weight-decay --warmup-epochs --min-lr --warmup-lr "
     "--smoothing --clip-grad "
     "--out --resume --overwrite --seed --augment --no-augment --train-subset --test-subset --log-every --threads "
     "--workers --fault-nan-step --fault-batch-step --fault-grad-step --fault-stop-step "
     "--fault-nan-eval --drop-path --cos-reg --recipe "
     "--mixup --cutmix --mixup-prob "
     "--mixup-switch-prob --model-ema --no-model-ema --model-ema-decay --accum-steps --init-from --repeated-aug "
     "--no-repeated-aug --sync-bn --no-sync-bn --bucket-mib --no-overlap --dtype "
     SIZE_OPTS ARCH_OPTS, cmd_train, 0},
    {"eval", "vitc eval MODEL --weights W --data fashion-mnist|DIR [--json]",
     "test (or DIR/val) loss, top-1 and top-5 accuracy",
     "--weights -w --data --batch-size --test-subset --json --threads --workers --classes --train-form --dtype "
     "--no-prepack " SIZE_OPTS
     ARCH_OPTS,
     cmd_eval, 0},
    {"bench", "vitc bench MODEL --batch-size B [--train] [--iters N] [--threads T] [--data DIR [--workers N]] "
     "[--json | --csv]",
     "img/s, GMACs, achieved GFLOP/s (2 per multiply-add run; --train: forward and backward, about 3x the forward's) "
     "and the sgemm peak",
     "--batch-size --train --iters --threads --json --csv --profile --train-form --drop-path --data --workers --dtype "
     "--no-prepack " SIZE_OPTS ARCH_OPTS,
     cmd_bench, 0},
    {"deploy", "vitc deploy MODEL --weights TRAIN.safetensors -o DEPLOY.safetensors [model options]",
     "merge training-form weights (cFFN conv+BN branches, BN running stats) into the deployed form",
     "--weights -w --output -o " SIZE_OPTS ARCH_OPTS, cmd_deploy, 0},
    {"predict", "vitc predict MODEL --weights W [--topk K] [--json] [--output X.safetensors] IMAGE...",
     "top-k classes of image files (PNG, JPEG, BMP, GIF, TGA, PSD, HDR, binary PNM), preprocessed as the model's "
     "pretrained cfg",
     "--weights -w --topk --crop-pct --json --output -o --batch-size --train-form --threads --classes --dtype "
     "--no-prepack " SIZE_OPTS
     ARCH_OPTS, cmd_predict, 1},
    {"attention", "vitc attention MODEL --weights W IMAGE... -o OUT.png [--blocks 0,5,11] [--heads all|mean|0,2] "
     "[--rollout] [--save-maps MAPS.safetensors]; with --save-maps, -o may be left out",
     "pictures of the class token's (or mean query's) attention per block and head, overlaid on the images",
     "--weights -w --output -o --blocks --heads --rollout --save-maps --train-form --threads --no-prepack --attn --ffn "
     "--dims "
     "--depths --windows --apply-transform --double-heads --img-size --in-chans --num-classes",
     cmd_attention, 1},
};
static const int ncommands = (int)(sizeof commands / sizeof commands[0]);

static void usage(FILE *f) {
    fprintf(f, "vitc: vision transformers in C (forward, backward, training)\n\nusage:\n");
    for (int i = 0; i < ncommands; i++) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`vitc COMMAND --help` or `vitc help COMMAND` shows a command's options; `vitc --version` the "
            "version.\n");
}

/* argv as a shell re-reads it (command.txt's commands run again as they are): each word as it is where it holds only
 * characters no shell reads specially, else in single quotes (a quote written '\''), then a newline (malloc'd; NULL
 * when out of memory). */
static char *shell_line(int argc, char **argv) {
    size_t n = 2;
    for (int k = 0; k < argc; k++) n += 4 * strlen(argv[k]) + 3; /* each ' becomes '\'' */
    char *line = malloc(n), *p = line;
    for (int k = 0; line && k < argc; k++) {
        const char *a = argv[k];
        if (*a && strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-") == strlen(a)) {
            memcpy(p, a, strlen(a));
            p += strlen(a);
        } else {
            *p++ = '\'';
            for (; *a; a++)
                if (*a == '\'') {
                    memcpy(p, "'\\''", 4);
                    p += 4;
                } else {
                    *p++ = *a;
                }
            *p++ = '\'';
        }
        *p++ = k + 1 < argc ? ' ' : '\n';
    }
    if (line) *p = '\0';
    return line;
}

/* "LEAD: unknown command 'NAME'" on stderr, with the nearest command's name where one is near (then the usage). */
static void unknown_command(const char *lead, const char *name) {
    vt_nearest s = {.word = name};
    for (int i = 0; i < ncommands; i++) vt_nearest_try(&s, commands[i].name, strlen(commands[i].name));
    char hint[64];
    const size_t n = strlen(vt_nearest_hint(&s, hint, sizeof hint));
    if (n) hint[n - 1] = '\0'; /* its closing blank */
    fprintf(stderr, "%s: unknown command '", lead);
    vt_fputs_clean(stderr, name);
    fprintf(stderr, "'%s%s%s\n", n ? " (" : "", hint, n ? ")" : "");
}

static int run(int argc, char **argv) {
    /* A write past the file-size limit (ulimit -f) then fails with EFBIG, which the writers report ("File too large")
     * after removing their temporary file, instead of the signal killing vitc in the middle of a checkpoint. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc >= 3 && strcmp(argv[1], "help") == 0) { /* vitc help COMMAND */
        if (argc > 3) {
            fprintf(stderr, "vitc help: unexpected argument '%s' (vitc help COMMAND)\n", argv[3]);
            return 2;
        }
        for (int i = 0; i < ncommands; i++)
            if (strcmp(argv[2], commands[i].name) == 0) {
                command_help(&commands[i]);
                return 0;
            }
        unknown_command("vitc help", argv[2]);
        usage(stderr);
        return 2;
    }
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("vitc %d.%d.%d\n", VITC_VERSION_MAJOR, VITC_VERSION_MINOR, VITC_VERSION_PATCH);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 0; i < ncommands; i++) {
        if (strcmp(argv[1], commands[i].name) != 0) continue;
        int rank = 0;
        const int ranks = vt_dist_env(&rank, NULL, NULL);
        opts o;
        opts_init(&o);
        const char **images = calloc((size_t)argc, sizeof *images);
        if (!images) return die("%s", "out of memory");
        o.images = images;
        if (parse(&commands[i], argc, argv, &o)) {
            free(images);
            return 2;
        }
        if (ranks > 1 && !o.help && strcmp(commands[i].name, "train") != 0) {
            free(images);
            if (rank == 0) /* every rank would run the whole command, printing and writing alike */
                refuse(commands[i].name, "runs in one process: under mpirun only train is data-parallel (run it "
                       "without mpirun, or with -np 1)");
            return 2;
        }
        if (!(o.cmdline = shell_line(argc, argv))) {
            free(images);
            return die("%s", "out of memory");
        }
        int rc = 0;
        if (o.help) {
            if (rank == 0) command_help(&commands[i]); /* (under mpirun: once) */
        } else {
            set_threads(&o);
            rc = weights_options(&o, &commands[i]);
            if (rc == 0) rc = commands[i].run(&o);
            close_weights(&o);
        }
        vt_classes_free(o.cls, o.ncls);
        free(o.cmdline);
        free(images);
        return rc;
    }
    unknown_command("vitc", argv[1]);
    usage(stderr);
    return 2;
}

/* Opens the standard streams the caller left closed (`vitc ... >&-`): stdin on /dev/null, stdout and stderr on
 * /dev/full, whose writes fail as a closed stream's would (reported), instead of the next file opened (a run folder's
 * lock) taking their descriptor and the console text landing in it. Returns 1 when stdout was closed. */
static int std_fds_open(void) {
    int out_closed = 0;
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        out_closed |= fd == 1;
        const int got = open(fd ? "/dev/full" : "/dev/null", fd ? O_WRONLY : O_RDONLY);
        if (got >= 0 && got != fd) { /* (open takes the lowest free descriptor: fd itself) */
            dup2(got, fd);
            close(got);
        }
    }
    return out_closed;
}

/* The command's status, or 1 when its standard output could not be written (a full disk, a closed pipe's EPIPE
 * with SIGPIPE ignored): results redirected to a file are never lost silently (as coreutils' close_stdout). */
int main(int argc, char **argv) {
    const int out_closed = std_fds_open();
    const int rc = run(argc, argv);
    const int err = fflush(stdout) != 0 ? errno : 0;
    if (!err && !ferror(stdout)) return rc;
    fprintf(stderr, "vitc: error writing standard output%s%s\n", out_closed ? ": it is closed" : err ? ": " : "",
            out_closed ? "" : err ? strerror(err) : "");
    return rc ? rc : 1;
}
