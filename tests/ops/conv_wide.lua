-- Convolutions wide enough for the CUDA target's implicit GEMM (an NHWC
-- image of bf16/f16 with channels a multiple of 64, on sm_90a): odd image
-- sizes, strides, dilation, a non-square kernel, a 1x1 downsampling,
-- output channels that are no tile's multiple, and each epilogue (bias or
-- none, an activation, a residual before or after it).
local B = dim("B", 3)
local x = input("x", f32, { B, 13, 11, 64 })
local y = input("y", f32, { B, 7, 9, 128 })
output("plain", conv2d(x, 64, 5, param("c1"), { padding = 2, layout = "nhwc" }))
output("strided", relu(conv2d(x, 72, { 3, 5 }, param("c2"), { stride = 2, padding = { 1, 2 }, layout = "nhwc" })))
-- (times 2: a graph output's widening cast would join the GEMM instead)
output("dilated", gelu(conv2d(y, 104, 3, param("c3"), { dilation = 2, padding = 2, bias = false, layout = "nhwc" })) * 2)
output("pointwise", conv2d(x, 120, 1, param("c4"), { stride = 2, layout = "nhwc" }))
output("residual_relu", relu(conv2d(x, 64, 3, param("c5"), { padding = 1, layout = "nhwc" }) + x))
output("residual", conv2d(y, 128, 3, param("c6"), { padding = 1, layout = "nhwc" }) + y)
