/* `cleave tokenize INPUT... --out PREFIX`: text files (one document each)
 * and JSONL files (.jsonl, .ndjson, .json: one document per line, the
 * string field --data-key, blank lines skipped: read by --data's reader,
 * cl_jsonl_next, so both find the same documents) tokenized once into a Megatron-LM indexed
 * dataset, PREFIX.bin and PREFIX.idx, as preprocess_data.py --append-eod
 * writes it without sentence splitting: one sequence per document ending in
 * the end-of-document token, an empty document a document index entry and
 * no sequence, dtype uint16 below 65500 ids else int32.
 *
 * How: documents are taken in batches of about CLEAVE_TOKENIZE_BATCH bytes
 * (16 MiB); each document is cut into pieces of about 256 KiB where the
 * tokenizer allows (cl_tokenizer_cut), the pieces are encoded on OpenMP's
 * threads and joined in order, so the output does not depend on the thread
 * count. A batch's tokens go to PREFIX.bin.part and its documents' token
 * counts to PREFIX.lens.part, then PREFIX.tokenize records how far it got
 * (documents, bytes, and XXH64 hashes of both part files) under a signature
 * of the inputs (paths, sizes, content hashes), the tokenizer and the
 * dtype. A run that finds that record resumes: the part files are cut back
 * to the recorded lengths and their hashes checked; any mismatch starts
 * over. The end writes PREFIX.idx.part, renames .bin then .idx into place
 * and removes the record, so a finished dataset is one with .idx and no
 * record; it is refused unless --overwrite.
 * Invariants: PREFIX.bin/.idx are only ever whole (renamed in); the part
 * files past the recorded lengths are never trusted. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "args.h"
#include "cleave/data.h"
#include "cleave/dataset.h"
#include "cleave/json.h"

static const cli_flag tok_flags[] = {
    {"help", "h", 0, "show this help"},
    {"out", "o", 1, "output prefix: writes PREFIX.bin and PREFIX.idx (required)"},
    {"tokenizer", "", 1, "byte (default), gpt2 or hf (a Hugging Face tokenizer.json in --tokenizer-dir)"},
    {"tokenizer-dir", "", 1, "directory with encoder.json and vocab.bpe (default: gpt2/ in cleave's data); for hf, with tokenizer.json (default: llama3/)"},
    {"data-key", "", 1, "the JSON field holding a JSONL line's text (default text)"},
    {"threads", "", 1, "threads to encode on (default: OpenMP's, the machine's cores)"},
    {"overwrite", "", 0, "replace a finished dataset at PREFIX"},
};

typedef struct {
    const char *path;
    const char *data; /* mapped, NULL when empty */
    size_t size;
    int jsonl;
} input;

typedef struct {
    const char *text;
    size_t len;
    char *owned;     /* a JSONL document's decoded string */
} doc;

typedef struct {
    size_t doc, off, len;
    int32_t *ids;
    size_t n;
    cl_status st;
    char err[512];
} piece;

typedef struct {
    const char *prefix;
    char *bin_part, *lens_part, *rec, *rec_tmp, *idx_part, *bin, *idx;
    const cl_tokenizer *tok;
    int dtype, width;
    int32_t eod;
    int bin_fd, lens_fd;
    XXH64_state_t *bin_h, *lens_h;
    uint64_t sig, docs, bin_bytes;
    /* progress */
    int tty;
    uint64_t total_in, done_in, skipped_in; /* input bytes: all, done, done by an earlier run */
    double t0, last_draw;
    size_t batch_bytes, piece_bytes;
    long kill_after; /* test hook: die like a kill -9 after this many batches (-1: never) */
    long batches;
} run;

static char *cat(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s%s", a, b);
    return p;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* ---- progress bar (a terminal only) ----------------------------------------- */

static void draw(run *r, int final) {
    if (!r->tty) return;
    double now = cl_now();
    if (!final && now - r->last_draw < 0.2) return;
    r->last_draw = now;
    double el = now - r->t0, frac = r->total_in ? (double)r->done_in / (double)r->total_in : 1;
    if (frac > 1) frac = 1;
    double rate = el > 0 ? (double)(r->done_in - r->skipped_in) / el : 0;
    double left = rate > 0 ? (double)(r->total_in - (r->done_in < r->total_in ? r->done_in : r->total_in)) / rate : 0;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '-';
    bar[30] = 0;
    fprintf(stderr, "\r[%s] %3.0f%%  %.1f of %.1f MB  %.2f MB/s  %d:%02d left ", bar, 100 * frac, r->done_in / 1e6, r->total_in / 1e6,
            rate / 1e6, (int)left / 60, (int)left % 60);
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

/* ---- the record of progress ------------------------------------------------- */

static cl_status write_all(int fd, const void *p, size_t n, const char *path) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return cl_error(CL_ERR_IO, "cannot write %s: %s", path, w < 0 ? strerror(errno) : "short write");
        c += w;
        n -= (size_t)w;
    }
    return CL_OK;
}

static cl_status save_record(run *r) {
    char text[512];
    int n = snprintf(text, sizeof text,
                     "cleave tokenize progress 1\nsignature %016" PRIx64 "\ndocuments %" PRIu64 "\nbin_bytes %" PRIu64
                     "\nbin_hash %016" PRIx64 "\nlens_hash %016" PRIx64 "\n",
                     r->sig, r->docs, r->bin_bytes, (uint64_t)XXH64_digest(r->bin_h), (uint64_t)XXH64_digest(r->lens_h));
    int fd = open(r->rec_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return cl_error(CL_ERR_IO, "cannot create %s: %s", r->rec_tmp, strerror(errno));
    cl_status s = write_all(fd, text, (size_t)n, r->rec_tmp);
    if (!s && fsync(fd) != 0) s = cl_error(CL_ERR_IO, "cannot write %s: %s", r->rec_tmp, strerror(errno));
    close(fd);
    if (!s && rename(r->rec_tmp, r->rec) != 0) s = cl_error(CL_ERR_IO, "cannot rename %s: %s", r->rec_tmp, strerror(errno));
    return s;
}

/* XXH64 of the first n bytes of fd into h (reset first). */
static int hash_prefix(int fd, uint64_t n, XXH64_state_t *h) {
    XXH64_reset(h, 0);
    char *buf = malloc(1 << 20);
    if (!buf) return 0;
    uint64_t at = 0;
    while (at < n) {
        size_t want = n - at < (1u << 20) ? (size_t)(n - at) : (1u << 20);
        ssize_t got = pread(fd, buf, want, (off_t)at);
        if (got <= 0) {
            free(buf);
            return 0;
        }
        XXH64_update(h, buf, (size_t)got);
        at += (uint64_t)got;
    }
    free(buf);
    return 1;
}

/* Opens the part files, resuming from the record when it matches; *why gets
 * the reason a record was not used. */
static cl_status open_parts(run *r, int *resumed) {
    *resumed = 0;
    uint64_t sig = 0, docs = 0, bytes = 0, bh = 0, lh = 0;
    FILE *f = fopen(r->rec, "r");
    const char *why = NULL;
    if (f) {
        int ok = fscanf(f, "cleave tokenize progress 1 signature %" SCNx64 " documents %" SCNu64 " bin_bytes %" SCNu64
                           " bin_hash %" SCNx64 " lens_hash %" SCNx64,
                        &sig, &docs, &bytes, &bh, &lh) == 5;
        fclose(f);
        if (!ok) why = "it is not a progress record";
        else if (sig != r->sig) why = "it was made from other inputs, another tokenizer or --data-key";
        /* a crash between the final renames: the finished .bin goes back to being the part */
        if (!why && !exists(r->bin_part) && exists(r->bin)) (void)rename(r->bin, r->bin_part);
    }
    if (f && !why) {
        r->bin_fd = open(r->bin_part, O_RDWR | O_CLOEXEC);
        r->lens_fd = open(r->lens_part, O_RDWR | O_CLOEXEC);
        struct stat sb, sl;
        if (r->bin_fd < 0 || r->lens_fd < 0 || fstat(r->bin_fd, &sb) || fstat(r->lens_fd, &sl)) why = "its part files are missing";
        else if ((uint64_t)sb.st_size < bytes || (uint64_t)sl.st_size < docs * 8) why = "its part files are shorter than it records";
        else if (ftruncate(r->bin_fd, (off_t)bytes) || ftruncate(r->lens_fd, (off_t)(docs * 8))) why = "its part files cannot be cut back";
        else if (!hash_prefix(r->bin_fd, bytes, r->bin_h) || XXH64_digest(r->bin_h) != bh ||
                 !hash_prefix(r->lens_fd, docs * 8, r->lens_h) || XXH64_digest(r->lens_h) != lh)
            why = "its part files do not hash to what it records";
        if (!why) {
            r->docs = docs;
            r->bin_bytes = bytes;
            if (lseek(r->bin_fd, 0, SEEK_END) < 0 || lseek(r->lens_fd, 0, SEEK_END) < 0) return cl_error(CL_ERR_IO, "cannot seek %s", r->bin_part);
            *resumed = 1;
            fprintf(stderr, "cleave: note: resuming %s at document %" PRIu64 " (%" PRIu64 " bytes of tokens kept)\n", r->prefix, docs, bytes);
            return CL_OK;
        }
        if (r->bin_fd >= 0) close(r->bin_fd);
        if (r->lens_fd >= 0) close(r->lens_fd);
    }
    if (why) fprintf(stderr, "cleave: note: %s not resumed (%s); starting over\n", r->rec, why);
    r->docs = r->bin_bytes = 0;
    XXH64_reset(r->bin_h, 0);
    XXH64_reset(r->lens_h, 0);
    r->bin_fd = open(r->bin_part, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (r->bin_fd < 0) return cl_error(CL_ERR_IO, "cannot create %s: %s", r->bin_part, strerror(errno));
    r->lens_fd = open(r->lens_part, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (r->lens_fd < 0) return cl_error(CL_ERR_IO, "cannot create %s: %s", r->lens_part, strerror(errno));
    return save_record(r);
}

/* ---- a batch ------------------------------------------------------------------ */

static cl_status run_batch(run *r, doc *docs, size_t nd) {
    size_t np = 0, cap = 0;
    piece *ps = NULL;
    for (size_t d = 0; d < nd; d++) {
        size_t at = 0;
        do {
            size_t end = cl_tokenizer_cut(r->tok, docs[d].text, docs[d].len, at + r->piece_bytes);
            cl_status s = cl_grow(&ps, sizeof *ps, np, &cap, 64, "the batch's pieces");
            if (s) {
                free(ps);
                return s;
            }
            ps[np++] = (piece){.doc = d, .off = at, .len = end - at};
            at = end;
        } while (at < docs[d].len);
    }
    r->batches++;
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t i = 0; i < np; i++) {
        piece *p = &ps[i];
        p->st = cl_tokenizer_encode(r->tok, docs[p->doc].text + p->off, p->len, &p->ids, &p->n);
        if (p->st) snprintf(p->err, sizeof p->err, "%s", cl_last_error());
#pragma omp atomic
        r->done_in += p->len;
        if (omp_get_thread_num() == 0) draw(r, 0);
    }
    cl_status s = CL_OK;
    size_t tot = 0;
    for (size_t i = 0; i < np && !s; i++) {
        if (ps[i].st) s = cl_error(ps[i].st, "%s", ps[i].err);
        tot += ps[i].n + 1;
    }
    int64_t *lens = calloc(nd ? nd : 1, sizeof *lens);
    int32_t *ids = malloc((tot ? tot : 1) * sizeof *ids);
    unsigned char *bytes = malloc((tot ? tot : 1) * (size_t)r->width);
    size_t n = 0;
    if (!s && (!lens || !ids || !bytes)) s = cl_error(CL_ERR_OOM, "out of host memory");
    for (size_t i = 0; i < np && !s; i++) {
        memcpy(ids + n, ps[i].ids, ps[i].n * sizeof *ids);
        n += ps[i].n;
        lens[ps[i].doc] += (int64_t)ps[i].n;
        /* as preprocess_data.py --append-eod: after a document's tokens, when it has any */
        if ((i + 1 == np || ps[i + 1].doc != ps[i].doc) && lens[ps[i].doc] > 0) {
            ids[n++] = r->eod;
            lens[ps[i].doc]++;
        }
    }
    for (size_t i = 0; i < np; i++) free(ps[i].ids);
    free(ps);
    if (!s) s = cl_idx_pack(r->dtype, ids, n, bytes);
    if (!s) s = write_all(r->bin_fd, bytes, n * (size_t)r->width, r->bin_part);
    if (!s && r->kill_after >= 0 && r->batches > r->kill_after) _exit(137); /* the test's kill: tokens written, no record */
    if (!s) s = write_all(r->lens_fd, lens, nd * sizeof *lens, r->lens_part);
    if (!s && (fdatasync(r->bin_fd) || fdatasync(r->lens_fd))) s = cl_error(CL_ERR_IO, "cannot write %s: %s", r->bin_part, strerror(errno));
    if (!s) {
        XXH64_update(r->bin_h, bytes, n * (size_t)r->width);
        XXH64_update(r->lens_h, lens, nd * sizeof *lens);
        r->docs += nd;
        r->bin_bytes += n * (uint64_t)r->width;
        s = save_record(r);
    }
    free(lens);
    free(ids);
    free(bytes);
    return s;
}

/* ---- inputs --------------------------------------------------------------- */

static void free_docs(doc *d, size_t n) {
    for (size_t i = 0; i < n; i++) free(d[i].owned);
}

/* The next document of input in from *at (a text file: the whole of it, once; a JSONL file: its next line's,
 * read by --data's own reader, cl_jsonl_next); 0 at the end. A JSONL document's string is copied into owned. */
static cl_status next_doc(const input *in, const char *key, size_t *at, size_t *line, doc *d, int *got) {
    *got = 0;
    if (!in->jsonl) {
        if (*line) return CL_OK;
        *line = 1;
        *at = in->size;
        *d = (doc){.text = in->data ? in->data : "", .len = in->size};
        *got = 1;
        return CL_OK;
    }
    cl_json_doc *j;
    const char *str;
    size_t n;
    CL_TRY(cl_jsonl_next(in->path, in->data, in->size, key, at, line, &j, &str, &n));
    if (!j) return CL_OK;
    char *owned = malloc(n + 1);
    if (owned) memcpy(owned, str, n);
    cl_json_free(j);
    if (!owned) return cl_error(CL_ERR_OOM, "out of host memory");
    *d = (doc){.text = owned, .len = n, .owned = owned};
    *got = 1;
    return CL_OK;
}

/* Every document of every input in order; documents before r->docs (done
 * by an earlier run) are counted, not encoded. */
static cl_status tokenize_all(run *r, input *ins, int nin, const char *key) {
    size_t cap = 0, nd = 0, bytes = 0;
    uint64_t consumed = 0; /* input bytes up to the current document */
    doc *docs = NULL;
    uint64_t index = 0, skip = r->docs;
    cl_status s = CL_OK;
    for (int i = 0; i < nin && !s; i++) {
        size_t at = 0, line = 0;
        for (;;) {
            size_t from = at;
            doc d;
            int got;
            if ((s = next_doc(&ins[i], key, &at, &line, &d, &got)) || !got) break;
            consumed += at - from;
            if (index++ < skip) {
                r->done_in = r->skipped_in = consumed;
                free(d.owned);
                continue;
            }
            if ((s = cl_grow(&docs, sizeof *docs, nd, &cap, 1024, "the batch's documents"))) {
                free(d.owned);
                break;
            }
            docs[nd++] = d;
            bytes += at - from;
            if (bytes >= r->batch_bytes) {
                s = run_batch(r, docs, nd);
                r->done_in = consumed; /* the pieces counted text bytes; now the input's */
                free_docs(docs, nd);
                nd = 0;
                bytes = 0;
                if (s) break;
            }
        }
    }
    if (!s && nd) s = run_batch(r, docs, nd);
    free_docs(docs, nd);
    free(docs);
    return s;
}

/* ---- the command --------------------------------------------------------------- */

static cl_status finish(run *r) {
    /* the document lengths, back from the part file */
    size_t nd = (size_t)r->docs;
    int64_t *lens = malloc((nd ? nd : 1) * sizeof *lens);
    if (!lens) return cl_error(CL_ERR_OOM, "out of host memory for %zu document lengths", nd);
    ssize_t got = nd ? pread(r->lens_fd, lens, nd * sizeof *lens, 0) : 0;
    cl_status s = got != (ssize_t)(nd * sizeof *lens) ? cl_error(CL_ERR_IO, "cannot read %s", r->lens_part) : CL_OK;
    if (!s) s = cl_idx_write(r->idx_part, r->dtype, lens, nd);
    free(lens);
    if (!s && (rename(r->bin_part, r->bin) || rename(r->idx_part, r->idx)))
        s = cl_error(CL_ERR_IO, "cannot rename the finished dataset into %s.bin/.idx: %s", r->prefix, strerror(errno));
    if (!s) {
        remove(r->rec);
        remove(r->lens_part);
    }
    return s;
}

static long env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

static int tokenize_cmd(int argc, char **argv, char **flags, input *ins) {
    /* positional inputs apart from the flags */
    int nf = 2, nin = 0;
    flags[0] = argv[0];
    flags[1] = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] == '-' && a[1]) {
            flags[nf++] = argv[i];
            const char *name = a + (a[1] == '-' ? 2 : 1);
            for (int k = 0; k < NFLAGS(tok_flags); k++)
                if ((!strcmp(name, tok_flags[k].name) || !strcmp(name, tok_flags[k].alias)) && tok_flags[k].takes_value && i + 1 < argc)
                    flags[nf++] = argv[++i];
        } else {
            ins[nin++].path = a;
        }
    }
    cli_args a;
    cl_status s = cli_parse(&a, tok_flags, NFLAGS(tok_flags), nf, flags, 2);
    if (s) return cli_fail(s);
    if (cli_get(&a, "help")) {
        cli_print_help("usage: cleave tokenize INPUT... --out PREFIX [--tokenizer byte|gpt2|hf] [--data-key text]\n\n"
                       "Tokenizes text files (each one document) and JSONL files (.jsonl, .ndjson, .json: each line one\n"
                       "document, its --data-key string; blank lines skipped) once into a Megatron-LM indexed dataset, PREFIX.bin and PREFIX.idx,\n"
                       "as preprocess_data.py --append-eod writes it: a sequence per document ending in the end-of-document\n"
                       "token (gpt2: <|endoftext|>, 50256; hf: <|end_of_text|>; byte: 0), uint16 tokens below 65500 ids, else int32.\n"
                       "`cleave train --data PREFIX` trains on it memory-mapped. An interrupted run resumes from\n"
                       "PREFIX.tokenize; a finished dataset is refused unless --overwrite.",
                       tok_flags, NFLAGS(tok_flags));
        return 0;
    }
    const char *prefix = cli_get(&a, "out"), *tname = cli_get(&a, "tokenizer") ? cli_get(&a, "tokenizer") : "byte";
    const char *key = cli_get(&a, "data-key") ? cli_get(&a, "data-key") : "text";
    int threads = 0;
    if ((s = cli_int(&a, "threads", &threads, 1, 4096))) return cli_fail(s);
    if (!prefix) return cli_fail(cl_error(CL_ERR_INVALID, "--out PREFIX is required"));
    if (!nin) return cli_fail(cl_error(CL_ERR_INVALID, "no INPUT given (text or JSONL files to tokenize)"));
    cl_tokenizer *tok = NULL;
    if (!strcmp(tname, "byte")) s = cl_tokenizer_byte(&tok);
    else if (!strcmp(tname, "gpt2")) s = cl_tokenizer_gpt2(&tok, cli_get(&a, "tokenizer-dir"));
    else if (!strcmp(tname, "hf")) s = cl_tokenizer_hf(&tok, cli_get(&a, "tokenizer-dir"));
    else s = cl_error(CL_ERR_INVALID, "unknown --tokenizer '%s' (byte, gpt2 or hf)", tname);
    if (s) return cli_fail(s);
    if (cl_tokenizer_eod(tok) < 0) {
        cl_tokenizer_free(tok);
        return cli_fail(cl_error(CL_ERR_INVALID, "the %s vocabulary has no <|endoftext|> token", tname));
    }

    run r = {.prefix = prefix, .tok = tok, .eod = cl_tokenizer_eod(tok), .bin_fd = -1, .lens_fd = -1, .tty = isatty(2)};
    r.dtype = cl_idx_dtype_for_vocab(cl_tokenizer_vocab(tok));
    r.width = cl_idx_dtype_size(r.dtype);
    r.batch_bytes = (size_t)env_long("CLEAVE_TOKENIZE_BATCH", 16l << 20);
    r.piece_bytes = (size_t)env_long("CLEAVE_TOKENIZE_PIECE", 256l << 10);
    r.kill_after = env_long("CLEAVE_TOKENIZE_KILL_AFTER", -1);
    if (r.batch_bytes < 1) r.batch_bytes = 1;
    if (r.piece_bytes < 1) r.piece_bytes = 1;
    r.bin_part = cat(prefix, ".bin.part");
    r.lens_part = cat(prefix, ".lens.part");
    r.idx_part = cat(prefix, ".idx.part");
    r.rec = cat(prefix, ".tokenize");
    r.rec_tmp = cat(prefix, ".tokenize.tmp");
    r.bin = cat(prefix, ".bin");
    r.idx = cat(prefix, ".idx");
    r.bin_h = XXH64_createState();
    r.lens_h = XXH64_createState();
    if (!r.bin_part || !r.lens_part || !r.idx_part || !r.rec || !r.rec_tmp || !r.bin || !r.idx || !r.bin_h || !r.lens_h)
        s = cl_error(CL_ERR_OOM, "out of host memory");

    /* the inputs, mapped, and the signature of what is made */
    XXH64_state_t *sig = s ? NULL : XXH64_createState();
    if (!s && !sig) s = cl_error(CL_ERR_OOM, "out of host memory");
    if (sig) XXH64_reset(sig, 0);
    char head[256];
    int hn = snprintf(head, sizeof head, "cleave tokenize 1|%s|%016" PRIx64 "|%d|%d|%s|", cl_tokenizer_name(tok), cl_tokenizer_hash(tok),
                      r.dtype, (int)r.eod, key);
    if (sig) XXH64_update(sig, head, (size_t)hn);
    for (int i = 0; i < nin && !s; i++) {
        input *in = &ins[i];
        in->jsonl = ends_with(in->path, ".jsonl") || ends_with(in->path, ".ndjson") || ends_with(in->path, ".json");
        int fd = open(in->path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0) s = cl_error(CL_ERR_IO, "cannot open %s: %s", in->path, strerror(errno));
        else if (fstat(fd, &st) || !S_ISREG(st.st_mode)) s = cl_error(CL_ERR_INVALID, "%s: not a regular file", in->path);
        else if ((in->size = (size_t)st.st_size) > 0) {
            void *m = mmap(NULL, in->size, PROT_READ, MAP_SHARED, fd, 0);
            if (m == MAP_FAILED) s = cl_error(CL_ERR_IO, "cannot map %s: %s", in->path, strerror(errno));
            else {
                in->data = m;
                (void)madvise(m, in->size, MADV_SEQUENTIAL);
            }
        }
        if (fd >= 0) close(fd);
        if (s) break;
        uint64_t h = cl_hash64(in->data ? in->data : "", in->size, 0);
        XXH64_update(sig, in->path, strlen(in->path) + 1);
        XXH64_update(sig, &in->size, sizeof in->size);
        XXH64_update(sig, &h, sizeof h);
        r.total_in += in->size;
    }
    if (sig) {
        r.sig = XXH64_digest(sig);
        XXH64_freeState(sig);
    }

    /* a finished dataset is refused; an unfinished one (its record) resumes */
    int resumed = 0;
    if (!s && !exists(r.rec) && (exists(r.idx) || exists(r.bin)) && !cli_get(&a, "overwrite"))
        s = cl_error(CL_ERR_INVALID, "%s.idx/.bin exist (a finished dataset): --overwrite replaces it", prefix);
    if (!s) s = open_parts(&r, &resumed);
    if (!s) {
        if (threads > 0) omp_set_num_threads(threads);
        r.t0 = r.last_draw = cl_now();
        double t0 = r.t0;
        uint64_t done0 = r.docs;
        s = tokenize_all(&r, ins, nin, key);
        if (!s) r.done_in = r.total_in;
        draw(&r, 1);
        if (!s) s = finish(&r);
        if (!s) {
            double el = cl_now() - t0;
            printf("tokenized %" PRIu64 " documents (%" PRIu64 " this run), %.1f MB in %.2f s (%.2f MB/s) into %s.bin/.idx: %" PRIu64
                   " tokens, %s\n",
                   r.docs, r.docs - done0, r.total_in / 1e6, el, el > 0 ? (r.total_in - r.skipped_in) / 1e6 / el : 0.0, prefix, r.bin_bytes / (uint64_t)r.width,
                   r.dtype == CL_IDX_UINT16 ? "uint16" : "int32");
        }
    }
    if (r.bin_fd >= 0) close(r.bin_fd);
    if (r.lens_fd >= 0) close(r.lens_fd);
    for (int i = 0; i < nin; i++)
        if (ins[i].data) munmap((void *)ins[i].data, ins[i].size);
    if (r.bin_h) XXH64_freeState(r.bin_h);
    if (r.lens_h) XXH64_freeState(r.lens_h);
    free(r.bin_part), free(r.lens_part), free(r.idx_part), free(r.rec), free(r.rec_tmp), free(r.bin), free(r.idx);
    cl_tokenizer_free(tok);
    return s ? cli_fail(s) : 0;
}

int cleave_cmd_tokenize(int argc, char **argv) {
    char **flags = calloc((size_t)argc + 1, sizeof *flags);
    input *ins = calloc((size_t)argc + 1, sizeof *ins);
    int rc = flags && ins ? tokenize_cmd(argc, argv, flags, ins) : cli_fail(cl_error(CL_ERR_OOM, "out of host memory"));
    free(ins);
    free(flags);
    return rc;
}
