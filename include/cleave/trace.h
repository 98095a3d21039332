/* Pipeline timelines: a trace recorder (one event per executed action), a
 * Chrome trace writer and reader (the JSON that Perfetto and chrome://tracing
 * open), the measured bubble, and an SVG pipeline diagram.
 *
 * An event is one action of one rank, with its start and end in seconds on a
 * clock the ranks share (any origin: the writer subtracts the minimum). The
 * executor adds events as it runs (cl_trace_add) and world rank 0 gathers
 * them into one trace to write. cl_trace_from_sim turns a simulated schedule
 * into the same events, so a drawn schedule and a measured step look alike.
 * A cl_trace has no lock: keep one per rank (thread) and merge them with
 * cl_trace_append; cl_trace_event is plain data (ints and doubles), so ranks
 * of one build can ship their events to rank 0 as bytes.
 *
 * File format (docs/ARCHITECTURE.md, "Timeline traces"): a JSON object
 * {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}; one
 * "X" (complete) event per trace event, ts and dur in microseconds, pid the
 * rank, tid the track, args {"kind","mb","chunk","step"} (and "wait", in
 * microseconds, for the ring's transfers); "M" metadata events
 * name each process "rank N" and its threads "compute" (tid 0) and
 * "send/recv" (tid 1). */
#ifndef CLEAVE_TRACE_H
#define CLEAVE_TRACE_H

#include "cleave/core.h"
#include "cleave/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CL_TRACK_COMPUTE = 0, CL_TRACK_COMM = 1 } cl_trace_track;

/* Kinds a trace holds: a schedule's (cl_act_kind < CL_ACT_NKINDS) and the
 * context-parallel ring's transfers (RING_SEND, RING_RECV: on the comm track,
 * from the post to the completion, with the time waited; the pass that ran
 * them gives their step, mb and chunk). */
/* Ranks are 0 .. CL_TRACE_MAX_RANKS - 1 in files (writer and reader check). */
#define CL_TRACE_MAX_RANKS (1 << 20)

typedef struct {
    int rank;         /* world rank (Chrome pid), >= 0 */
    int track;        /* cl_trace_track (Chrome tid) */
    int step;         /* 1-based training step, 0 if none */
    cl_act_kind kind; /* FWD, BWD_INPUT, BWD_WEIGHT, BWD, SEND_ACT, ..., GRAD_SYNC, OPT_STEP */
    int mb, chunk;    /* micro-batch and chunk (0 for GRAD_SYNC/OPT_STEP) */
    double t0, t1;    /* seconds, any common origin; t0 <= t1 */
    double wait;      /* RING_SEND / RING_RECV: seconds of [t0, t1] the rank spent blocked in the transfer's wait (the rest
                       * overlapped its compute); 0 for the other kinds */
} cl_trace_event;

typedef struct {
    cl_trace_event *ev;
    size_t n, cap;
} cl_trace;

/* Appends a copy of *e, growing the array (a zeroed cl_trace is empty).
 * CL_ERR_OOM if the host refuses; the trace is unchanged then. No checks on
 * the event here: the writer checks. */
cl_status cl_trace_add(cl_trace *t, const cl_trace_event *e);
/* Appends all of src's events to dst (gathering ranks' traces into one);
 * CL_ERR_OOM leaves dst unchanged. */
cl_status cl_trace_append(cl_trace *dst, const cl_trace *src);
/* Frees the events and zeroes *t; NULL and zeroed are fine. */
void cl_trace_free(cl_trace *t);

/* 1 for the compute kinds FWD, BWD_INPUT, BWD_WEIGHT, BWD; else 0. */
int cl_trace_is_compute(cl_act_kind kind);
/* Short letters of a kind as used in event names and diagrams: "F", "B",
 * "W", "BW" (combined backward), "SA", "RA", "SG", "RG", "SYNC", "STEP",
 * "RS", "RR" (the ring's send and receive); "?" for a value out of range. */
const char *cl_trace_kind_letters(cl_act_kind kind);

/* Writes t as a Chrome trace to path: first to path.tmp, then flushed,
 * fsynced and renamed onto path, so path is never half written (a failure
 * leaves any previous file untouched and removes path.tmp). Events in the
 * order of t; ts = (t0 - min t0) * 1e6 and dur = (t1 - t0) * 1e6, printed
 * with 6 decimals (picoseconds). Names are "F mb3 c1" (letters, micro-batch,
 * chunk) and "GRAD_SYNC" / "OPT_STEP". Errors: CL_ERR_INVALID for an event
 * with rank outside 0 .. CL_TRACE_MAX_RANKS - 1, a track other than 0 or 1, a bad kind, mb, chunk or step
 * < 0, times that are not finite or end before they start, or a wait that is
 * negative, not finite or longer than the event (naming the
 * event's index), nothing written; CL_ERR_IO naming the file on a write
 * failure; CL_ERR_OOM. An empty trace writes a valid file with no X events. */
cl_status cl_trace_write_chrome(const char *path, const cl_trace *t);

/* Reads a Chrome trace into *out (fresh: the caller frees it with
 * cl_trace_free; on error *out is left empty). Accepts the object form with
 * "traceEvents" and the bare-array form. Takes every "X" event whose args
 * carry "kind" (a cl_act_kind_name: "FWD", ...); X events without args.kind
 * (another tool's events) and other phases (metadata "M", instants, ...) are
 * skipped. rank = pid, track = tid, t0 = ts * 1e-6, t1 = (ts + dur) * 1e-6,
 * mb / chunk / step from args (absent: 0), wait = args.wait * 1e-6 (absent: 0). Errors, each naming the file and,
 * for an event, its index in traceEvents: CL_ERR_IO (missing, unreadable,
 * a directory), CL_ERR_FORMAT (not JSON, with the byte offset; neither an
 * object with a "traceEvents" array nor an array; an event that is not an
 * object; a cleave event with a missing or non-integer pid/tid, pid outside
 * 0 .. CL_TRACE_MAX_RANKS - 1, tid
 * not 0 or 1, a missing or non-finite ts, a missing, negative or non-finite
 * dur, an unknown kind, mb/chunk/step not non-negative integers, or a wait
 * that is negative, not finite or longer than dur),
 * CL_ERR_OOM. (CL_ERR_FORMAT is core.h's code for a file whose contents are
 * malformed.) */
cl_status cl_trace_read_chrome(const char *path, cl_trace *out);

/* The events of a simulated schedule (r from cl_schedule_simulate(s, ...)),
 * into *out (fresh; the caller frees; on error left empty): one event per
 * action, in each rank's order, rank by rank, all with step 1 and the
 * simulated start and end as seconds (one cost unit = one second). FWD, B, W,
 * BWD and OPT_STEP go on the compute track; sends, receives and GRAD_SYNC on
 * the comm track. Sends, receives, GRAD_SYNC and OPT_STEP take no time in the
 * simulator, so they are zero-width markers (a receive sits where it
 * completes). CL_ERR_INVALID if r does not match s (ranks or lengths). */
cl_status cl_trace_from_sim(const cl_schedule *s, const cl_sim_result *r, cl_trace *out);

/* The step that step selects: step itself if some event has it, or for
 * step == 0 the smallest step present. CL_ERR_INVALID if the trace is empty
 * or step is absent (naming the steps present). */
cl_status cl_trace_pick_step(const cl_trace *t, int step, int *picked);

/* Draws one step as the familiar pipeline diagram, an SVG file written
 * atomically like the trace: one row per rank with events in the step (sorted,
 * labelled "rank N" and with the measured bubble of cl_trace_bubble at the
 * row's end), one box per compute event (FWD, BWD_INPUT, BWD_WEIGHT, BWD:
 * <rect class="act KIND"> with a <title> tooltip), coloured F blue, B green,
 * W purple, BWD orange (odd chunks a lighter shade), labelled with the
 * micro-batch (and ".chunk" when some compute event of the step has chunk >
 * 0) where the box is wide enough; idle time blank; a time axis in s, ms or
 * us from the step's start; a legend. A trace holding ring transfers
 * (RING_SEND / RING_RECV) is drawn in cl_svg_timeline's comm mode: those
 * and the other timed non-compute events as strips under the boxes, a
 * transfer's waited end darker. Otherwise other events are not drawn. step as in
 * cl_trace_pick_step. Errors: CL_ERR_INVALID (no such step, no compute events
 * in it, bad times), CL_ERR_IO, CL_ERR_OOM. */
cl_status cl_trace_render_svg(const char *path, const cl_trace *t, int step);

/* The ring's transfers (RING_SEND and RING_RECV events) of one step (step
 * as in cl_trace_pick_step) over every rank: how many, their time in flight
 * (sum of t1 - t0), the time the ranks waited on them (sum of wait) and the
 * hidden share, 1 - waited / in flight (the part of the flight that
 * overlapped compute; 0 with no flight time). n = 0 when the step has none. */
typedef struct {
    size_t n;
    double flight, waited, hidden;
} cl_trace_ring;
cl_status cl_trace_ring_summary(const cl_trace *t, int step, cl_trace_ring *out);

/* Measured bubble of one step (step as in cl_trace_pick_step), per rank
 * 0..nranks-1, into bubble_per_rank[nranks]:
 *
 *   span      = (latest t1) - (earliest t0) over ALL events of the step, of
 *               every rank and both tracks (the step's wall-clock window);
 *   busy[r]   = length of the union of the intervals [t0, t1] of rank r's
 *               compute events (FWD, BWD_INPUT, BWD_WEIGHT, BWD) in the step
 *               (overlaps are counted once; OPT_STEP, GRAD_SYNC and
 *               communication are not compute);
 *   bubble[r] = 1 - busy[r] / span  (0 if span is 0; 1 for a rank with no
 *               compute events in the step).
 *
 * The span is the step's, not the rank's own first-to-last event: with a
 * per-rank span, 1F1B's last rank would show no bubble although it idles
 * through the warm-up and cool-down. This is the simulator's definition
 * ((makespan - busy) / makespan, its step starting at 0), so for a trace from
 * cl_trace_from_sim the two agree. It needs the ranks' clocks to share an
 * origin (true for the threads backend's cl_now; across hosts, align them
 * first). Errors (CL_ERR_INVALID): nranks < 1, no such step, an event of the
 * step with rank >= nranks or rank < 0. */
cl_status cl_trace_bubble(const cl_trace *t, int step, int nranks, double *bubble_per_rank);

#ifdef __cplusplus
}
#endif

#endif
