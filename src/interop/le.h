/* Little-endian loads from byte buffers, for the readers of zip and
 * pickle data. */
#ifndef CL_INTEROP_LE_H
#define CL_INTEROP_LE_H

#include <stdint.h>

static inline uint16_t cl_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t cl_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static inline uint64_t cl_le64(const uint8_t *p)
{
    return (uint64_t)cl_le32(p) | (uint64_t)cl_le32(p + 4) << 32;
}

#endif
