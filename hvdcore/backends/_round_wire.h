/* The response-cache round's wire format for hvdcore/backends/_hotpath.c.
 * Generated from hvdcore/backends/round_wire.py (python -m hvdcore.backends.round_wire
 * --write): do not edit; change its FIELDS table and regenerate. */
#ifndef HVDCORE_ROUND_WIRE_H
#define HVDCORE_ROUND_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the round's words are little-endian: this byte order needs conversions"
#endif

#define ROUND_HEADER_WORDS 2
#define ROUND_LISTS_WORD 0
#define ROUND_FLAGS_WORD 1
#define ROUND_WIRE_VERSION 2
#define ROUND_HEADER_BYTES 16
#define ROUND_WORD_BYTES 8
#define ROUND_FLAG_JOINING 1
#define STEADY_DONE 0
#define STEADY_NOT_READY 1
#define STEADY_PENDING 2
#define ROUND_FIELDS_CRC 371514030

/* the module's PROTOCOL tuple: Py_BuildValue(ROUND_WIRE_PROTOCOL_FORMAT,
 * ROUND_WIRE_PROTOCOL_VALUES) gives round_wire.PROTOCOL */
#define ROUND_WIRE_PROTOCOL_FORMAT "(iiiiiiii)"
#define ROUND_WIRE_PROTOCOL_VALUES ROUND_WIRE_VERSION, ROUND_HEADER_BYTES, ROUND_WORD_BYTES, ROUND_FLAG_JOINING, STEADY_DONE, STEADY_NOT_READY, STEADY_PENDING, ROUND_FIELDS_CRC

/* A steady call's header (round_wire.pack_steady): the table's steady column. */
static inline void round_pack_steady(unsigned char *send, uint64_t lists)
{
    uint64_t h[ROUND_HEADER_WORDS];
    (void)lists;
    h[ROUND_LISTS_WORD] = (uint64_t)lists;
    h[ROUND_FLAGS_WORD] = (uint64_t)0;
    memcpy(send, h, sizeof h); /* native order: little-endian, checked above */
}

/* Whether a reduced round lets a steady call's data run (round_wire.data_may_run): the
 * table's may_run column, then every rank sent this rank's tail. */
static inline int round_may_run(const unsigned char *recv, const unsigned char *tail,
                                size_t tail_len, uint64_t lists_done)
{
    uint64_t h[ROUND_HEADER_WORDS];
    (void)lists_done;
    memcpy(h, recv, sizeof h);
    return h[ROUND_LISTS_WORD] <= (uint64_t)lists_done
        && h[ROUND_FLAGS_WORD] == (uint64_t)0
        && memcmp(recv + ROUND_HEADER_BYTES, tail, tail_len) == 0;
}

#endif
