/* Tests of message tags (cl_comm_tag, include/cleave/comm.h, and the
 * pipeline's cl_pp_msg_tag, src/train/pipeline.c).
 *
 * Why: cleave's exchanges (pipeline sends, the tied embedding, the trace and
 * checkpoint gathers) share communicators; a tag of one that wrapped into
 * another's would match the wrong message. Shown here: over every channel's
 * full sequence range no tag is made twice and each decodes to its channel
 * and sequence; a sequence past its field (or before it) and a channel that
 * is not one are refused, the tag left alone; the pipeline's tags stay in
 * their channel for any micro-batch, never share a tag between two (stage,
 * direction), and differ within a window of micro-batches. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleave/comm.h"
#include "cleave/pipeline.h"
#include "common/check.h"
#include "train/internal.h"

static void test_channels(void) {
    static unsigned char seen[CL_COMM_TAG_MAX + 1];
    memset(seen, 0, sizeof seen);
    int ok = 1, twice = 0, decoded = 1, in_range = 1;
    for (int ch = 0; ch < CL_TAG_NCHANNELS; ch++)
        for (int64_t q = 0; q <= CL_TAG_SEQ_MAX; q++) {
            int tag = -1;
            if (cl_comm_tag((cl_tag_channel)ch, q, &tag) != CL_OK) { ok = 0; continue; }
            if (tag < 0 || tag > CL_COMM_TAG_MAX) { in_range = 0; continue; }
            twice += seen[tag]++ != 0;
            decoded &= cl_comm_tag_channel(tag) == ch && cl_comm_tag_seq(tag) == q;
        }
    CHECK(ok, "a sequence inside 0..%d refused: %s", CL_TAG_SEQ_MAX, cl_last_error());
    CHECK(in_range, "a tag outside 0..%d", CL_COMM_TAG_MAX);
    CHECK(twice == 0, "%d tags made twice over the channels' full ranges", twice);
    CHECK(decoded, "a tag decodes to another channel or sequence");
    CHECK(CL_TAG_FIRST(CL_TAG_TRACE) == (int)CL_TAG_TRACE << CL_TAG_SEQ_BITS && cl_comm_tag_channel(CL_TAG_FIRST(CL_TAG_CKPT)) == CL_TAG_CKPT,
          "a channel's first tag: %d", CL_TAG_FIRST(CL_TAG_TRACE));

    /* past the field, before it, and not a channel: refused, the tag untouched */
    struct { int ch; int64_t q; const char *needle; } bad[] = {
        {CL_TAG_PIPE, CL_TAG_SEQ_MAX + 1, "pipeline message 4096"}, {CL_TAG_TRACE, -1, "trace message -1"},
        {CL_TAG_CKPT, INT64_MAX, "checkpoint message"},             {CL_TAG_SHARD, (int64_t)1 << 40, "0..4095"},
        {CL_TAG_NCHANNELS, 0, "not a channel"},                      {-1, 0, "not a channel"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int tag = 12345;
        cl_status s = cl_comm_tag((cl_tag_channel)bad[i].ch, bad[i].q, &tag);
        CHECK(s == CL_ERR_INVALID && tag == 12345, "channel %d sequence %lld: %s, tag %d", bad[i].ch, (long long)bad[i].q,
              cl_status_name(s), tag);
        CHECK(strstr(cl_last_error(), bad[i].needle) != NULL, "channel %d sequence %lld: message '%s' lacks '%s'", bad[i].ch,
              (long long)bad[i].q, cl_last_error(), bad[i].needle);
    }
}

static void test_pipeline(void) {
    static const int stages[] = {1, 2, 3, 4, 7, 8, 16, 100, CL_PP_MAX_STAGES};
    for (size_t k = 0; k < sizeof stages / sizeof stages[0]; k++) {
        int S = stages[k], window = (CL_TAG_SEQ_MAX + 1) / (2 * S), ok = 1, chan = 1, apart = 1, inwin = 1;
        int mbs = 3 * window + 5; /* past the window: the micro-batch wraps, the (stage, direction) never */
        for (int mb = 0; mb < mbs && ok; mb++)
            for (int s = 0; s < S && ok; s++)
                for (int dir = 0; dir < 2; dir++) {
                    int tag;
                    if (cl_pp_msg_tag(S, mb, s, dir, &tag) != CL_OK) { ok = 0; break; }
                    chan &= cl_comm_tag_channel(tag) == CL_TAG_PIPE;
                    /* the sequence names (s, dir) exactly: two of them can never share a tag */
                    apart &= cl_comm_tag_seq(tag) % (2 * S) == 2 * s + dir;
                    /* and the micro-batch within a window */
                    inwin &= cl_comm_tag_seq(tag) / (2 * S) == mb % window;
                }
        CHECK(ok, "S %d: a pipeline tag refused: %s", S, cl_last_error());
        CHECK(chan, "S %d: a pipeline tag outside the pipeline channel", S);
        CHECK(apart, "S %d: a pipeline tag does not name its stage and direction", S);
        CHECK(inwin, "S %d: micro-batches within a window of %d share a tag", S, window);
        CHECK(window >= 8, "S %d: a window of %d micro-batches", S, window);
    }
    int tag = 7;
    CHECK(cl_pp_msg_tag(4, 0, 4, 0, &tag) == CL_ERR_INTERNAL && tag == 7, "stage 4 of 4 accepted");
    CHECK(cl_pp_msg_tag(CL_PP_MAX_STAGES + 1, 0, 0, 0, &tag) == CL_ERR_INTERNAL, "%d stages accepted", CL_PP_MAX_STAGES + 1);
    CHECK(cl_pp_msg_tag(4, 0, 1, 2, &tag) == CL_ERR_INTERNAL, "direction 2 accepted");
    CHECK(cl_pp_msg_tag(4, -1, 1, 0, &tag) == CL_ERR_INTERNAL, "micro-batch -1 accepted");
    CHECK(cl_pp_msg_tag(4, INT_MAX, 3, 1, &tag) == CL_OK && cl_comm_tag_channel(tag) == CL_TAG_PIPE, "the last micro-batch: tag %d", tag);
}

int main(void) {
    test_channels();
    test_pipeline();
    return cl_test_report("test_tags");
}
