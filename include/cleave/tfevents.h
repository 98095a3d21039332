/* cleave tfevents: TensorBoard event files with scalar summaries.
 *
 * A file is a sequence of TFRecords (u64 length, masked CRC32C of the
 * length, the data, masked CRC32C of the data; little-endian), each record
 * one serialized tensorflow Event message: the first carries file_version
 * "brain.Event:2", every later one a wall time, a step and a Summary of
 * scalar values (tag, simple_value). The protobuf is encoded here by hand;
 * nothing of TensorFlow is needed to write or read it. */
#ifndef CLEAVE_TFEVENTS_H
#define CLEAVE_TFEVENTS_H

#include "cleave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cl_tfevents cl_tfevents;

typedef struct {
    const char *tag;   /* e.g. "loss/train", "memory/rank1/activations" */
    float value;
} cl_tfevents_scalar;

/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78) of data[0..n), and
 * the TFRecord mask of a CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t cl_tfevents_crc32c(const void *data, size_t n);
uint32_t cl_tfevents_mask(uint32_t crc);

/* dir can hold event files: a directory (made with its parents when
 * missing) where a file can be created. `what` names the flag in messages. */
cl_status cl_tfevents_check_dir(const char *dir, const char *what);

/* Creates dir (and its parents) when missing and a new event file there,
 * dir/events.out.tfevents.<unix time>.<host> (.<suffix> added when suffix
 * is not NULL; an existing name is never opened: .<pid>.<n> is added until
 * the name is new), and writes its file_version record. */
cl_status cl_tfevents_open(cl_tfevents **out, const char *dir, const char *suffix);
/* One Event at this step (wall time now) holding n scalar values, written
 * whole with one write and so handed to the system before this returns: a
 * crash loses at most the record being written. */
cl_status cl_tfevents_write(cl_tfevents *w, int64_t step, const cl_tfevents_scalar *v, int n);
const char *cl_tfevents_path(const cl_tfevents *w);
/* Closes and frees w (NULL: nothing); a failed close is reported. */
cl_status cl_tfevents_close(cl_tfevents *w);

#ifdef __cplusplus
}
#endif

#endif
