// A block's shared memory as regions placed one after the other, so that each kernel's layout is
// listed once (its config's layout()) and the compiler computes every offset and the total that
// the launch reserves.
#pragma once

namespace varpack::cuda {

struct SmemPlacer {
  int end = 0;  // bytes placed so far
  // The offset of a region of `bytes` bytes, aligned to `align`.
  constexpr int place(int bytes, int align = 1) {
    end = (end + align - 1) / align * align;
    const int at = end;
    end += bytes;
    return at;
  }
};

// The bytes a launch reserves for a layout of `end` bytes: the dynamic shared memory's base is
// rounded up to 1024 bytes in the kernel (the swizzled tiles need it).
constexpr int smem_launch_bytes(int end) { return 1024 + end; }

}  // namespace varpack::cuda
