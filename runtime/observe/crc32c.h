// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord framing uses it, and the
// TFRecord mask ((crc >> 15 | crc << 17) + 0xa282ead8). Table-driven, eight bytes per step
// (slicing-by-8); Debian has no packaged CRC32C library for C++ (libcrc32c is not in bookworm).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zerorun::runtime {

// CRC-32C of `n` bytes, continuing from `crc` (0 for a fresh checksum). Crc32c("123456789") = 0xE3069283.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
// TFRecord's masked form of a CRC-32C.
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace zerorun::runtime
