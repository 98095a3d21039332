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
    /* a different model is refused */
    cl_train_config c2 = c;
    c2.model.layers = 3;
    cl_trainer *t;
    CHECK_OK(cl_trainer_create(&t, &c2));
    cl_status s = cl_trainer_resume(t, ck);
    CHECK(s == CL_ERR_INVALID && strstr(cl_last_error(), "different model"), "resume into another model: %s", cl_last_error());
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
    printf("freed-memory poisoning: SKIP (not an AddressSanitizer build)\n");
#endif
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
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return cl_test_report("test_train");
}
