/* The response-cache round's wire format for hvdcore/backends/_hotpath.c.
 * Generated from hvdcore/backends/round_wire.py (python -m hvdcore.backends.round_wire
 * --write): do not edit; change round_wire.py and regenerate. */
#ifndef HVDCORE_ROUND_WIRE_H
#define HVDCORE_ROUND_WIRE_H

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the round's words are little-endian: this byte order needs conversions"
#endif

#define ROUND_HEADER_WORDS 2
#define ROUND_LISTS_WORD 0
#define ROUND_FLAGS_WORD 1
#define ROUND_WIRE_VERSION 1
#define ROUND_HEADER_BYTES 16
#define ROUND_WORD_BYTES 8
#define ROUND_FLAG_JOINING 1
#define STEADY_DONE 0
#define STEADY_NOT_READY 1
#define STEADY_PENDING 2

/* the module's PROTOCOL tuple: Py_BuildValue(ROUND_WIRE_PROTOCOL_FORMAT,
 * ROUND_WIRE_PROTOCOL_VALUES) gives round_wire.PROTOCOL */
#define ROUND_WIRE_PROTOCOL_FORMAT "(iiiiiii)"
#define ROUND_WIRE_PROTOCOL_VALUES ROUND_WIRE_VERSION, ROUND_HEADER_BYTES, ROUND_WORD_BYTES, ROUND_FLAG_JOINING, STEADY_DONE, STEADY_NOT_READY, STEADY_PENDING

#endif
