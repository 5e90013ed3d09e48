// Placeholder while the tiled kernels are written: the CPU entry points run the reference.
#include "varpack/attention.h"

namespace varpack {

void attention_forward_cpu(const AttentionParams& params, int) { attention_forward_reference(params); }
void attention_backward_cpu(const AttentionBackwardParams& params, int) { attention_backward_reference(params); }

}  // namespace varpack
