/* Training on one device: gradient accumulation equals one big micro-batch,
 * resume is bit-exact, the memory cap is enforced with a message naming the
 * category, the learning-rate schedule follows its formula, atomic
 * checkpoints survive a failed save, and the CNN and MLP learn the digits.
 * In the sanitizer build (make SAN=1), freed device memory reads as NaN. */
#include "cleave/kernels.h"
#include "cleave/train.h"
#include "common/check.h"

#include <dirent.h>
#include <pthread.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];
static char text_path[512];

static void make_text(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cleave_test_train_XXXXXX");
    CL_ASSERT(mkdtemp(tmpdir));
    snprintf(text_path, sizeof text_path, "%s/text.txt", tmpdir);
    FILE *f = fopen(text_path, "w");
    CL_ASSERT(f);
    /* a deterministic, learnable text: verses with a little variety */
    const char *words[] = {"the", "LORD", "said", "unto", "Moses", "and", "Aaron", "in", "land", "of", "Egypt", "saying"};
    cl_rng r;
    cl_rng_seed(&r, 3);
    for (int v = 0; v < 3000; v++) {
        fprintf(f, "%d:%d ", v / 30 + 1, v % 30 + 1);
        int n = 5 + (int)(cl_rng_u64(&r) % 8);
        for (int i = 0; i < n; i++) fprintf(f, "%s%s", words[cl_rng_u64(&r) % 12], i + 1 < n ? " " : ".\n");
    }
    fclose(f);
}

static void base_config(cl_train_config *c) {
    cl_train_config_default(c);
    c->data = text_path;
    c->seq_len = 32;
    c->steps = 8;
    c->lr.steps = 8;
    c->lr.warmup = 2;
    c->micro_batch = 4;
    c->global_batch = 8;
    c->eval_batches = 4;
}

static int run_losses(const cl_train_config *c, int from, int to, const char *resume, const char *save, double *losses) {
    cl_trainer *t;
    cl_status s = cl_trainer_create(&t, c);
    CHECK_OK(s);
    if (s) return -1;
    if (resume) CHECK_OK(cl_trainer_resume(t, resume));
    CHECK(cl_trainer_steps_done(t) == from, "resumed at step %d, expected %d", cl_trainer_steps_done(t), from);
    for (int k = from; k < to; k++) {
        cl_step_stats st;
        CHECK_OK(cl_trainer_step(t, &st));
        losses[k] = st.loss;
    }
    if (save) CHECK_OK(cl_trainer_save(t, save));
    cl_trainer_destroy(t);
    return 0;
}

static void test_accumulation(void) {
    cl_train_config c;
    base_config(&c);
    double a[8], b[8];
    c.micro_batch = 8;
    run_losses(&c, 0, 8, NULL, NULL, a);
    c.micro_batch = 2; /* 4 micro-batches accumulate into the same step */
    run_losses(&c, 0, 8, NULL, NULL, b);
    double worst = 0;
    for (int i = 0; i < 8; i++) worst = fmax(worst, fabs(a[i] - b[i]) / fabs(a[i]));
    printf("accumulation: 8 steps, micro 8 vs 4 x micro 2: max rel loss diff %.3g\n", worst);
    CHECK(worst <= 1e-5, "accumulated losses differ by %.3g", worst);
    CHECK(a[7] < a[0], "loss did not fall: %.4f -> %.4f", a[0], a[7]);
}

static void test_resume(void) {
    cl_train_config c;
    base_config(&c);
    double full[8], part[8];
    char ck[600];
    snprintf(ck, sizeof ck, "%s/ckpt", tmpdir);
    run_losses(&c, 0, 8, NULL, NULL, full);
    run_losses(&c, 0, 4, NULL, ck, part);
    /* save twice over the same directory: the swap path */
    run_losses(&c, 0, 4, NULL, ck, part);
    run_losses(&c, 4, 8, ck, NULL, part);
    int same = 1;
    for (int i = 0; i < 8; i++) same &= memcmp(&full[i], &part[i], sizeof(double)) == 0;
    CHECK(same, "resumed losses differ from the uninterrupted run (step 8: %.17g vs %.17g)", part[7], full[7]);
    /* nothing but the checkpoint (and the text) was left in the directory */
    DIR *dp = opendir(tmpdir);
    CL_ASSERT(dp);
    for (struct dirent *e; (e = readdir(dp));)
        CHECK(e->d_name[0] == '.' || !strcmp(e->d_name, "ckpt") || !strncmp(e->d_name, "text.txt", 8),
              "a save left %s behind in %s", e->d_name, tmpdir);
    closedir(dp);
    /* a different model, seed or global batch is refused, naming the field and both values */
    cl_train_config c2 = c;
    c2.model.layers = 3;
    cl_trainer *t;
    CHECK_OK(cl_trainer_create(&t, &c2));
    cl_status s = cl_trainer_resume(t, ck);
    CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "model has layers 2, this run's 3"), "resume into another model: %s",
          cl_last_error());
    cl_trainer_destroy(t);
    c2 = c;
    c2.seed = 5;
    CHECK_OK(cl_trainer_create(&t, &c2));
    s = cl_trainer_resume(t, ck);
    CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "--seed 1337, this run has 5"), "resume with another seed: %s", cl_last_error());
    cl_trainer_destroy(t);
    c2 = c;
    c2.global_batch = 4;
    CHECK_OK(cl_trainer_create(&t, &c2));
    s = cl_trainer_resume(t, ck);
    CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "--global-batch-size 8, this run has 4"), "resume with another batch: %s",
          cl_last_error());
    cl_trainer_destroy(t);
    /* a truncated model file is a clear error, and loading for eval says so too */
    char mp[700];
    snprintf(mp, sizeof mp, "%s/model.safetensors", ck);
    CHECK(truncate(mp, 100) == 0, "truncate");
    CHECK_OK(cl_trainer_create(&t, &c));
    s = cl_trainer_resume(t, ck);
    CHECK(s == CL_ERR_FORMAT || s == CL_ERR_IO, "truncated checkpoint: %s -> %s", cl_status_name(s), cl_last_error());
    cl_trainer_destroy(t);
}

/* Many threads asking one capped device at once: exactly as many blocks as
 * the cap holds are given, never more (the check and the reservation are
 * one step under the device's lock). */
typedef struct {
    cl_device *d;
    pthread_barrier_t *go;
    int ok;
    void *p;
} cap_race;

static void *cap_race_run(void *arg) {
    cap_race *r = arg;
    pthread_barrier_wait(r->go);
    r->ok = cl_device_alloc(r->d, CL_MEM_ACTS, 1000, &r->p) == CL_OK;
    return NULL;
}

static void test_cap_race(void) {
    enum { N = 16, FIT = 5 };
    for (int round = 0; round < 50; round++) {
        cl_device *d;
        CHECK_OK(cl_device_create_cpu(&d, FIT * 1000, 0));
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, N);
        cap_race r[N];
        pthread_t th[N];
        for (int i = 0; i < N; i++) {
            r[i] = (cap_race){.d = d, .go = &go};
            pthread_create(&th[i], NULL, cap_race_run, &r[i]);
        }
        int got = 0;
        for (int i = 0; i < N; i++) {
            pthread_join(th[i], NULL);
            got += r[i].ok;
        }
        CHECK(got == FIT && cl_device_peak_total(d) == FIT * 1000, "round %d: %d blocks of 1000 B under a %d B cap, peak %zu", round,
              got, FIT * 1000, cl_device_peak_total(d));
        for (int i = 0; i < N; i++)
            if (r[i].ok) cl_device_free(d, r[i].p);
        pthread_barrier_destroy(&go);
        cl_device_destroy(d);
    }
    cl_error_clear();
}

/* What a save may replace: nothing, an empty directory, its own checkpoint;
 * anything else is refused and left as it was. */
static void test_save_target(void) {
    cl_train_config c;
    base_config(&c);
    char dir[600], file[700], user[700], probe[800];
    snprintf(dir, sizeof dir, "%s/targets", tmpdir);
    CHECK(mkdir(dir, 0755) == 0, "mkdir %s", dir);
    CHECK(cl_checkpoint_check_target(dir) == CL_OK, "an empty directory refused: %s", cl_last_error());
    snprintf(file, sizeof file, "%s/x.txt", dir);
    FILE *f = fopen(file, "w");
    CL_ASSERT(f);
    fputs("mine\n", f);
    fclose(f);
    CHECK(cl_checkpoint_check_target(file) == CL_ERR_INVALID && strstr(cl_last_error(), "x.txt"), "a file: %s", cl_last_error());
    CHECK(cl_checkpoint_check_target(dir) == CL_ERR_INVALID && strstr(cl_last_error(), "x.txt"), "a user's directory: %s",
          cl_last_error());
    CHECK(cl_checkpoint_check_target("") == CL_ERR_INVALID, "an empty path accepted");
    snprintf(user, sizeof user, "%s/ck", dir);
    CHECK(cl_checkpoint_check_target(user) == CL_OK, "a new path refused: %s", cl_last_error());
    cl_trainer *t;
    CHECK_OK(cl_trainer_create(&t, &c));
    CHECK(cl_trainer_save(t, file) == CL_ERR_INVALID, "saved over a file");
    CHECK_OK(cl_trainer_save(t, user));
    CHECK_OK(cl_trainer_save(t, user)); /* over its own checkpoint */
    CHECK(cl_checkpoint_check_target(user) == CL_OK, "a cleave checkpoint refused: %s", cl_last_error());
    snprintf(probe, sizeof probe, "%s/notes.txt", user);
    f = fopen(probe, "w");
    CL_ASSERT(f);
    fclose(f);
    CHECK(cl_trainer_save(t, user) == CL_ERR_INVALID && strstr(cl_last_error(), "notes.txt"), "saved over a stranger: %s",
          cl_last_error());
    struct stat sb;
    CHECK(stat(probe, &sb) == 0 && stat(file, &sb) == 0 && sb.st_size == 5, "a refused save changed what was there");
    cl_trainer_destroy(t);
}

/* A context ending in ": " joins the message with one ": ", not ": : ". */
static void test_error_context(void) {
    cl_error(CL_ERR_IO, "device cpu:0: asked 4 B");
    cl_error_context(CL_ERR_IO, "stage 1, %s of micro-batch %d: ", "BWD_INPUT", 0);
    CHECK(!strcmp(cl_last_error(), "stage 1, BWD_INPUT of micro-batch 0: device cpu:0: asked 4 B"), "joined: %s", cl_last_error());
    cl_error_clear();
}

static void test_cap(void) {
    cl_train_config c;
    base_config(&c);
    c.device_memory = 100 * 1024; /* less than the parameters */
    cl_trainer *t;
    cl_status s = cl_trainer_create(&t, &c);
    CHECK(s == CL_ERR_OOM, "a 100 KiB cap was accepted");
    const char *e = cl_last_error();
    /* refused from the prediction, before the device allocates anything */
    CHECK(strstr(e, "refused before allocating") && strstr(e, "needs") && strstr(e, "the cap is 100.0 KiB"),
          "cap message lacks detail: %s", e);
    printf("cap message: %s\n", e);
    /* the device accounting itself */
    cl_device *d;
    CHECK_OK(cl_device_create_cpu(&d, 4096, 0));
    void *p, *q;
    CHECK_OK(cl_device_alloc(d, CL_MEM_ACTS, 3000, &p));
    s = cl_device_alloc(d, CL_MEM_GRADS, 2000, &q);
    CHECK(s == CL_ERR_OOM && strstr(cl_last_error(), "grads") && strstr(cl_last_error(), "asked") && strstr(cl_last_error(), "cap") &&
              strstr(cl_last_error(), "activations"),
          "%s", cl_last_error());
    CHECK(cl_device_current(d, CL_MEM_ACTS) == 3000, "current %zu", cl_device_current(d, CL_MEM_ACTS));
    cl_device_free(d, p);
    CHECK(cl_device_current_total(d) == 0 && cl_device_peak_total(d) == 3000, "totals %zu %zu", cl_device_current_total(d),
          cl_device_peak_total(d));
    CHECK_OK(cl_device_alloc(d, CL_MEM_GRADS, 4096, &q));
    cl_device_free(d, q);
    cl_device_destroy(d);
    size_t b;
    CHECK_OK(cl_parse_bytes("512MiB", &b));
    CHECK(b == 512u << 20, "512MiB -> %zu", b);
    CHECK_OK(cl_parse_bytes("1.5GiB", &b));
    CHECK(b == 1536u << 20, "1.5GiB -> %zu", b);
    CHECK(cl_parse_bytes("-1MiB", &b) == CL_ERR_INVALID, "negative size accepted");
    CHECK(cl_parse_bytes("12 parsecs", &b) == CL_ERR_INVALID, "bad unit accepted");
}

static void test_schedule(void) {
    cl_lr_schedule s = {.lr = 1.0f, .min_lr = 0.1f, .warmup = 10, .steps = 110};
    CHECK(fabsf(cl_lr_at(&s, 0) - 0.1f) < 1e-7f, "warm-up start %g", cl_lr_at(&s, 0));
    CHECK(fabsf(cl_lr_at(&s, 9) - 1.0f) < 1e-7f, "warm-up end %g", cl_lr_at(&s, 9));
    for (int k = 10; k < 110; k++) {
        double frac = (double)(k - 10) / 99.0;
        double want = 0.1 + 0.5 * (1 + cos(M_PI * frac)) * 0.9;
        CHECK(fabs(cl_lr_at(&s, k) - want) < 1e-6, "step %d: %g vs %g", k, cl_lr_at(&s, k), want);
    }
    CHECK(fabsf(cl_lr_at(&s, 109) - 0.1f) < 1e-7f, "final %g", cl_lr_at(&s, 109));
}

static void test_digits(const char *preset) {
    const char *path = "data/digits.csv.gz";
    if (access(path, R_OK) != 0) {
        CHECK(0, "%s is missing: run scripts/setup.sh", path);
        return;
    }
    cl_train_config c;
    cl_train_config_default(&c);
    cl_model_preset(preset, &c.model);
    c.data = path;
    c.steps = 150;
    c.lr.lr = 3e-3f;
    c.lr.min_lr = 3e-4f;
    c.lr.steps = 150;
    c.lr.warmup = 10;
    c.micro_batch = 32;
    c.global_batch = 32;
    c.adamw.weight_decay = 0.0f;
    cl_trainer *t;
    CHECK_OK(cl_trainer_create(&t, &c));
    if (!t) return;
    double before, after;
    CHECK_OK(cl_trainer_eval(t, &before));
    for (int k = 0; k < c.steps; k++) CHECK_OK(cl_trainer_step(t, NULL));
    CHECK_OK(cl_trainer_eval(t, &after));
    printf("%s on digits: validation loss %.4f -> %.4f after %d steps\n", preset, before, after, c.steps);
    CHECK(after < 0.5 && after < before, "%s did not learn the digits: %.4f -> %.4f", preset, before, after);
    cl_trainer_destroy(t);
}

/* ---- tensor parallelism ---- */
/* A padded vocabulary (256 rows padded to 300 by vocab_divisible_by 100):
 * the padded rows of wte stay exactly 0 over steps (zero at the start, zero
 * gradient: masked out of the softmax, never looked up), and the losses are
 * the unpadded model's within 1e-6 relative. */
static void test_padded_vocab(void) {
    cl_train_config c;
    base_config(&c);
    c.steps = c.lr.steps = 5;
    double a[5], b[5];
    c.vocab_divisible_by = 128; /* 256: no padding */
    run_losses(&c, 0, 5, NULL, NULL, a);
    c.vocab_divisible_by = 100;
    cl_trainer *t;
    CHECK_OK(cl_trainer_create(&t, &c));
    if (!t) return;
    const cl_model *m = cl_trainer_model(t);
    const cl_model_desc *d = cl_model_desc_of(m);
    int V = c.model.vocab, C = c.model.channels;
    CHECK(d->vocab_padded == 300 && d->vocab_local == 300, "vocabulary %d padded to %d (%d local), expected 300", V,
          d->vocab_padded, d->vocab_local);
    for (int k = 0; k < 5; k++) {
        cl_step_stats st;
        CHECK_OK(cl_trainer_step(t, &st));
        b[k] = st.loss;
    }
    const float *wte = cl_model_param(m, d->tied_wte);
    long nonzero = 0;
    for (long i = (long)V * C; i < (long)d->vocab_local * C; i++) nonzero += wte[i] != 0.0f;
    CHECK(nonzero == 0, "%ld of the padded wte rows' floats are not 0 after 5 steps", nonzero);
    double worst = 0;
    for (int i = 0; i < 5; i++) worst = fmax(worst, fabs(a[i] - b[i]) / fabs(a[i]));
    printf("padded vocabulary 256 -> 300: 5 steps, padded rows 0, max rel loss diff vs unpadded %.3g\n", worst);
    CHECK(worst <= 1e-6, "padded vocabulary: losses differ by %.3g relative", worst);
    cl_trainer_destroy(t);
}

/* Rank functions over a dp 1 x tp N x pp 1 mesh of thread ranks. */
typedef struct {
    cl_train_config cfg;        /* tp, groups set by each rank */
    const cl_model *ref;        /* the tp = 1 model (same_start) */
    int perturb;                /* replicas: rank 1 perturbs h.0.ln_1.weight before the step */
    cl_status st[8];
    char err[8][256];
} tp_job;

static cl_status tp_rank_main(cl_comm *world, void *arg) {
    tp_job *j = arg;
    int n = cl_comm_size(world), r = cl_comm_rank(world);
    cl_mesh mesh;
    cl_groups g;
    TCHECK_OK(cl_mesh_init(&mesh, n, 1, n, 1));
    TCHECK_OK(cl_groups_create(world, &mesh, &g));
    cl_train_config c = j->cfg;
    c.tp = n;
    c.groups = &g;
    cl_trainer *t = NULL;
    cl_status s = cl_trainer_create(&t, &c);
    TCHECK(s == CL_OK, "rank %d: trainer at tp %d: %s", r, n, cl_last_error());
    if (s) { cl_groups_free(&g); return s; }
    const cl_model *m = cl_trainer_model(t);
    const cl_model_desc *d = cl_model_desc_of(m);
    if (j->ref) { /* every slice is its part of the tp = 1 tensor, bitwise; padding 0; every element once */
        const cl_model_desc *rd = cl_model_desc_of(j->ref);
        TCHECK(d->nparams == rd->nparams, "rank %d: %d parameters, tp 1 has %d", r, d->nparams, rd->nparams);
        long differ = 0, badpad = 0, miss = 0;
        const char *first = NULL;
        for (int i = 0; i < d->nparams && i < rd->nparams; i++) {
            const cl_param_spec *p = &d->params[i], *q = &rd->params[i];
            TCHECK(!strcmp(p->name, q->name) && p->full_numel == q->numel, "rank %d: parameter %d is %s (%lld), tp 1's %s (%lld)",
                   r, i, p->name, (long long)p->full_numel, q->name, (long long)q->numel);
            const float *mine = cl_model_param(m, i), *whole = cl_model_param(j->ref, i);
            char *hit = calloc((size_t)p->numel, 1);
            for (int64_t e = 0; e < q->numel && e < p->full_numel; e++) {
                int64_t li = cl_param_local_index(p, r, e);
                if (li < 0) continue;
                if (li >= p->numel) { miss++; continue; }
                hit[li]++;
                if (memcmp(&mine[li], &whole[e], sizeof(float))) { differ++; if (!first) first = p->name; }
            }
            for (int64_t li = 0; li < p->numel; li++) {
                if (hit[li] == 1) continue;
                /* only the padded rows of wte are in no whole element, and they hold 0 */
                if (hit[li] == 0 && i == d->tied_wte && d->vocab_start + li / d->cfg.channels >= d->cfg.vocab) badpad += mine[li] != 0.0f;
                else miss++;
            }
            free(hit);
        }
        TCHECK(differ == 0, "rank %d of tp %d: %ld elements differ from tp 1's (first in %s)", r, n, differ, first ? first : "");
        TCHECK(badpad == 0, "rank %d of tp %d: %ld padded wte elements are not 0", r, n, badpad);
        TCHECK(miss == 0, "rank %d of tp %d: %ld local elements map to no whole element or to several", r, n, miss);
    } else { /* replicas: perturb a replicated layernorm weight on rank 1 only; the step's check must fail */
        int i = cl_model_find_param(d, "h.0.ln_1.weight");
        TCHECK(i >= 0 && d->params[i].split == CL_SPLIT_NONE, "h.0.ln_1.weight is not a replicated parameter");
        if (i >= 0 && j->perturb && r == 1) cl_model_param(m, i)[3] += 0.25f;
        for (int k = 0; k < 2; k++) {
            s = cl_trainer_step(t, NULL);
            if (s) break;
        }
        j->st[r] = s;
        snprintf(j->err[r], sizeof j->err[r], "%s", s ? cl_last_error() : "");
    }
    cl_trainer_destroy(t);
    cl_groups_free(&g);
    return CL_OK;
}

static void same_start(const char *preset) {
    cl_train_config c;
    base_config(&c);
    if (strcmp(preset, "gpt2-tiny")) {
        cl_model_preset(preset, &c.model);
        c.data = "data/digits.csv.gz";
    }
    cl_trainer *ref;
    CHECK_OK(cl_trainer_create(&ref, &c));
    if (!ref) return;
    tp_job j = {.cfg = c, .ref = cl_trainer_model(ref)};
    int before = cl_test_failures;
    for (int n = 2; n <= 4; n += 2) CHECK_OK(cl_launch_threads(n, tp_rank_main, &j, NULL));
    printf("same start: %s at tp 2 and 4: every slice bitwise its part of tp 1's tensor%s\n", preset,
           cl_test_failures == before ? "" : " -- FAILED");
    cl_trainer_destroy(ref);
}

static void test_replicas_check(void) {
    tp_job j = {.perturb = 0};
    base_config(&j.cfg);
    j.cfg.check_replicas = 1;
    CHECK_OK(cl_launch_threads(2, tp_rank_main, &j, NULL));
    CHECK(j.st[0] == CL_OK && j.st[1] == CL_OK, "unperturbed tp 2 with the replica check: %s / %s", j.err[0], j.err[1]);
    /* a learning rate of 1e-30 moves no parameter that is not 0 (wpe's
     * normal draws stay as they are), so the perturbed weight is the first
     * replica in description order that differs (at a normal rate rank 1's
     * gradients differ upstream too, and the check names the first: wpe) */
    j.perturb = 1;
    j.cfg.lr.lr = j.cfg.lr.min_lr = 1e-30f;
    CHECK_OK(cl_launch_threads(2, tp_rank_main, &j, NULL));
    for (int r = 0; r < 2; r++)
        CHECK(j.st[r] == CL_ERR_NUMERIC && strstr(j.err[r], "h.0.ln_1.weight"),
              "rank %d: a perturbed replica: %s: %s", r, cl_status_name(j.st[r]), j.err[r]);
    printf("replica check: a layernorm weight perturbed on tp rank 1 fails the step: %s\n", j.err[0]);
}

/* ---- freed device memory, in AddressSanitizer builds ---- */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

#ifdef TEST_ASAN
/* Reads a freed (quarantined, poisoned) block as uninstrumented code would:
 * the count of floats that are not NaN. */
__attribute__((no_sanitize_address)) static size_t stale_not_nan(const float *p, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        volatile const float *q = p + i;
        float x = *q;
        if (x == x) bad++;
    }
    return bad;
}
#endif

static void test_freed_poison(void) {
#ifdef TEST_ASAN
    cl_device *d;
    CHECK_OK(cl_device_create_cpu(&d, 0, 0));
    const size_t sizes[] = {1, 1000, ((size_t)4 << 20) / sizeof(float) + 5}; /* small, and a huge-page block */
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        float *p = NULL;
        CHECK_OK(cl_device_alloc_f32(d, CL_MEM_PARAMS, sizes[k], &p));
        if (!p) continue;
        for (size_t i = 0; i < sizes[k]; i++) p[i] = (float)i;
        cl_device_free(d, p);
        size_t bad = stale_not_nan(p, sizes[k]);
        CHECK(bad == 0, "a freed block of %zu floats: %zu still read as numbers", sizes[k], bad);
    }
    cl_device_destroy(d);
#else
    cl_test_skip("freed-memory poisoning (not an AddressSanitizer build: the sanitizer phase runs it)", 0);
#endif
}

/* ZeRO ranges (issue 15): an MLP of widths 1-1-15-1-17-1-100003 has
 * parameters of 1, 15, 17 and 100003 floats (and others), each at a
 * 16-float-aligned offset. For its whole and for two parts, and dp n = 1..8:
 * cl_model_part_sizes under {stage 1, n, r} pads the part to the least
 * multiple of 16 n floats, the shards [r * shard, (r + 1) * shard) are equal,
 * multiples of 16 floats, the same statement on every rank, and cover every
 * float of [0, alloc) exactly once; each held parameter's pieces
 * (cl_zero_overlap with each rank's shard) cover it exactly once, in order,
 * without gaps or overlaps. Stage 0 (and n = 1) shards nothing. */
/* The MLP of widths 1-1-15-1-17-1-100003. */
static void odd_mlp(cl_model_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->kind = CL_MODEL_MLP;
    snprintf(cfg->name, sizeof cfg->name, "custom");
    const int widths[] = {1, 1, 15, 1, 17, 1, 100003};
    cfg->nwidths = (int)(sizeof widths / sizeof widths[0]);
    for (int i = 0; i < cfg->nwidths; i++) cfg->widths[i] = widths[i];
}

static void test_zero_ranges(void) {
    cl_model_config cfg;
    odd_mlp(&cfg);
    cl_model_desc *d = NULL;
    CHECK_OK(cl_model_describe(&cfg, 0, &d));
    if (!d) return;
    int seen[4] = {0}; /* 1, 15, 17, 100003 */
    int64_t end = 0;
    for (int i = 0; i < d->nparams; i++) {
        const cl_param_spec *ps = &d->params[i];
        CHECK(ps->byte_offset % CL_PARAM_ALIGN == 0 && ps->dtype == CL_F32 && cl_param_elem(ps) >= end,
              "%s at byte offset %lld, format %s (previous ends at element %lld)", ps->name, (long long)ps->byte_offset,
              cl_dtype_name(ps->dtype), (long long)end);
        end = cl_param_elem(ps) + ps->numel;
        seen[0] |= ps->numel == 1, seen[1] |= ps->numel == 15, seen[2] |= ps->numel == 17, seen[3] |= ps->numel == 100003;
    }
    CHECK(seen[0] && seen[1] && seen[2] && seen[3], "the MLP lacks a parameter of 1, 15, 17 or 100003 floats");
    /* parts: the whole; fc3 onwards (starts past fc1, fc2); up to fc4's relu (ends before the big layer) */
    const int parts[3][2] = {{0, d->nunits}, {4, d->nunits}, {0, 8}};
    int64_t pieces = 0, floats = 0;
    for (int pi = 0; pi < 3; pi++) {
        int u0 = parts[pi][0], u1 = parts[pi][1];
        int64_t held = 0;
        for (int i = 0; i < d->nparams; i++)
            if (d->params[i].unit >= u0 && d->params[i].unit < u1) held += (d->params[i].numel + 15) / 16 * 16;
        for (int n = 1; n <= 8; n++) {
            cl_part_sizes z0, zs[8];
            cl_zero none = {0, n, 0, 0, 0, 0, CL_F32};
            cl_model_part_sizes(d, u0, u1, 1, CL_RECOMPUTE_NONE, &none, &z0);
            CHECK(z0.nfloats == held && z0.alloc == held && z0.shard == held && z0.shard_lo == 0 && z0.moments == held,
                  "stage 0, part [%d, %d), n %d: nfloats %lld alloc %lld shard %lld lo %lld moments %lld, want all %lld (lo 0)",
                  u0, u1, n, (long long)z0.nfloats, (long long)z0.alloc, (long long)z0.shard, (long long)z0.shard_lo,
                  (long long)z0.moments, (long long)held);
            for (int r = 0; r < n; r++) {
                cl_zero zero = {1, n, r, 0, 0, 0, CL_F32};
                cl_model_part_sizes(d, u0, u1, 1, CL_RECOMPUTE_NONE, &zero, &zs[r]);
            }
            const cl_part_sizes *z = &zs[0];
            int64_t q = 16 * (int64_t)n, want = (held + q - 1) / q * q;
            CHECK(z->nfloats == held && z->alloc == want && z->shard * n == z->alloc && z->shard % 16 == 0,
                  "part [%d, %d), n %d: nfloats %lld (want %lld) alloc %lld (want %lld) shard %lld", u0, u1, n,
                  (long long)z->nfloats, (long long)held, (long long)z->alloc, (long long)want, (long long)z->shard);
            for (int r = 0; r < n; r++) {
                const cl_part_sizes *y = &zs[r];
                CHECK(y->alloc == z->alloc && y->shard == z->shard && y->lo == z->lo && y->nfloats == z->nfloats,
                      "part [%d, %d), n %d: rank %d's sizes differ from rank 0's", u0, u1, n, r);
                CHECK(y->shard_lo == (int64_t)r * y->shard, "part [%d, %d), n %d, rank %d: shard_lo %lld, want %lld", u0,
                      u1, n, r, (long long)y->shard_lo, (long long)r * y->shard);
                CHECK(y->moments == (n > 1 ? y->shard : y->alloc), "part [%d, %d), n %d, rank %d: moments %lld", u0, u1,
                      n, r, (long long)y->moments);
            }
            /* every float of [0, alloc) in exactly one shard */
            unsigned char *hits = calloc((size_t)z->alloc, 1);
            CL_ASSERT(hits);
            for (int r = 0; r < n; r++)
                for (int64_t f = zs[r].shard_lo; f < zs[r].shard_lo + zs[r].shard && f < z->alloc; f++) hits[f]++;
            int64_t bad = 0, first = -1;
            for (int64_t f = 0; f < z->alloc; f++)
                if (hits[f] != 1 && !bad++) first = f;
            CHECK(bad == 0, "part [%d, %d), n %d: %lld floats not in exactly one shard (first %lld, in %d)", u0, u1, n,
                  (long long)bad, (long long)first, first >= 0 ? hits[first] : 0);
            free(hits);
            /* each held parameter's pieces cover it exactly once, in shard order */
            for (int i = 0; i < d->nparams; i++) {
                const cl_param_spec *ps = &d->params[i];
                if (ps->unit < u0 || ps->unit >= u1) continue;
                int64_t a = cl_param_elem(ps) - z->lo, b = a + ps->numel, at = a, sum = 0;
                int ok = 1;
                for (int r = 0; r < n; r++) {
                    int64_t start, len = cl_zero_overlap(a, b, zs[r].shard_lo, zs[r].shard, &start);
                    if (len < 0) ok = 0;
                    if (len <= 0) continue;
                    pieces++;
                    if (start != at || start < zs[r].shard_lo || start + len > zs[r].shard_lo + zs[r].shard) ok = 0;
                    at = start + len;
                    sum += len;
                }
                floats += sum;
                CHECK(ok && sum == ps->numel && at == b, "part [%d, %d), n %d: %s (%lld floats at %lld): pieces sum to %lld, end at %lld%s",
                      u0, u1, n, ps->name, (long long)ps->numel, (long long)a, (long long)sum, (long long)at,
                      ok ? "" : ", with a gap or an overlap");
            }
        }
    }
    printf("zero ranges: 3 parts x dp 1..8, %lld parameter pieces covering %lld floats\n", (long long)pieces, (long long)floats);
    cl_model_desc_free(d);
}

/* ZeRO 2's buckets (cl_model_buckets) and sizes, on the MLP above and on
 * gpt2-tiny cut for tp 2 with sequence parallelism (its layernorms' and, on
 * a part with the embedding or the head alone, the tied wte's gradients
 * kept whole), for parts and bucket sizes from one unit per bucket to one
 * bucket: without trimming the ranges tile the part's parameters from the
 * last to the first, contiguous; trimmed, every held gradient not kept
 * whole lies in exactly one range, every non-empty range starts and ends at
 * one, and there is no range for the head's wte gradient; the sizes'
 * bucket is the largest range, nbuf 2 (1 with one non-empty range), whole
 * the whole-kept gradients' 16-aligned floats, grads the shard. Under a
 * split backward (zb-h1, split 1) the same, with the loss units' gradients
 * (the LM head's lnf) kept whole too: they come in the input pass. */
static void zero2_part(const cl_model_desc *d, int u0, int u1, size_t bucket, int split, int *nchecked) {
    cl_bucket *bk = malloc((size_t)(u1 - u0 + 1) * sizeof *bk);
    CL_ASSERT(bk);
    cl_part_sizes z;
    cl_zero zero = {2, 4, 1, bucket, 0, split, CL_F32};
    cl_model_part_sizes(d, u0, u1, 1, CL_RECOMPUTE_NONE, &zero, &z);
    /* bucket 0: the default from the shard, which the sizes resolve */
    CHECK(z.bucket_bytes == (bucket ? bucket : cl_zero_bucket_default(2, 4, z.shard)), "part [%d, %d) bucket %zu: the sizes cut at %zu",
          u0, u1, bucket, z.bucket_bytes);
    bucket = z.bucket_bytes;
    int n0 = cl_model_buckets(d, u0, u1, z.lo, bucket, 0, split, bk);
    int64_t top = -1, whole = 0, biggest = 0;
    for (int k = 0; k < n0; k++) {
        if (bk[k].hi < 0) continue; /* the head's wte gradient */
        if (top < 0) top = bk[k].hi;
        CHECK(bk[k].hi == top && bk[k].lo < bk[k].hi, "part [%d, %d) bucket %zu: range %d [%lld, %lld) does not continue at %lld",
              u0, u1, bucket, k, (long long)bk[k].lo, (long long)bk[k].hi, (long long)top);
        top = bk[k].lo;
    }
    CHECK(top == 0, "part [%d, %d) bucket %zu: the ranges end at %lld, not 0", u0, u1, bucket, (long long)top);
    int n = cl_model_buckets(d, u0, u1, z.lo, bucket, 1, split, bk), used = 0;
    for (int k = 0; k < n; k++) {
        CHECK(bk[k].hi >= bk[k].lo, "part [%d, %d) bucket %zu: a range for the head's wte gradient under stage 2", u0, u1, bucket);
        if (bk[k].hi - bk[k].lo > biggest) biggest = bk[k].hi - bk[k].lo;
        used += bk[k].hi > bk[k].lo;
        int starts = bk[k].hi == bk[k].lo, ends = starts;
        for (int i = 0; i < d->nparams; i++) {
            int u = d->params[i].unit;
            if (u < u0 || u >= u1 || cl_model_grad_whole(d, u0, u1, split, i)) continue;
            int64_t a = cl_param_elem(&d->params[i]) - z.lo, e = a + (d->params[i].numel + 15) / 16 * 16;
            starts |= a == bk[k].lo;
            ends |= e == bk[k].hi;
        }
        CHECK(starts && ends, "part [%d, %d) bucket %zu: range %d [%lld, %lld) does not start and end at gradients kept in buckets",
              u0, u1, bucket, k, (long long)bk[k].lo, (long long)bk[k].hi);
    }
    for (int i = 0; i < d->nparams; i++) {
        int u = d->params[i].unit;
        int held = (u >= u0 && u < u1) || (i == d->tied_wte && z.tied_copy >= 0);
        if (!held) continue;
        if (split && cl_unit_is_loss(&d->units[u]))
            CHECK(cl_model_grad_whole(d, u0, u1, split, i), "part [%d, %d) split: the loss unit's %s not kept whole", u0, u1,
                  d->params[i].name);
        if (cl_model_grad_whole(d, u0, u1, split, i)) {
            whole += (d->params[i].numel + 15) / 16 * 16;
            continue;
        }
        int64_t a = cl_param_elem(&d->params[i]) - z.lo, b = a + d->params[i].numel;
        int in = 0;
        for (int k = 0; k < n; k++) in += a >= bk[k].lo && b <= bk[k].hi;
        CHECK(in == 1, "part [%d, %d) bucket %zu: %s in %d ranges", u0, u1, bucket, d->params[i].name, in);
        (*nchecked)++;
    }
    CHECK(z.bucket == biggest && z.nbuf == (used > 1 ? 2 : used) && z.whole == whole && z.grads == z.shard,
          "part [%d, %d) bucket %zu: sizes bucket %lld nbuf %d whole %lld grads %lld, want %lld %d %lld %lld", u0, u1, bucket,
          (long long)z.bucket, z.nbuf, (long long)z.whole, (long long)z.grads, (long long)biggest, used > 1 ? 2 : used,
          (long long)whole, (long long)z.shard);
    free(bk);
}

static void test_zero2_buckets(void) {
    cl_model_config mlp, gpt;
    odd_mlp(&mlp);
    CHECK_OK(cl_model_preset("gpt2-tiny", &gpt));
    cl_model_desc *dm = NULL, *dg = NULL;
    cl_tp_layout tl = {2, 1, 1, 128, CL_F32, 1};
    CHECK_OK(cl_model_describe(&mlp, 0, &dm));
    CHECK_OK(cl_model_describe_tp(&gpt, 32, &tl, &dg));
    if (!dm || !dg) return;
    /* the default bucket: a quarter of a ZeRO 2 or 3 shard's bytes, a power of two from 64 KiB to 25 MiB */
    const struct { int stage, n; int64_t shard; size_t want; } defs[] = {
        {2, 4, 105120, 64 << 10}, {3, 4, 16, 64 << 10}, {2, 2, 1 << 20, 1 << 20}, {3, 8, (1 << 20) - 1, 512 << 10},
        {3, 64, (int64_t)1 << 30, 25 << 20}, {1, 4, 1 << 20, 25 << 20}, {3, 1, 1 << 20, 25 << 20}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        CHECK(cl_zero_bucket_default(defs[i].stage, defs[i].n, defs[i].shard) == defs[i].want,
              "cl_zero_bucket_default(%d, %d, %lld) = %zu, want %zu", defs[i].stage, defs[i].n, (long long)defs[i].shard,
              cl_zero_bucket_default(defs[i].stage, defs[i].n, defs[i].shard), defs[i].want);
    const size_t buckets[] = {0, 1, 4096, (size_t)1 << 30};
    int nchecked = 0, whole_parts = 0;
    for (int b = 0; b < 8; b++) {
        int split = b >= 4;
        zero2_part(dm, 0, dm->nunits, buckets[b % 4], split, &nchecked);
        zero2_part(dm, 4, dm->nunits, buckets[b % 4], split, &nchecked);
        zero2_part(dm, 0, 8, buckets[b % 4], split, &nchecked);
        const int cuts[3][2] = {{0, dg->nunits}, {0, 2}, {2, dg->nunits}}; /* whole; embedding + h.0; h.1 + head */
        for (int c = 0; c < 3; c++) {
            zero2_part(dg, cuts[c][0], cuts[c][1], buckets[b % 4], split, &nchecked);
            whole_parts += cl_model_grad_whole(dg, cuts[c][0], cuts[c][1], split, dg->tied_wte);
        }
    }
    CHECK(whole_parts == 16, "the tied wte kept whole on %d parts, want the two pipeline stages at each of 4 bucket sizes, split or not",
          whole_parts);
    printf("zero 2 buckets: 6 parts x 4 bucket sizes x split or not, %d gradients each in exactly one range\n", nchecked);
    cl_model_desc_free(dm);
    cl_model_desc_free(dg);
}

int main(void) {
    make_text();
    test_accumulation();
    test_resume();
    test_save_target();
    test_cap();
    test_error_context();
    test_cap_race();
    test_freed_poison();
    test_schedule();
    test_digits("cnn");
    test_digits("mlp");
    test_padded_vocab();
    same_start("gpt2-tiny");
    same_start("mlp");
    test_replicas_check();
    test_zero_ranges();
    test_zero2_buckets();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return cl_test_report("test_train");
}
